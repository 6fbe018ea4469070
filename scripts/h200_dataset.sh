#!/usr/bin/env bash
# One device command: checks, ceilings, the first dataset, repeatability evidence.
# Run on the lent H200 from the repo root with the amd-aiter wheel carried in .whl/.
# Everything lands in $OUT/bundle.tar.gz (the tool returns at most 8 files).
set -uo pipefail
# the device copy has no .git: the caller passes MOE_LAB_GIT_COMMIT=<sha> in the command
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
B=$OUT/bundle; mkdir -p $B/checks $B/ceilings $B/runs $B/evidence
STAMP=$(date -u +%Y%m%d)
SWEEP_S=${SWEEP_S:-400}
t0=$(date +%s)
python3 -m moe_lab check --tokens 1,64,1024 --tp 8 --ep 1,8 \
  --backends torch,torch-grouped,aiter-triton,aiter,vllm --out $B/checks/h200-$STAMP.txt \
  > $B/checks/stdout.txt 2>&1; echo "check rc=$? ($(( $(date +%s)-t0 )) s)"
python3 -m moe_lab ceilings --out-dir $B/ceilings > $B/ceilings/stdout.txt 2>&1; echo "ceilings rc=$? ($(( $(date +%s)-t0 )) s)"
timeout $SWEEP_S python3 -m moe_lab sweep --tp 8 --ep 1,8 --tokens 1-8192 \
  --backends torch,torch-grouped,aiter-triton --modes eager,graph --routing uniform \
  --data-dir $B/runs --run-id h200-seed4-$STAMP --traces 4 --no-progress > $B/runs/sweep_stdout.txt 2>&1
echo "sweep rc=$? ($(( $(date +%s)-t0 )) s)"
python3 scripts/repeatability.py $B/evidence 5 > $B/evidence/stdout.txt 2>&1; echo "repeat rc=$? ($(( $(date +%s)-t0 )) s)"
tail -3 $B/checks/stdout.txt; tail -3 $B/runs/sweep_stdout.txt; tail -8 $B/evidence/stdout.txt; cat $B/ceilings/stdout.txt | tail -5
tar czf $OUT/bundle.tar.gz -C $OUT bundle && rm -rf $B
