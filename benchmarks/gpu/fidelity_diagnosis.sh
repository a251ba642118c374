#!/usr/bin/env bash
# On the GPU machine: what slows trials inside verified regions?
#  1. the controlled experiment (benchmarks/perturbation_probe.py, no runtime);
#  2. KernelBench level 2 through krex bench (default config, c16) with every
#     trial's detail, a node timeline beside it, and each setup's trace kept;
#  3. the join of the two (benchmarks/slow_trials.py).
# Usage: benchmarks/gpu/fidelity_diagnosis.sh SUITE_DIR PROBLEMS OUT [VARIANTS]
set -uo pipefail
suite=$1 problems=$2 out=$3
variants=${4:-preload/process/gpu-only,preload/process/gpu+cpu,preload/pooled/gpu-only}
probe_problems=${PROBE_PROBLEMS:-8,11,40,76}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv
if [ "${SKIP_PROBE:-0}" != 1 ]; then
  python3 benchmarks/perturbation_probe.py --suite "$suite" --problems "$probe_problems" --rounds 2 \
    --out "$out/perturbation.json" 2>&1 | tail -20
fi
python3 benchmarks/node_timeline.py --gpu 0 --out /tmp/timeline.jsonl --period-ms 20 &
timeline=$!
rm -rf /tmp/kb /tmp/kbout
python3 -m krex_bench run --gpu 0 --concurrency 16 --suite "$suite" --suite-problems "$problems" \
  --native 0 --no-ungated --variants "$variants" --trial-detail --keep --work-dir /tmp/kb --out /tmp/kbout \
  2>&1 | grep -v '^\s*$' | tail -40
kill $timeline; wait $timeline
mkdir -p "$out/traces"
for d in /tmp/kb/*/; do n=$(basename "$d"); cp "$d/run/trace.jsonl" "$out/traces/trace-$n.jsonl" 2>/dev/null; done
cp /tmp/kbout/results.json "$out/results.json"
gzip -c /tmp/timeline.jsonl > "$out/timeline.jsonl.gz"
i=0
python3 - <<'PY' > /tmp/labels
import json; print("\n".join(r["setup"]["label"] for r in json.load(open("/tmp/kbout/results.json"))["runs"]))
PY
while read -r label; do
  python3 benchmarks/slow_trials.py --results /tmp/kbout/results.json --setup "$label" \
    --trace "$out/traces/trace-$(printf %02d $i).jsonl" --timeline /tmp/timeline.jsonl
  i=$((i+1))
done < /tmp/labels
