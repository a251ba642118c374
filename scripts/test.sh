#!/usr/bin/env bash
# Install everything (venv, packages, native build) and run the whole test
# suite. Extra arguments go to pytest. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/lint-imports --no-cache
# Lint and types (pyproject.toml: [tool.ruff], [tool.mypy]; strict on krex_runtime).
.venv/bin/ruff check .
.venv/bin/mypy
set +e
# Two workers, a test file each at a time (a file's tests share its runtime);
# then, alone, the tests that measure the simulator's timing (marker `serial`),
# which another worker's load would inflate. Exit status 5: that part
# collected no test (a selection with none of its tests).
.venv/bin/python -m pytest -ra -n 2 --dist loadfile --durations=15 -m "not serial" "$@"
parallel=$?
.venv/bin/python -m pytest -ra -m serial "$@"
alone=$?
set -e
if [ "$parallel" -eq 5 ] && [ "$alone" -eq 5 ]; then
  echo "test: pytest collected no tests" >&2
  exit 5
fi
for status in "$parallel" "$alone"; do
  if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then
    exit "$status"
  fi
done
exit 0
