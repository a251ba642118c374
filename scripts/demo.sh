#!/usr/bin/env bash
# Install everything and start the demo: a runtime on 4 simulated GPUs under
# policy krex, a synthetic kernel-agent workload, and the operator console
# (krex-console). Quitting the console (q or Ctrl-C) ends all three. Files
# of the run are kept in .demo/ (KREX_DEMO_DIR: elsewhere), emptied at start.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

demo=${KREX_DEMO_DIR:-$PWD/.demo}
rm -rf "$demo"
mkdir -p "$demo"
export KREX_RUN_DIR=$demo/run
.venv/bin/krex-runtime --config configs/simulated.toml --run-dir "$KREX_RUN_DIR" \
  --trace "$demo/trace.jsonl" >"$demo/runtime.log" 2>&1 &
runtime=$!
workload=
cleanup() {
  [ -n "$workload" ] && kill "$workload" 2>/dev/null
  kill -TERM "$runtime" 2>/dev/null && wait "$runtime" 2>/dev/null
  echo "demo: stopped; trace in $demo/trace.jsonl (krex trace $demo/trace.jsonl)"
}
trap cleanup EXIT
for _ in $(seq 100); do
  [ -S "$KREX_RUN_DIR/control.sock" ] && break
  kill -0 "$runtime" 2>/dev/null || { cat "$demo/runtime.log" >&2; exit 1; }
  sleep 0.1
done
.venv/bin/python -m krex_runtime.demo.workload --inflight 12 >"$demo/workload.log" 2>&1 &
workload=$!
.venv/bin/krex-console
