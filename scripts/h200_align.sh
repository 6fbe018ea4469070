#!/usr/bin/env bash
# Device commands for issues 23 and 24 after the align became a glue step (glue=fused: our
# three align kernels; glue=aiter and glue=naive: aiter's moe_align_block_size_triton).
# Works on any GPU count: lanes in turn on one GPU, TP8 and TP8+EP8 side by side on two.
#   STEP=fp8   the FP8 checks on the H200 (every FP8 backend x scheme on the schemes' seed
#              models, TP8 and TP8+EP8, 1, 3, 64 and 1024 tokens; torch-fp8 padded to 16,
#              block128 with sm90's scale layout); DeepSeek-R1 and Qwen3-235B fp8-block128
#              at TP8+EP8 with aiter-triton default and tuned, graph and eager, 1..8192;
#              torch-fp8-grouped (torch._scaled_grouped_mm, row-wise: CUTLASS's FP8 grouped
#              GEMM) on the same shapes, the FP8 GEMM's speed reference; the bf16 baseline
#              of the same models in the same lease
#   STEP=bf16  the four seed models, TP8 and TP8+EP8, 1..8192 tokens, graph: aiter-triton
#              and aiter-triton-silu tuned (glue fused); then glue fused, aiter and naive
#              beside each other at 64, 1024 and 4096 tokens (the align A/B, and what the
#              fusion buys)
#   STEP=tune  aiter-triton-silu tuned for DeepSeek-R1 and Qwen3-235B (TP8, EP1 and EP8),
#              then their graph sweep with --config default,tuned
#   STEP=torch the FP8 rechecks left (torch-fp8 fp8-tensor, Maverick fp8-channel TP8+EP8,
#              DeepSeek-R1 fp8-block128 TP8+EP8 1024); torch-grouped bf16 and
#              torch-fp8-grouped fp8-channel with glue fused and naive (combine_rows, the
#              one-gather rows), 1..8192, graph
#   STEP=rest  what torch and tune2 left on the late lease (two rechecks, two resumed sweeps)
#   STEP=next  (the next lease) the Qwen3-235B aiter-triton-silu TP8 search resumed (it ran out
#              in gemm2 at 1024 tokens) and swept again; torch-fp8-grouped fp8-channel on
#              Scout and Maverick TP8 after the router weight went into the scales, beside
#              their bf16 aiter-triton tuned baseline of the same lease; the first
#              fp8-tensor sweep (DeepSeek-R1 TP8+EP8, aiter-triton and torch-fp8-grouped)
#   STEP=next2 the Qwen3-235B fp8-block128 search resumed (it ran out at 4096 tokens),
#              swept default against tuned in graph and eager, with its bf16 baseline
#   STEP=last  (STAMP=20261202) what the 2026-12-02 lease left: the Llama-4 bf16 baseline
#              its Maverick half was cut from, resumed, and torch-fp8-grouped fp8-channel on
#              Scout and Maverick (router weight folded) in eager beside the graph points
#   STEP=finish (TUNE_STAMP=20261201) the two aiter-triton-silu searches the evening lease
#              of 2026-12-01 cut, resumed: DeepSeek-R1 TP8's 8192-token gemm2 (it kept the
#              default) and Qwen3-235B TP8+EP8 from 16 tokens (only 1, 4 and 16 were tuned);
#              then their points swept tuned, graph and eager
#   STEP=finish2 DeepSeek-R1 TP8's 8192-token search again (finish's 80 s share ran out
#              after 21 gemm1 and 11 gemm2 candidates), swept at 4096 and 8192 in a new run
#              (on 2026-12-02 its 25 s share stopped after 4096; a bare `moe-lab sweep` of
#              the same arguments resumed 8192, as the run's manifest notes)
#   STEP=tune2 Qwen3-235B fp8-block128 tuned at TP8+EP8 and aiter-triton-silu at TP8, each
#              swept default against tuned; torch-fp8 fp8-channel (Scout, Maverick TP8,
#              graph and eager); the two runs the evening lease cut, resumed
# Resumable: STAMP=<the first lease's YYYYMMDD> and the partial runs under data/runs
# (committed or carried) make a rerun measure only what is missing; TUNE_STAMP (default
# STAMP) names the search runs next and next2 resume, so their sweeps can carry the
# lease's own date. Each sweep is held to
# its share of the command's minutes by `timeout` (a stopped sweep keeps what it wrote).
# From the repo root with the amd-aiter wheel in .whl/ (scripts/fetch-device-wheels.sh)
# and MOE_LAB_GIT_COMMIT=<sha>. Everything lands in $OUT/bundle.tar.gz.
source "$(dirname "$0")/device_env.sh"
STEP=${STEP:-fp8}
BUDGET=${BUDGET:-540}   # seconds of measuring for the whole command
TUNE_STAMP=${TUNE_STAMP:-$STAMP}
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())")
t0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - t0) )); }
pack() { tar czf $OUT/bundle.tar.gz -C $OUT bundle && rm -rf $B; }
trap pack EXIT

sweep() {  # gpu seconds run-id sweep-args...
  local g=$1 s=$2 run=$3; shift 3
  [ -d data/runs/$run ] && [ ! -d $B/runs/$run ] && cp -r data/runs/$run $B/runs/$run  # resume
  [ "$s" -gt "$(left)" ] && s=$(left)
  [ "$s" -lt 15 ] && { echo "sweep $run: no time left"; return; }
  CUDA_VISIBLE_DEVICES=$g timeout -s TERM -k 20 $s python3 -m moe_lab sweep "$@" \
    --data-dir $B/runs --run-id $run --no-progress > $B/logs/$run.log 2>&1
  echo "sweep $run rc=$? ($(( $(date +%s) - t0 )) s)"; tail -1 $B/logs/$run.log
}

check() {  # gpu seconds scheme models
  local g=$1 s=$2 dt=$3 models=$4
  [ "$s" -gt "$(left)" ] && s=$(left)
  [ "$s" -lt 15 ] && { echo "check $dt: no time left"; return; }
  CUDA_VISIBLE_DEVICES=$g timeout -s TERM -k 10 $s python3 -m moe_lab check --model $models \
    --tokens 1,3,64,1024 --tp 8 --ep 1,8 --dtype $dt --seed 15 \
    --backends torch-fp8,torch-fp8-grouped,torch-fp8-dequant,aiter-triton \
    --out $B/checks/h200-$dt-$STAMP.txt > $B/logs/check-$dt.log 2>&1
  echo "check $dt rc=$? ($(( $(date +%s) - t0 )) s)"; tail -2 $B/logs/check-$dt.log
}

echo "$STEP on $NGPU GPU(s), budget $BUDGET s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $B/logs/gpu.csv 2>&1
# smoke (about 20 s): one point per glue variant (our align, aiter's) through the whole
# path; a failing or incorrect point stops the command before it spends the lease
DT=$([ "$STEP" = fp8 ] && echo fp8-block128 || echo bf16)
BE=$([ "$STEP" = fp8 ] && echo aiter-triton || echo aiter-triton,aiter-triton-silu)
[ "$STEP" = torch ] && { DT=fp8-channel; BE=torch-fp8-grouped; }
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 -m moe_lab sweep --models deepseek-r1 --tp 8 --ep 1,8 \
  --tokens 64 --backends $BE --modes graph --glue fused,aiter --dtype $DT --data-dir $B/runs \
  --run-id h200-align-smoke-$STEP-$STAMP --no-progress > $B/logs/smoke-$STEP.log 2>&1
tail -1 $B/logs/smoke-$STEP.log
python3 - "$B/runs/h200-align-smoke-$STEP-$STAMP" <<'PY' || exit 3
import sys
from moe_lab.store import open_run
r = open_run(sys.argv[1])
res = r.results
print(res[["backend", "ep", "glue", "glue_used", "status", "median_us", "error"]].to_string())
if len(r.phases):
    ph = r.phases[r.phases["phase"] == "align"].merge(res[["point_id", "glue", "ep"]], on="point_id")
    print(ph[["ep", "glue", "measured_us", "floor_us"]].to_string())
bad = res["status"].isin(["incorrect", "failed", "oom", "timeout"])
sys.exit(0 if (res["status"] == "ok").any() and not bad.any() and len(r.phases) else 1)
PY

lanes() {  # function: runs "$1 gpu ep" per sharding, side by side on two GPUs
  if [ "$NGPU" -ge 2 ]; then $1 0 1 & $1 1 8 & wait; else $1 0 1; $1 0 8; fi
}
sh() { [ $1 = 1 ] && echo tp8 || echo tp8ep8; }

bf16_lane() {  # gpu ep
  local g=$1 ep=$2 share=$([ "$NGPU" -ge 2 ] && echo 100 || echo 50)
  local s=$(( BUDGET * share / 100 ))
  sweep $g $(( s * 72 / 100 )) h200-align-bf16-$(sh $ep)-$STAMP --tp 8 --ep $ep --tokens 1-8192 \
    --backends aiter-triton,aiter-triton-silu --config tuned --modes graph
  sweep $g $(( s * 26 / 100 )) h200-align-ab-bf16-$(sh $ep)-$STAMP --tp 8 --ep $ep \
    --tokens 64,1024,4096 --backends aiter-triton --config tuned --glue fused,aiter,naive \
    --modes graph
}

tune_lane() {  # gpu ep: two lanes side by side each write their own configs folder (one
  # provenance.json per folder), then the sweep of default against tuned
  local g=$1 ep=$2 share=$([ "$NGPU" -ge 2 ] && echo 100 || echo 50)
  local s=$(( BUDGET * share / 100 ))
  GPU=$g CONFIGS=$B/configs-$(sh $ep) tune_run $(( s * 70 / 100 )) \
    h200-tune-aiter-triton-silu-ds-qwen3-$(sh $ep)-$STAMP --backend aiter-triton-silu \
    --models deepseek-r1,qwen3-235b-a22b --tp 8 --ep $ep
  sweep $g $(( s * 28 / 100 )) h200-align-silu-tuned-$(sh $ep)-$STAMP \
    --models deepseek-r1,qwen3-235b-a22b --tp 8 --ep $ep --tokens 1-8192 \
    --backends aiter-triton-silu --config default,tuned --modes graph
}

torch_lane() {  # gpu ep: the sorted-rows backends with combine_rows and the one-gather rows
  # (about 1 s a point on the H200: 72 bf16 points, then 36 fp8-channel, per sharding)
  local g=$1 ep=$2 k=$([ "$NGPU" -ge 2 ] && echo 2 || echo 1)
  sweep $g $(( 140 * k )) h200-rows-bf16-$(sh $ep)-$STAMP --tp 8 --ep $ep \
    --tokens 1,4,16,64,256,1024,2048,4096,8192 --backends torch-grouped --modes graph \
    --glue fused,naive
  local fm=$([ $ep = 1 ] && echo llama4-scout-16e,llama4-maverick-128e || echo deepseek-r1,qwen3-235b-a22b)
  sweep $g $(( 60 * k )) h200-rows-fp8-channel-$(sh $ep)-$STAMP --models $fm --tp 8 --ep $ep \
    --tokens 1,4,16,64,256,1024,2048,4096,8192 --dtype fp8-channel --backends torch-fp8-grouped \
    --modes graph --glue fused,naive
}

tune_run() {  # seconds run-id tune-args...: a resumable search, its files into data/configs
  # (GPU, default 0; CONFIGS, the folder it writes, default $B/configs)
  local s=$1 run=$2 g=${GPU:-0} c=${CONFIGS:-$B/configs}/nvidia-h200; shift 2
  [ -d data/runs/$run ] && [ ! -d $B/runs/$run ] && cp -r data/runs/$run $B/runs/$run
  [ "$s" -gt "$(left)" ] && s=$(left)
  [ "$s" -lt 30 ] && { echo "tune $run: no time left"; return; }
  CUDA_VISIBLE_DEVICES=$g timeout -s TERM -k 20 $s python3 -m moe_lab tune "$@" \
    --tokens 1,4,16,64,256,1024,4096,8192 --budget $(( s - 25 )) --rep-ms 10 --warmup-ms 2 \
    --run-id $run --data-dir $B/runs --configs-dir $c --no-progress > $B/logs/$run.log 2>&1
  echo "tune $run rc=$? ($(( $(date +%s) - t0 )) s)"; tail -1 $B/logs/$run.log
  for d in $c/*/; do  # the sweep after it reads tuned files from here
    mkdir -p data/configs/nvidia-h200/$(basename $d); cp $d/E=*.json data/configs/nvidia-h200/$(basename $d)/ 2>/dev/null
  done
}

tune2() {  # the searches left, each swept default against tuned; then the cut runs resumed
  tune_run 165 h200-tune-aiter-triton-fp8-block128-qwen3-tp8ep8-$STAMP --backend aiter-triton \
    --dtype fp8-block128 --models qwen3-235b-a22b --tp 8 --ep 8
  sweep 0 45 h200-rows-fp8-block128-qwen3-tuned-$STAMP --models qwen3-235b-a22b --tp 8 --ep 8 \
    --tokens 1-8192 --dtype fp8-block128 --backends aiter-triton --config default,tuned --modes graph
  tune_run 140 h200-tune-aiter-triton-silu-qwen3-tp8-$STAMP --backend aiter-triton-silu \
    --models qwen3-235b-a22b --tp 8 --ep 1
  sweep 0 40 h200-rows-silu-qwen3-tp8-$STAMP --models qwen3-235b-a22b --tp 8 --ep 1 \
    --tokens 1-8192 --backends aiter-triton-silu --config default,tuned --modes graph
  # torch-fp8 (rows padded to 16) where the 2026-12-01 fp8-channel sweep had it failing
  sweep 0 60 h200-rows-torch-fp8-channel-tp8-$STAMP --models llama4-scout-16e,llama4-maverick-128e \
    --tp 8 --ep 1 --tokens 1-8192 --dtype fp8-channel --backends torch-fp8 --modes graph,eager
  # the two runs the evening lease cut (same arguments: a resume measures what is missing)
  sweep 0 30 h200-align-ab-bf16-tp8ep8-$STAMP --tp 8 --ep 8 --tokens 64,1024,4096 \
    --backends aiter-triton --config tuned --glue fused,aiter,naive --modes graph
  sweep 0 25 h200-align-silu-tuned-tp8ep8-$STAMP --models deepseek-r1,qwen3-235b-a22b --tp 8 \
    --ep 8 --tokens 1-8192 --backends aiter-triton-silu --config default,tuned --modes graph
}

chk() {  # seconds scheme models eps tokens: an FP8 recheck
  CUDA_VISIBLE_DEVICES=0 timeout -s TERM -k 10 $1 python3 -m moe_lab check --model $3 \
    --tokens $5 --tp 8 --ep $4 --dtype $2 --seed 15 \
    --backends torch-fp8,torch-fp8-grouped,torch-fp8-dequant,aiter-triton \
    --out $B/checks/h200-recheck2-$2-$STAMP.txt > $B/logs/check2-$2.log 2>&1
  echo "check $2 rc=$? ($(( $(date +%s) - t0 )) s)"; tail -2 $B/logs/check2-$2.log
}

if [ "$STEP" = torch ]; then
  # the FP8 rechecks left (torch-fp8 per tensor with its scales as their own allocations;
  # the points the evening lease's checks did not reach), then the sorted-rows backends
  chk 45 fp8-tensor deepseek-r1 1,8 1,3,64,1024
  chk 35 fp8-channel llama4-maverick-128e 8 1,3,64,1024
  chk 25 fp8-block128 deepseek-r1 8 1024
  lanes torch_lane
elif [ "$STEP" = rest ]; then  # what STEP=torch and tune2 left on the late lease
  chk 100 fp8-tensor deepseek-r1 1,8 1,64,1024
  chk 70 fp8-channel llama4-maverick-128e 8 1,64,1024
  sweep 0 70 h200-rows-silu-qwen3-tp8-$STAMP --models qwen3-235b-a22b --tp 8 --ep 1 \
    --tokens 1-8192 --backends aiter-triton-silu --config default,tuned --modes graph
  sweep 0 110 h200-rows-torch-fp8-channel-tp8-$STAMP --models llama4-scout-16e,llama4-maverick-128e \
    --tp 8 --ep 1 --tokens 1-8192 --dtype fp8-channel --backends torch-fp8 --modes graph,eager
elif [ "$STEP" = next ]; then
  tune_run 240 h200-tune-aiter-triton-silu-qwen3-tp8-$TUNE_STAMP --backend aiter-triton-silu \
    --models qwen3-235b-a22b --tp 8 --ep 1
  sweep 0 45 h200-rows-silu-qwen3-tp8-b-$STAMP --models qwen3-235b-a22b --tp 8 --ep 1 \
    --tokens 1-8192 --backends aiter-triton-silu --config default,tuned --modes graph
  sweep 0 80 h200-rows-fp8-channel-woi-tp8-$STAMP --models llama4-scout-16e,llama4-maverick-128e \
    --tp 8 --ep 1 --tokens 1-8192 --dtype fp8-channel --backends torch-fp8-grouped --modes graph \
    --glue fused,naive
  sweep 0 50 h200-rows-bf16-llama4-tp8-$STAMP --models llama4-scout-16e,llama4-maverick-128e \
    --tp 8 --ep 1 --tokens 1-8192 --backends aiter-triton --config tuned --modes graph
  sweep 0 60 h200-rows-fp8-tensor-tp8ep8-$STAMP --models deepseek-r1 --tp 8 --ep 8 \
    --tokens 1-8192 --dtype fp8-tensor --backends aiter-triton,torch-fp8-grouped --modes graph
elif [ "$STEP" = last ]; then  # resumes of the 2026-12-02 runs: only what is missing runs
  sweep 0 90 h200-rows-bf16-llama4-tp8-$STAMP --models llama4-scout-16e,llama4-maverick-128e \
    --tp 8 --ep 1 --tokens 1-8192 --backends aiter-triton --config tuned --modes graph
  sweep 0 150 h200-rows-fp8-channel-woi-tp8-$STAMP --models llama4-scout-16e,llama4-maverick-128e \
    --tp 8 --ep 1 --tokens 1-8192 --dtype fp8-channel --backends torch-fp8-grouped \
    --modes graph,eager --glue fused,naive
elif [ "$STEP" = finish ]; then
  tune_run 80 h200-tune-aiter-triton-silu-ds-qwen3-tp8-$TUNE_STAMP --backend aiter-triton-silu \
    --models deepseek-r1 --tp 8 --ep 1
  tune_run 330 h200-tune-aiter-triton-silu-ds-qwen3-tp8ep8-$TUNE_STAMP --backend aiter-triton-silu \
    --models qwen3-235b-a22b --tp 8 --ep 8
  sweep 0 70 h200-rows-silu-qwen3-tp8ep8-$STAMP --models qwen3-235b-a22b --tp 8 --ep 8 \
    --tokens 1-8192 --backends aiter-triton-silu --config tuned --modes graph,eager
  sweep 0 25 h200-rows-silu-deepseek-tp8-$STAMP --models deepseek-r1 --tp 8 --ep 1 \
    --tokens 4096,8192 --backends aiter-triton-silu --config tuned --modes graph,eager
elif [ "$STEP" = finish2 ]; then
  tune_run 150 h200-tune-aiter-triton-silu-ds-qwen3-tp8-$TUNE_STAMP --backend aiter-triton-silu \
    --models deepseek-r1 --tp 8 --ep 1
  sweep 0 25 h200-rows-silu-deepseek-tp8-b-$STAMP --models deepseek-r1 --tp 8 --ep 1 \
    --tokens 4096,8192 --backends aiter-triton-silu --config tuned --modes graph,eager
elif [ "$STEP" = next2 ]; then
  tune_run 330 h200-tune-aiter-triton-fp8-block128-qwen3-tp8ep8-$TUNE_STAMP --backend aiter-triton \
    --dtype fp8-block128 --models qwen3-235b-a22b --tp 8 --ep 8
  sweep 0 60 h200-rows-fp8-block128-qwen3-tuned-b-$STAMP --models qwen3-235b-a22b --tp 8 --ep 8 \
    --tokens 1-8192 --dtype fp8-block128 --backends aiter-triton --config default,tuned \
    --modes graph,eager
  sweep 0 60 h200-rows-bf16-qwen3-tp8ep8-$STAMP --models qwen3-235b-a22b --tp 8 --ep 8 \
    --tokens 1-8192 --backends aiter-triton,aiter-triton-silu --config tuned --modes graph
elif [ "$STEP" = tune2 ]; then
  tune2
elif [ "$STEP" = fp8 ]; then
  check 0 75 fp8-block128 deepseek-r1,qwen3-235b-a22b
  check 0 65 fp8-channel llama4-scout-16e,llama4-maverick-128e
  check 0 35 fp8-tensor deepseek-r1
  sweep 0 150 h200-align-fp8-block128-tp8ep8-$STAMP --models deepseek-r1,qwen3-235b-a22b \
    --tp 8 --ep 8 --tokens 1-8192 --dtype fp8-block128 --backends aiter-triton \
    --config default,tuned --modes graph,eager
  sweep 0 70 h200-align-sgmm-fp8-channel-tp8ep8-$STAMP --models deepseek-r1,qwen3-235b-a22b \
    --tp 8 --ep 8 --tokens 1-8192 --dtype fp8-channel --backends torch-fp8-grouped --modes graph
  sweep 0 120 h200-align-bf16-base-tp8ep8-$STAMP --models deepseek-r1,qwen3-235b-a22b \
    --tp 8 --ep 8 --tokens 1-8192 --backends aiter-triton,aiter-triton-silu,torch-grouped \
    --config tuned --modes graph
elif [ "$STEP" = bf16 ]; then
  lanes bf16_lane
elif [ "$STEP" = tune ]; then
  lanes tune_lane
else
  echo "STEP must be fp8, bf16, tune, torch, tune2, rest, next, next2, last, finish or finish2" >&2; exit 2
fi
echo "done in $(( $(date +%s) - t0 )) s"
