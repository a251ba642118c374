"""Hypothesis settings for the fuzzers.

CI runs the "ci" profile: few examples, derandomized and without an example
database, so a run is reproducible and leaves nothing behind; no deadline,
because a shared 2-core machine makes single examples slow at random. Run
longer locally with KREX_FUZZ_EXAMPLES=5000 (the "long" profile: random
seeds, still no database) or pick a profile with --hypothesis-profile.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_common = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("ci", max_examples=60, derandomize=True, **_common)
settings.register_profile("long", max_examples=int(os.environ.get("KREX_FUZZ_EXAMPLES", "2000")), **_common)
settings.load_profile("long" if os.environ.get("KREX_FUZZ_EXAMPLES") else "ci")
