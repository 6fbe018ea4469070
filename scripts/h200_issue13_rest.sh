#!/usr/bin/env bash
# One device command on a 2-GPU H200 host for what issue 13 still needs on a GPU:
#  1. aiter-triton-silu checked under EP8 (the fix of 2026-11-30) for the four seed models;
#  2. `moe-lab tune` of aiter-triton-silu, TP8 on GPU 0 and TP8+EP8 on GPU 1 at once;
#  3. a sweep of aiter-triton-silu --config default,tuned beside aiter-triton tuned, graph
#     and eager, so notebook 05 shows the fused variant tuned.
# The 58 missing max-autotune compile points are a separate command (it resumes the
# committed folders): MODES=compile:max-autotune-no-cudagraphs \
#   TOKENS=64,1024 bash scripts/h200_compile.sh
# Run from the repo root with the amd-aiter wheel in .whl/ (bash scripts/fetch-device-wheels.sh)
# and MOE_LAB_GIT_COMMIT=<sha>. Everything lands in $OUT/bundle.tar.gz; rerun with the
# bundle's runs/ unpacked into data/runs to resume.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
B=$OUT/bundle; mkdir -p $B/runs $B/logs
export MOE_LAB_DATA=$B/runs
TOKENS=${TOKENS:-1,4,16,64,256,1024,4096,8192}
MODELS=llama4-scout-16e,llama4-maverick-128e,deepseek-r1,qwen3-235b-a22b
BUDGET=${BUDGET:-240}
STAMP=${STAMP:-$(date +%Y%m%d)}
t0=$(date +%s)
CUDA_VISIBLE_DEVICES=0 python3 -m moe_lab check --model $MODELS --tp 8 --ep 1,8 --tokens 1,64,1024,8192 \
  --backends torch,aiter-triton,aiter-triton-silu --out $B/logs/check-silu.txt > $B/logs/check.log 2>&1
echo "check rc=$? ($(( $(date +%s)-t0 )) s)"; tail -12 $B/logs/check.log
tune() {  # gpu ep
  CUDA_VISIBLE_DEVICES=$1 timeout -s TERM -k 20 $(( BUDGET + 40 )) python3 -m moe_lab tune \
    --backend aiter-triton-silu --models $MODELS --tp 8 --ep $2 --tokens $TOKENS --budget $BUDGET \
    --rep-ms 10 --warmup-ms 2 --run-id h200-tune-aiter-triton-silu-fixed-ep$2-$STAMP \
    --configs-dir $B/configs-ep$2/nvidia-h200 --data-dir $B/runs --no-progress > $B/logs/tune-ep$2.log 2>&1
  echo "tune silu ep$2 rc=$? ($(( $(date +%s)-t0 )) s)"
}
tune 0 1 & tune 1 8 & wait
mkdir -p $B/configs/nvidia-h200
for d in $B/configs-ep*/nvidia-h200; do cp -rn $d/. $B/configs/nvidia-h200/ 2>/dev/null; done
# the sweep reads tuned files from the data dir's ../configs: the committed ones plus the new
cp -rn data/configs/nvidia-h200/. $B/configs/nvidia-h200/
sweep() {  # gpu ep
  CUDA_VISIBLE_DEVICES=$1 timeout -s TERM -k 20 200 python3 -m moe_lab sweep --models $MODELS --tp 8 --ep $2 \
    --tokens $TOKENS --backends aiter-triton,aiter-triton-silu --config default,tuned --modes graph,eager \
    --data-dir $B/runs --run-id h200-silu-tuned-ep$2-$STAMP --no-progress > $B/logs/sweep-ep$2.log 2>&1
  echo "sweep ep$2 rc=$? ($(( $(date +%s)-t0 )) s)"
}
sweep 0 1 & sweep 1 8 & wait
for f in $B/logs/*.log; do echo "== $f"; tail -3 $f; done
tar czf $OUT/bundle.tar.gz -C $OUT bundle && rm -rf $B
