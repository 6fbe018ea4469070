#!/usr/bin/env bash
# One device command on a 2-GPU H200 host (issue 13), after h200_tuned_sweep.sh: tune
# aiter-triton for Qwen3-235B (TP8 on GPU 0, TP8+EP8 on GPU 1) and resume DeepSeek-R1 EP8's
# tail (4096, 8192 tokens) on GPU 1, then measure Qwen3's tuned points (eager and graph,
# 1..8192 tokens), which h200-tuned-20261130 has as `unsupported` (no tuned file then).
# Run from the repo root with the amd-aiter wheel in .whl/ and MOE_LAB_GIT_COMMIT=<sha>.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
B=$OUT/bundle; mkdir -p $B/runs $B/logs
TUNE_S=${TUNE_S:-200}; SWEEP_S=${SWEEP_S:-150}; TOK=1,4,16,64,256,1024,4096,8192
t0=$(date +%s)
tune() {  # gpu ep model tokens run-id budget
  CUDA_VISIBLE_DEVICES=$1 timeout -s TERM -k 20 $(( $6 + 40 )) python3 -m moe_lab tune \
    --backend aiter-triton --models $3 --tp 8 --ep $2 --tokens $4 --budget $6 --rep-ms 10 \
    --warmup-ms 2 --run-id $5 --data-dir $B/runs --configs-dir $B/configs-ep$2/nvidia-h200 \
    --no-progress > $B/logs/$5.log 2>&1
  echo "tune $5 rc=$? ($(( $(date +%s)-t0 )) s)"; tail -2 $B/logs/$5.log
  mkdir -p data/configs/nvidia-h200/aiter-triton
  cp $B/configs-ep$2/nvidia-h200/aiter-triton/E=*.json data/configs/nvidia-h200/aiter-triton/
}
sweep() {  # gpu ep
  CUDA_VISIBLE_DEVICES=$1 timeout -s TERM -k 20 $SWEEP_S python3 -m moe_lab sweep \
    --models qwen3-235b-a22b --tp 8 --ep $2 --tokens 1-8192 --backends aiter-triton \
    --config tuned --modes eager,graph --data-dir $B/runs --run-id h200-tuned-qwen3-ep$2-20261130 \
    --no-progress > $B/logs/sweep-ep$2.log 2>&1
  echo "sweep ep$2 rc=$? ($(( $(date +%s)-t0 )) s)"; tail -1 $B/logs/sweep-ep$2.log
}
(tune 0 1 qwen3-235b-a22b $TOK h200-tune-aiter-triton-qwen3-ep1-20261130 $TUNE_S; sweep 0 1) &
(cp -r data/runs/h200-tune-aiter-triton-ep8-20261130 $B/runs/
 tune 1 8 deepseek-r1 4096,8192 h200-tune-aiter-triton-ep8-20261130 60
 tune 1 8 qwen3-235b-a22b $TOK h200-tune-aiter-triton-qwen3-ep8-20261130 $(( TUNE_S - 70 )); sweep 1 8) &
wait
tar czf $OUT/bundle.tar.gz -C $OUT bundle && rm -rf $B
