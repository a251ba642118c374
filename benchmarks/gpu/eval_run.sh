#!/usr/bin/env bash
# On the GPU machine: `krex eval`'s figures for benchmarks/eval/ (default
# config, every evaluation of a runtime setup submitted at once through the
# Python API): the candidates one at a time (the harness run directly,
# KernelBench's way: the baseline), ungated c16 and krex c16; then the
# catalogue of cheats and honest patterns under krex c16. Tables in
# $OUT/report.md, each setup's evaluations in $OUT/<set>-<setup>.json.
# Usage: benchmarks/gpu/eval_run.sh OUT [SETUPS] [SETS] [LIMIT_S]
#   SETUPS  default direct,ungated,krex (serial: the harness through a runtime
#           of policy `command`, one at a time; direct#2: the noise floor)
#   SETS    default candidates,catalogue (the catalogue runs under krex only;
#           CATALOGUE_SETUPS=direct,krex to change that)
#   LIMIT_S default 570: the whole call's time limit; a set cut short keeps
#           the evaluations that ended. Split SETUPS over calls to stay inside
#           a call's limit: the report reads every setup file of OUT.
# TRIALS (default 30) and WARMUP (default 5): timed trials and warm-up calls
# per model. Fewer than the harness's 100/10 to keep a whole set inside one
# device call: each trial also refreshes its inputs in place (made on the GPU
# by torch's generator) and flushes the L2 before its window, inside the
# region, so a region is held for several times its timed windows.
# Needs the KernelBench problems at .kb/KernelBench/{level1,level2} (or
# .kb/KernelBench/KernelBench/...).
set -uo pipefail
out=$1 setups=${2:-direct,ungated,krex} sets=${3:-candidates,catalogue} limit=${4:-570}
export PYTHONUNBUFFERED=1
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv,noheader
start=$(date +%s)
for set in ${sets//,/ }; do
  what=$setups
  [ "$set" = catalogue ] && what=${CATALOGUE_SETUPS:-krex}
  left=$(( limit - ($(date +%s) - start) - 15 ))  # 15 s kept for the report
  if [ "$left" -le 30 ]; then echo "$set: no time left"; continue; fi
  timeout "$left" python3 benchmarks/eval_bench.py --set "$set" --setups "$what" --out "$out" \
    --trials "${TRIALS:-30}" --warmup "${WARMUP:-5}" \
    > "$out/bench-$set.txt" 2> "$out/progress-$set.txt"
  echo "$set ($what) exit $?"
  tail -3 "$out/progress-$set.txt"
done
python3 benchmarks/eval_bench.py --report-only --out "$out" > "$out/report.md" 2>&1
cat "$out/report.md"
