#!/usr/bin/env bash
# One device command on a 1-GPU H200 lease (issue 17): the H200 runs the review export needs,
# with per-call samples (every sweep keeps them now) and an eager trace of every point.
#   a, b   the same sweep twice in two fresh processes (same commit, same seed, so equal
#          inputs): `moe-lab compare a b` of two runs of one commit, and a against itself;
#          --traces 1000 traces every point for the eager split (moe-lab profile --split --run)
#   tuned  aiter-triton with its shipped (default) and tuned configurations in one run, graph:
#          `moe-lab compare tuned --by config --values default,tuned`
#   split  `moe-lab profile --split` live at three points: the split plus the same call timed
#          with and without the profiler, which measures the profiler's own cost
# Then the checks run there, so the bundle says what they printed. Run from the repo root with
# the amd-aiter wheel in .whl/ (bash scripts/fetch-device-wheels.sh) and
# MOE_LAB_GIT_COMMIT=<sha>; every stage is cut so that the bundle is packed by DEADLINE_S
# (560 s; device limit 600 s).
# Sweeps resume: rerunning the same command finishes a pass that ran out of time.
# Everything lands in $OUT/bundle.tar.gz.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
B=$OUT/bundle; mkdir -p $B/runs $B/logs
STAMP=$(date -u +%Y%m%d)
PASS_S=${PASS_S:-180}; TUNED_S=${TUNED_S:-100}; DEADLINE_S=${DEADLINE_S:-560}
MODELS=${MODELS:-llama4-scout-16e,deepseek-r1}
TOKENS=${TOKENS:-1,16,64,256,1024,4096}
t0=$(date +%s)
lim() {  # seconds a stage may take: its own limit, cut so the bundle is packed by DEADLINE_S
  local left=$(( DEADLINE_S - ($(date +%s) - t0) ))
  (( left < $1 )) && echo $(( left > 5 ? left : 5 )) || echo $1
}
for pass in a b; do
  timeout -s TERM -k 20 $(lim $PASS_S) python3 -m moe_lab sweep --models $MODELS --tp 8 --ep 1 \
    --tokens $TOKENS --backends torch-grouped,aiter-triton --modes eager,graph --traces 1000 \
    --data-dir $B/runs --run-id h200-review-$pass-$STAMP --no-progress \
    > $B/logs/sweep-$pass.log 2>&1
  echo "pass $pass rc=$? ($(( $(date +%s)-t0 )) s)"; tail -1 $B/logs/sweep-$pass.log
done
timeout -s TERM -k 20 $(lim $TUNED_S) python3 -m moe_lab sweep --models $MODELS --tp 8 --ep 1 \
  --tokens $TOKENS --backends aiter-triton --config default,tuned --modes graph \
  --data-dir $B/runs --run-id h200-review-tuned-$STAMP --no-progress > $B/logs/sweep-tuned.log 2>&1
echo "tuned rc=$? ($(( $(date +%s)-t0 )) s)"; tail -1 $B/logs/sweep-tuned.log
for point in "deepseek-r1 1" "deepseek-r1 64" "llama4-scout-16e 1024"; do
  set -- $point
  timeout -k 5 $(lim 40) python3 -m moe_lab profile --split --model $1 --tokens $2 --backend aiter-triton \
    --tp 8 --trace $B/logs/split-$1-T$2.json.gz >> $B/logs/profile_split.log 2>&1
  echo "profile --split $1 T=$2 rc=$? ($(( $(date +%s)-t0 )) s)"
done
A=$B/runs/h200-review-a-$STAMP
timeout $(lim 30) python3 -m moe_lab profile --split --run $A > $B/logs/split-run-a.txt 2>&1
echo "split of a rc=$?"; tail -1 $B/logs/split-run-a.txt
timeout $(lim 60) python3 -m moe_lab compare $A $B/runs/h200-review-b-$STAMP --out $B/compare \
  > $B/logs/compare-a-b.txt 2>&1; echo "compare a b rc=$?"; tail -1 $B/logs/compare-a-b.txt
timeout $(lim 60) python3 -m moe_lab compare $A $A --out $B/compare > $B/logs/compare-a-a.txt 2>&1
echo "compare a a rc=$?"; tail -1 $B/logs/compare-a-a.txt
timeout $(lim 60) python3 -m moe_lab compare $B/runs/h200-review-tuned-$STAMP --by config \
  --values default,tuned --out $B/compare > $B/logs/compare-tuned.txt 2>&1
echo "compare tuned rc=$? ($(( $(date +%s)-t0 )) s)"; tail -1 $B/logs/compare-tuned.txt
tar czf $OUT/bundle.tar.gz -C $OUT bundle && rm -rf $B
