#!/usr/bin/env bash
# Install everything (venv, packages, native build) and run the whole test
# suite. Extra arguments go to pytest. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
set +e
.venv/bin/lint-imports --no-cache && .venv/bin/python -m pytest -ra "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "test: pytest collected no tests" >&2
fi
exit "$status"
