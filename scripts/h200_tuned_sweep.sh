#!/usr/bin/env bash
# One device command on a 2-GPU H200 host (issue 13), after h200_tune.sh: resume the tune
# of aiter-triton (the committed candidates travel in data/runs), then the seed sweep with
# --config default,tuned: four models, 1..8192 tokens, eager and graph, TP8 on GPU 0 and
# TP8+EP8 on GPU 1 at once; then aiter-triton-silu in its own process (it once wrote out of
# bounds: a crash there must not cost the sweep). Run from the repo root with the amd-aiter
# wheel in .whl/ and MOE_LAB_GIT_COMMIT=<sha>. Everything lands in $OUT/bundle.tar.gz.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
B=$OUT/bundle; mkdir -p $B/runs $B/logs
STAMP=$(date -u +%Y%m%d)
MODELS=llama4-scout-16e,llama4-maverick-128e,deepseek-r1,qwen3-235b-a22b
TUNE_S=${TUNE_S:-190}; SWEEP_S=${SWEEP_S:-300}
t0=$(date +%s)
lane() {  # gpu ep
  local g=$1 ep=$2 run=h200-tune-aiter-triton-ep$2-20261130
  cp -r data/runs/$run $B/runs/$run   # resume: committed candidates are not re-timed
  CUDA_VISIBLE_DEVICES=$g timeout -s TERM -k 20 $(( TUNE_S + 40 )) python3 -m moe_lab tune \
    --backend aiter-triton --models $MODELS --tp 8 --ep $ep --tokens 1,4,16,64,256,1024,4096,8192 \
    --budget $TUNE_S --rep-ms 10 --warmup-ms 2 --run-id $run --data-dir $B/runs \
    --configs-dir $B/configs-ep$ep/nvidia-h200 --no-progress > $B/logs/tune-ep$ep.log 2>&1
  echo "tune ep$ep rc=$? ($(( $(date +%s)-t0 )) s)"
  mkdir -p data/configs/nvidia-h200/aiter-triton   # the sweep reads tuned files from data/configs
  cp $B/configs-ep$ep/nvidia-h200/aiter-triton/E=*.json data/configs/nvidia-h200/aiter-triton/
  CUDA_VISIBLE_DEVICES=$g timeout -s TERM -k 20 $SWEEP_S python3 -m moe_lab sweep --models $MODELS \
    --tp 8 --ep $ep --tokens 1-8192 --backends torch-grouped,aiter-triton --config default,tuned \
    --modes eager,graph --data-dir $B/runs --run-id h200-tuned-ep$ep-$STAMP --no-progress \
    > $B/logs/sweep-ep$ep.log 2>&1
  echo "sweep ep$ep rc=$? ($(( $(date +%s)-t0 )) s)"; tail -1 $B/logs/sweep-ep$ep.log
  CUDA_VISIBLE_DEVICES=$g timeout -s TERM -k 10 45 python3 -m moe_lab sweep --models $MODELS \
    --tp 8 --ep $ep --tokens 1,64,4096 --backends aiter-triton-silu --modes graph \
    --data-dir $B/runs --run-id h200-tuned-ep$ep-$STAMP --no-progress > $B/logs/silu-ep$ep.log 2>&1
  echo "silu ep$ep rc=$? ($(( $(date +%s)-t0 )) s)"; tail -1 $B/logs/silu-ep$ep.log
}
lane 0 1 & lane 1 8 & wait
tar czf $OUT/bundle.tar.gz -C $OUT bundle && rm -rf $B
