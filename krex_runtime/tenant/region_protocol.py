"""THE version of the region channel's protocol (docs/native.md, "Region
channel"), which a tenant names in its HELLO and the runtime checks.

The one definition: the Python client (tenant/region.py) and the runtime's
channel (regions/channel.py) import it, and the C client's header
(native/src/intercept/region_protocol.h) is generated from this file by
native/tools/gen_region_protocol.py (`make -C native region-protocol`; a test
fails while the two differ). Raise it when a message changes meaning.
"""

from __future__ import annotations

PROTOCOL = 2
