#!/usr/bin/env bash
# Issue 18: the seed's own layout, TP8 against EP8 (all-reduce and all-to-all) on one 8-GPU
# H200 host (device kind nvidia-h200-x8; nvidia-h200-x4 for a TP4/EP4 first step with
# NPROC=4). The four seed models with their real TP8/EP8 shards, 1..8192 tokens, uniform
# and zipf:1.2 routing, eager then graph; notebook 06 draws it beside the 8-rank estimate it
# builds from the 2-GPU run. One step per device command (10 minutes each), resumable:
#
#   STEP=eager bash scripts/h200x8_distributed.sh
#   STEP=graph bash scripts/h200x8_distributed.sh
#
# From the repo root with the amd-aiter wheel in .whl/ and MOE_LAB_GIT_COMMIT=<sha>; the
# runs live in out/runs/ (kept on a warm machine; a folder already in data/runs/ is copied
# there first) and every step's $OUT/bundle-*.tar.gz holds all of them.
set -uo pipefail
STEP=${STEP:?set STEP=eager|graph}
NPROC=${NPROC:-8}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
B=$OUT/bundle-x$NPROC-$STEP; mkdir -p $B
RUNS=${RUNS:-$PWD/out/runs}; mkdir -p $RUNS
STAMP=${STAMP:-$(date -u +%Y%m%d)}
ID=h200x$NPROC-expert-parallel-$STAMP
[ -d data/runs/$ID ] && [ ! -d $RUNS/$ID ] && cp -r data/runs/$ID $RUNS/
nvidia-smi -L > $B/gpus.txt 2>&1
timeout -s TERM -k 60 ${LIMIT_S:-540} python3 -m moe_lab sweep --nproc $NPROC --modes $STEP \
  --models llama4-scout-16e,llama4-maverick-128e,deepseek-r1,qwen3-235b-a22b \
  --tokens ${TOKENS:-1,4,16,64,256,1024,4096,8192} --routing uniform,zipf:1.2 \
  --backends ${BACKENDS:-torch-grouped} --parallel tp-allreduce,ep-allreduce,ep-alltoall \
  --data-dir $RUNS --run-id $ID --dist-timeout 300 > $RUNS/$ID-$STEP.log 2>&1
echo "$ID $STEP rc=$?"; tail -2 $RUNS/$ID-$STEP.log
cp -r $RUNS $B/runs
tar czf $OUT/bundle-x$NPROC-$STEP.tar.gz -C $OUT bundle-x$NPROC-$STEP && rm -rf $B
