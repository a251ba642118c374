"""`python -m krex_runtime.cli`: krex without its installed script."""

import sys

from krex_runtime.cli import main

sys.exit(main())
