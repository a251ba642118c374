"""This checkout's root on the import path, so that a benchmark run by any
python3 (`python3 benchmarks/NAME.py`) imports the checkout's krex_runtime,
installed or not. Imported by a script before its own krex imports."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
