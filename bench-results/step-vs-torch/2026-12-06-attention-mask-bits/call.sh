#!/usr/bin/env bash
# On an H200: the quick step beside PyTorch (the targets are the H200's), then the
# A/B, one round. On an H100: the A/B, two rounds.
set -u
cd "$(dirname "$0")/.."
O=${OUT:?}
mkdir -p "$O"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $gpu"
rounds=2 budget=480 lim=540
if [[ "$gpu" == *H200* ]]; then
  STEP_QUICK=1 REPEATS=1 OUT=$O/quick timeout 200 bash scripts/gpu-run.sh step-vs-torch > "$O/quick-stdout.txt" 2>&1
  echo "quick rc $?"
  rounds=1 budget=280 lim=330
fi
ROUNDS=$rounds OUT=$O/ab BUDGET_SECONDS=$budget timeout $lim bash scripts/gpu-ab.sh > "$O/ab-stdout.txt" 2>&1
echo "ab rc $?"
head -16 "$O/ab/ab.md"
grep -E "coop|all" "$O/ab/ab.md" | grep f16
grep -h -E "^test result|FAILED|panicked" "$O"/ab/tests-*.txt
grep -i skip "$O/ab/ab.md"
[ -d "$O/quick" ] && { tail -25 "$O/quick-stdout.txt"; ls "$O/quick"; }
