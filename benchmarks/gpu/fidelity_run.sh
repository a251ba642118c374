#!/usr/bin/env bash
# On the GPU machine: the quoted fidelity figures for a KernelBench-format
# suite (default config, c16, commands submitted at once through the Python
# API): native and its repeat one at a time (pooled: the same timer in a warm
# process), ungated, and process / forked / pooled under KREX; every trial's
# detail kept for benchmarks/slow_trials.py; each setup's trace kept.
# Usage: benchmarks/gpu/fidelity_run.sh SUITE_DIR PROBLEMS OUT [BENCH_TIMEOUT_S]
set -uo pipefail
suite=$1 problems=$2 out=$3 limit=${4:-420}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv,noheader
rm -rf /tmp/kb /tmp/kbout
timeout "$limit" python3 -m krex_bench run --gpu 0 --concurrency 16 --suite "$suite" --suite-problems "$problems" \
  --native 2 --native-mode pooled --variants preload/process/gpu-only,preload/forked/gpu-only,preload/pooled/gpu-only \
  --trial-detail --keep --work-dir /tmp/kb --out /tmp/kbout > "$out/bench.txt" 2>&1
echo "bench exit $?"
grep -v '^\s*$' "$out/bench.txt" | grep -v '^| <0.1\|^| 0.1-1' | tail -75
(cd /tmp/kb && tar czf "$out/traces.tgz" */run/trace.jsonl)  # one file: what comes back is counted in files
cp /tmp/kbout/results.json "$out/results.json" 2>/dev/null
cp /tmp/kbout/report.md "$out/report.md" 2>/dev/null
