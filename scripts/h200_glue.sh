#!/usr/bin/env bash
# Device commands for issues 23 and 24: the layer with deployment-grade glue, every phase
# against its floor (phases.parquet), on the H200. Works on any GPU count: one lane per
# sharding (TP8 on GPU 0, TP8+EP8 on GPU 1 when there are two; in turn on one GPU).
#   STEP=bf16  the four seed models, tokens 1..8192, graph and eager: aiter-triton tuned,
#              aiter-triton-silu tuned, torch-grouped (glue fused, the default); then
#              glue=naive beside it at 64, 1024 and 4096 tokens (what fusion buys)
#   STEP=fp8   FP8 as the seed models ship it (fp8-block128: DeepSeek-R1, Qwen3-235B at
#              TP8+EP8 with aiter-triton, default and tuned; fp8-channel: Llama-4 Scout and
#              Maverick at TP8 with torch-fp8-grouped and torch-fp8), 1..8192 tokens, graph
#              and eager; the glue variants (fused, aiter, naive) at 64/1024/4096; the bf16
#              baseline of the same models in the same lease; CHECKS=1 adds the check report
# Resumable: STAMP=<the first lease's YYYYMMDD> and the partial runs under data/runs
# (committed or carried) make a rerun measure only what is missing. Each sweep is held to
# its share of the command's minutes by `timeout` (a stopped sweep keeps what it wrote).
# From the repo root with the amd-aiter wheel in .whl/ (scripts/fetch-device-wheels.sh)
# and MOE_LAB_GIT_COMMIT=<sha>. Everything lands in $OUT/bundle.tar.gz.
source "$(dirname "$0")/device_env.sh"
STEP=${STEP:-bf16}
BUDGET=${BUDGET:-520}   # seconds for the whole command's measuring, shared by the lanes
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())")
t0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - t0) )); }

sweep() {  # gpu seconds run-id sweep-args...
  local g=$1 s=$2 run=$3; shift 3
  [ -d data/runs/$run ] && [ ! -d $B/runs/$run ] && cp -r data/runs/$run $B/runs/$run  # resume
  [ "$s" -lt 15 ] && { echo "sweep $run: no time left"; return; }
  CUDA_VISIBLE_DEVICES=$g timeout -s TERM -k 20 $s python3 -m moe_lab sweep "$@" \
    --data-dir $B/runs --run-id $run --no-progress > $B/logs/$run.log 2>&1
  echo "sweep $run rc=$? ($(( $(date +%s) - t0 )) s)"; tail -1 $B/logs/$run.log
}

bf16_lane() {  # gpu ep share-of-the-time (percent)
  local g=$1 ep=$2 pct=$3 sh=$([ $2 = 1 ] && echo tp8 || echo tp8ep8)
  local s=$(( $(left) * pct / 100 ))
  sweep $g $(( s * 80 / 100 )) h200-glue-bf16-$sh-$STAMP --tp 8 --ep $ep --tokens 1-8192 \
    --backends aiter-triton,aiter-triton-silu,torch-grouped --config tuned --modes graph,eager
  sweep $g $(( s * 20 / 100 )) h200-glue-naive-bf16-$sh-$STAMP --tp 8 --ep $ep \
    --tokens 64,1024,4096 --backends aiter-triton,aiter-triton-silu,torch-grouped \
    --config tuned --glue fused,naive --modes graph
}

fp8_lane() {  # gpu ep scheme models backends share-of-the-time (percent)
  local g=$1 ep=$2 dt=$3 models=$4 be=$5 pct=$6 sh=$([ $2 = 1 ] && echo tp8 || echo tp8ep8)
  local s=$(( $(left) * pct / 100 ))
  if [ "${CHECKS:-0}" = 1 ]; then  # the sweeps check every point anyway; this is the report
    CUDA_VISIBLE_DEVICES=$g timeout -s TERM -k 10 $(( s * 20 / 100 )) python3 -m moe_lab check \
      --model $models --tokens 1,64,1024 --tp 8 --ep $ep --dtype $dt --backends torch,$be \
      --seed 15 --out $B/checks/h200-glue-$dt-$sh-$STAMP.txt > $B/logs/check-$dt-$sh.log 2>&1
    echo "check $dt $sh rc=$? ($(( $(date +%s) - t0 )) s)"; tail -1 $B/logs/check-$dt-$sh.log
    s=$(( s * 80 / 100 ))
  fi
  sweep $g $(( s * 50 / 100 )) h200-glue-$dt-$sh-$STAMP --models $models --tp 8 --ep $ep \
    --tokens 1-8192 --dtype $dt --backends $be --config default,tuned --modes graph,eager
  sweep $g $(( s * 22 / 100 )) h200-glue-naive-$dt-$sh-$STAMP --models $models --tp 8 --ep $ep \
    --tokens 64,1024,4096 --dtype $dt --backends $be --glue fused,aiter,naive --modes graph
  # the bf16 baseline of the same models in the same lease
  sweep $g $(( s * 28 / 100 )) h200-glue-bf16-base-$dt-$sh-$STAMP --models $models --tp 8 \
    --ep $ep --tokens 1-8192 --backends aiter-triton,torch-grouped --config tuned --modes graph
}

echo "$STEP on $NGPU GPU(s), budget $BUDGET s"
# smoke (about 20 s): one point per glue variant through the whole path (check, time,
# profile, phases); a failing or incorrect point stops the command before it spends the lease
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 -m moe_lab sweep --models deepseek-r1 --tp 8 --ep 8 \
  --tokens 64 --backends aiter-triton,torch-grouped --modes graph --glue fused,aiter,naive \
  --dtype $([ "$STEP" = fp8 ] && echo fp8-block128 || echo bf16) --data-dir $B/runs \
  --run-id h200-glue-smoke-$STEP-$STAMP --no-progress > $B/logs/smoke-$STEP.log 2>&1
tail -1 $B/logs/smoke-$STEP.log
python3 - "$B/runs/h200-glue-smoke-$STEP-$STAMP" <<'PY' || { tar czf $OUT/bundle.tar.gz -C $OUT bundle; exit 3; }
import sys
from moe_lab.store import open_run
r = open_run(sys.argv[1])
res = r.results
print(res[["backend", "glue", "glue_used", "status", "median_us", "error"]].to_string())
print(r.phases.groupby("point_id").size().to_dict() if len(r.phases) else "no phases")
bad = res["status"].isin(["incorrect", "failed", "oom", "timeout"])  # unsupported is an answer
sys.exit(0 if (res["status"] == "ok").any() and not bad.any() and len(r.phases) else 1)
PY
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $B/logs/gpu.csv 2>&1
if [ "$STEP" = bf16 ]; then
  if [ "$NGPU" -ge 2 ]; then bf16_lane 0 1 100 & bf16_lane 1 8 100 & wait
  else bf16_lane 0 1 50; bf16_lane 0 8 100; fi
elif [ "$STEP" = fp8 ]; then
  if [ "$NGPU" -ge 2 ]; then
    fp8_lane 0 8 fp8-block128 deepseek-r1,qwen3-235b-a22b aiter-triton 100 &
    fp8_lane 1 1 fp8-channel llama4-scout-16e,llama4-maverick-128e torch-fp8-grouped,torch-fp8 100 &
    wait
  else
    fp8_lane 0 8 fp8-block128 deepseek-r1,qwen3-235b-a22b aiter-triton 55
    fp8_lane 0 1 fp8-channel llama4-scout-16e,llama4-maverick-128e torch-fp8-grouped,torch-fp8 100
  fi
else
  echo "STEP must be bf16 or fp8" >&2; exit 2
fi
tar czf $OUT/bundle.tar.gz -C $OUT bundle && rm -rf $B
echo "done in $(( $(date +%s) - t0 )) s"
