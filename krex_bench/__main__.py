"""`python -m krex_bench`: the krex-bench program, from a checkout used without installing."""

import sys

from krex_bench.cli import main

sys.exit(main())
