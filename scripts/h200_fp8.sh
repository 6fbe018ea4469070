#!/usr/bin/env bash
# One device command on a 2-GPU H200 host (issue 15): FP8 as the seed models ship it.
# Lane per GPU: TP8 on GPU 0, TP8+EP8 on GPU 1, at once. In each lane:
#   1. checks: every FP8 backend x scheme against the FP8 reference (fp32 on the same
#      dequantised operands), with the schemes' own seed models: fp8-block128 on
#      DeepSeek-R1 and Qwen3-235B, fp8-channel on Llama-4 Scout and Maverick, fp8-tensor
#      on DeepSeek-R1; 1, 64 and 1024 tokens. Reports in $B/checks/.
#   2. sweeps, 1..8192 tokens, eager and graph: DeepSeek-R1 fp8-block128 and Llama-4-Scout
#      fp8-channel (torch-fp8-grouped, torch-fp8, aiter-triton, torch-fp8-dequant), then the
#      same models in bf16 (torch-grouped, aiter-triton default and tuned) in the same
#      lease, so notebook 01/03's FP8-vs-bf16 speedups compare one machine.
# aiter-triton has no fp8-channel and no tuned fp8 files yet: those points are
# `unsupported` rows saying so. Resumable: with STAMP=<the first lease's YYYYMMDD> and the
# partial runs under data/runs (committed or carried), a rerun measures only what is missing.
# STEP=tune (a second lease, after the first is committed): `moe-lab tune` of aiter-triton
# for DeepSeek-R1 fp8-block128 per lane, then its sweep with --config default,tuned into
# the same run folder (the fp8 tuned files are named with vLLM's dtype/block_shape suffix).
# Run from the repo root with the amd-aiter wheel in .whl/ (scripts/fetch-device-wheels.sh)
# and MOE_LAB_GIT_COMMIT=<sha>. Everything lands in $OUT/bundle.tar.gz.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
B=$OUT/bundle; mkdir -p $B/runs $B/logs $B/checks
STAMP=${STAMP:-$(date -u +%Y%m%d)}
# seconds per lane (a device command may run 600 s): checks (a third per scheme; a check
# killed by its timeout keeps its lines in logs/check-*.log), fp8 sweeps, the bf16 sweep
CHECK_S=${CHECK_S:-240}; FP8_S=${FP8_S:-160}; BF16_S=${BF16_S:-100}
FP8_BACKENDS=torch,torch-fp8,torch-fp8-grouped,torch-fp8-dequant,torch-grouped,aiter-triton,aiter
t0=$(date +%s)

sweep() {  # gpu ep dtype models name backends configs seconds
  local g=$1 ep=$2 dt=$3 m=$4 be=$6 cfg=$7 s=$8 run=h200-fp8-$5-$3-ep$2-$STAMP
  [ -d data/runs/$run ] && [ ! -d $B/runs/$run ] && cp -r data/runs/$run $B/runs/$run  # resume
  CUDA_VISIBLE_DEVICES=$g timeout -s TERM -k 20 $s python3 -m moe_lab sweep --models $m \
    --tp 8 --ep $ep --tokens 1-8192 --dtype $dt --backends $be --config $cfg \
    --modes eager,graph --data-dir $B/runs --run-id $run --no-progress > $B/logs/$run.log 2>&1
  echo "sweep $run rc=$? ($(( $(date +%s)-t0 )) s)"; tail -1 $B/logs/$run.log
}

lane() {  # gpu ep
  local g=$1 ep=$2
  for spec in fp8-block128:deepseek-r1,qwen3-235b-a22b \
              fp8-channel:llama4-scout-16e,llama4-maverick-128e fp8-tensor:deepseek-r1; do
    local dt=${spec%%:*} models=${spec#*:}
    CUDA_VISIBLE_DEVICES=$g timeout -s TERM -k 10 $(( CHECK_S / 3 )) python3 -m moe_lab check \
      --model $models --tokens 1,64,1024 --tp 8 --ep $ep --dtype $dt --backends $FP8_BACKENDS \
      --seed 15 --out $B/checks/h200-fp8-$dt-ep$ep-$STAMP.txt > $B/logs/check-$dt-ep$ep.log 2>&1
    echo "check $dt ep$ep rc=$? ($(( $(date +%s)-t0 )) s)"; tail -1 $B/logs/check-$dt-ep$ep.log
  done
  sweep $g $ep fp8-block128 deepseek-r1 deepseek-r1 torch-fp8-grouped,torch-fp8,aiter-triton,torch-fp8-dequant \
    default,tuned $(( FP8_S / 2 ))
  sweep $g $ep fp8-channel llama4-scout-16e llama4-scout torch-fp8-grouped,torch-fp8,aiter-triton,torch-fp8-dequant \
    default $(( FP8_S / 2 ))
  sweep $g $ep bf16 deepseek-r1,llama4-scout-16e baseline torch-grouped,aiter-triton \
    default,tuned $BF16_S
}
tune_lane() {  # gpu ep
  local g=$1 ep=$2 run=h200-tune-aiter-triton-fp8-block128-ep$2-$STAMP
  [ -d data/runs/$run ] && [ ! -d $B/runs/$run ] && cp -r data/runs/$run $B/runs/$run  # resume
  CUDA_VISIBLE_DEVICES=$g timeout -s TERM -k 20 $(( TUNE_S + 40 )) python3 -m moe_lab tune \
    --backend aiter-triton --dtype fp8-block128 --models deepseek-r1 --tp 8 --ep $ep \
    --tokens 1,4,16,64,256,1024,4096,8192 --budget $TUNE_S --rep-ms 10 --warmup-ms 2 \
    --run-id $run --data-dir $B/runs --configs-dir $B/configs-ep$ep/nvidia-h200 --no-progress \
    > $B/logs/$run.log 2>&1
  echo "tune ep$ep rc=$? ($(( $(date +%s)-t0 )) s)"; tail -1 $B/logs/$run.log
  mkdir -p data/configs/nvidia-h200/aiter-triton   # the sweep reads tuned files from data/configs
  cp $B/configs-ep$ep/nvidia-h200/aiter-triton/E=*.json data/configs/nvidia-h200/aiter-triton/
  sweep $g $ep fp8-block128 deepseek-r1 deepseek-r1 aiter-triton default,tuned $TUNED_S
}
TUNE_S=${TUNE_S:-300}; TUNED_S=${TUNED_S:-200}
if [ "${STEP:-main}" = tune ]; then
  tune_lane 0 1 & tune_lane 1 8 & wait
else
  lane 0 1 & lane 1 8 & wait
fi
tar czf $OUT/bundle.tar.gz -C $OUT bundle && rm -rf $B
