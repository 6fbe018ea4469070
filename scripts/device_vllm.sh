#!/usr/bin/env bash
# Issue 41 on the GPU machine: vLLM 0.26.0 brought there in parts, then vLLM's fused MoE
# measured beside moe-lab's backends at the seed shapes (sweep), vLLM's own kernel tuned by
# moe-lab (tune), and vLLM with moe-lab's tuned files measured (tuned). Resumable, any GPU
# count (the jobs dealt to the GPUs in turn), each call under 10 minutes (BUDGET, 540 s).
#
#   MOE_LAB_GIT_COMMIT=<sha> bash scripts/device_vllm.sh sweep|tune|tuned|align|paths|stage [tune]
#
# Before the first call, here: bash scripts/fetch-device-wheels.sh && bash
# scripts/fetch-device-wheels.sh vllm: it prints the part names, vllm-<id>-K-of-N (with vllm
# 0.26.0's wheel, DeepGEMM, FlashInfer 0.6.14, the pinned deps and sm_90 code only, the
# default, the id is always d9fcb09a, 59.5 MiB: N = 3 while the tree is under 34 MiB;
# VLLM_ARCH=all keeps every GPU's code: N = 5 or more. Each part travels with the tree and the 38 KB
# aiter cut under 64 MiB, so a larger tree means more, smaller parts). Rows that say "no
# kernel image is available" would mean the sm_90 cut left out code the GPU loads: fetch
# again with VLLM_ARCH=all. The run calls, in order (timeout_s 600 each; <sha>: git
# rev-parse --short HEAD of the commit whose tree travels):
#
#   1. command "MOE_LAB_GIT_COMMIT=<sha> bash scripts/device_vllm.sh stage" (or the mode to
#      run once staged), carry [".whl/aiter-cut.tar.gz", ".whl/vllm/parts/vllm-<id>-0-of-N"]
#      (the first waits for the machine's start): part 0 staged, nothing measured
#   2. the same, with part 1, ..., part N-2. Make each next call AT ONCE: the machine keeps
#      /tmp only 30 s after a call returns; a call that says a part staged before is
#      missing found a fresh machine: start again from part 0.
#   3. the mode's command (sweep, tune, ...), carry [".whl/aiter-cut.tar.gz", part N-1]:
#      vLLM unpacked into /tmp/vllm-site (checked: `vllm` available), then the mode runs
#   4. the same command, carry [".whl/aiter-cut.tar.gz"]: ~10 min, the sweep goes on; again
#      until it prints "sweep: every job complete" (one GPU: about 2 calls in all; x2: 1)
#   5. command "MOE_LAB_GIT_COMMIT=<sha> bash scripts/device_vllm.sh tune",
#      carry [".whl/aiter-cut.tar.gz"]: ~10 min each, the searches left (SHAPES; default:
#      the required vllm shapes whose file lacks the grid), 6-10 min of one GPU each.
#      Resumes from /tmp on a warm machine, else from the committed runs.
#   6. after adopting the complete searches' files (bundle configs/vllm/ ->
#      data/configs/<device slug>/vllm/, with provenance.json): command
#      "MOE_LAB_GIT_COMMIT=<sha> bash scripts/device_vllm.sh tuned", carry
#      [".whl/aiter-cut.tar.gz"]: ~4 min, `vllm --config tuned` into the same run folders.
# Calls 4-6 need vLLM on the machine: a fresh one says so (nothing measured) and needs
# calls 1-3 again (with call 3's command). Every call's results come back in
# $OUT/bundle.tar.gz (runs/, logs/, configs/, ceilings/): extract it and commit
# data/runs/<tag>-vllm-* (and <tag>-tune-vllm-*; tag: core.devices.device_tag, h200, h100)
# and the GPU's first ceilings after each call, so a fresh machine resumes from them.
#
# sweep: JOBS (dtype:ep:models, TP8), tokens TOKENS (default core.constants.SEED_SWEEP_TOKENS),
# graph mode, checked against the reference, profiled (the phases the ledger reads), one run
# folder per job, data/runs/<tag>-vllm-<dtype>-<tp8|tp8ep8>: the job's models with a tuned vLLM file
# committed get every backend of the job with --config default,tuned in one process (vllm
# as shipped and with moe-lab's file, aiter-triton default and tuned, back to back per token
# count, beside torch-grouped and the FP8 backends); the others --config default, then
# aiter-triton --config tuned (TAG=vtuned JOBS="<the jobs with files>" measures afresh).
# No seed model ships fp8-tensor (DeepSeek-R1 and Qwen3-FP8: 128x128 blocks; Llama-4
# Maverick FP8: per channel), so it is not swept;
# Qwen3-235B fp8-block128 at TP8 has no whole 128 blocks (refused at the gate).
# tune: scripts/device_tune.sh with SHAPES (19 keys; default: tuned.left, vllm's shapes
# first, then aiter-triton*'s), the winners in the bundle's configs/<backend>/.
# tuned: vllm --config tuned, the models of each job with a tuned file.
# align: the points where vLLM won on the routing glue (Qwen3-235B bf16, DeepSeek-R1
# fp8-block128, TP8, tokens 1,16,64), vllm and aiter-triton default, then aiter-triton tuned,
# into new run folders <tag>-vllm-align-<dtype>-tp8 (the align kernels changed after the sweep).
# paths: vLLM's Hopper MoE paths (moe_lab.backends.vllm_paths: vllm-cutlass, deepgemm,
# flashinfer-cutlass, triton-kernels) and vllm-deployed beside vllm and the workbook's layers
# of the scheme, at JOBS (the sweep's and Qwen3-235B TP8+EP8), into <tag>-vllm-paths-*.
# A second word `tune` (`align tune`) spends what is left of BUDGET on the searches.
# TAG=<word>: the runs go to <tag>-vllm-<word>-<dtype>-<sharding> (a shape measured again
# after its tuned file changed: TAG=retuned JOBS="bf16:8:deepseek-r1" ... sweep).
# stage: only gather the parts. VLLM_PARTS, VLLM_STAGE, VLLM_SITE, VLLM_STANDINS,
# VLLM_RUNSTAGE (and device_tune.sh's TUNE_STAGE) move the folders (tests); VLLM_STAGE and
# VLLM_SITE new, empty or the ones stage made (else refused, exit 2: it removes and
# replaces files there), VLLM_STANDINS without other packages of the stand-ins' names.
set -uo pipefail
MODE=${1:-sweep} THEN=${2:-}
case $MODE:$THEN in stage:|sweep:|tune:|tuned:|align:|paths:|sweep:tune|tuned:tune|align:tune|paths:tune) ;;
  *) echo "usage: bash scripts/device_vllm.sh sweep|tune|tuned|align|paths|stage [tune]"; exit 2 ;; esac
# a GPU and OUT, stage too (it unpacks into VLLM_SITE: the GPU machine's folders, never
# this one's; before, `stage` ran anywhere)
DEVICE_CHECK_ONLY=1 source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
BUDGET=${BUDGET:-540}
left() { echo $(( BUDGET - ($(date +%s) - t0) )); }
export VLLM_SITE=${VLLM_SITE:-/tmp/vllm-site} VLLM_STANDINS=${VLLM_STANDINS:-/tmp/vllm-standins}
python3 scripts/device_bundle.py stage "${VLLM_PARTS:-.whl/vllm/parts}" \
  "${VLLM_STAGE:-/tmp/vllm-stage}" "$VLLM_SITE"
rc=$?
if [ $rc = 3 ]; then
  echo "device_vllm: vLLM is not complete on this machine yet: nothing measured; call again with the next part"
  exit 0
fi
[ $rc = 2 ] && exit 2  # a refusal: device_bundle.py's one line said why, nothing touched
[ $rc = 0 ] || { echo "device_vllm: staging vLLM failed (rc=$rc)"; exit 1; }
python3 scripts/device_bundle.py standins "$VLLM_STANDINS" openai openai_harmony mistral_common || exit $?
[ "$MODE" = stage ] && exit 0

source "$(dirname "$0")/device_env.sh"
pack() { tar czf $OUT/bundle.tar.gz -C $OUT bundle && rm -rf $B; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $B/logs/gpus.txt 2>&1
python3 -m moe_lab backends > $B/logs/backends.txt 2>&1
if ! python3 -c "from moe_lab.backends import get; ok, why = get('vllm').available(); print('vllm:', 'available' if ok else why); raise SystemExit(0 if ok else 1)" 2>&1 | tee -a $B/logs/backends.txt; then
  echo "device_vllm: vllm cannot run here (above; logs/backends.txt): nothing measured"; pack; exit 1
fi
tune() {  # device_tune.sh packs $B (these logs and any runs above too) when it ends
  # default: the required vllm shapes whose file does not hold the grid yet, then the
  # aiter-triton* ones (tuned.left), so a call whose vLLM searches end early goes on
  export SHAPES=${SHAPES:-$(python3 -c "import sys; from moe_lab.analysis.tuned import left; d = sys.argv[1]; print(' '.join(left('tune', d, backends=('vllm',)) + left('tune', d, backends=('aiter-triton', 'aiter-triton-silu'))))" "$GPU_NAME")}
  [ -n "$SHAPES" ] || { echo "device_vllm tune: every required file holds the grid: no search left"; pack; exit 0; }
  echo "device_vllm tune: searches left: $SHAPES"
  export BUDGET=$(left)
  trap - EXIT
  exec bash "$(dirname "$0")/device_tune.sh"
}
if [ "$MODE" = tune ]; then tune; fi
trap pack EXIT

if [ "$MODE" = align ]; then
  TOKENS=${TOKENS:-1,16,64}
  JOBS=${JOBS:-"bf16:1:qwen3-235b-a22b fp8-block128:1:deepseek-r1"}
else
  TOKENS=${TOKENS:-$(python3 -c "from moe_lab.core.constants import SEED_SWEEP_TOKENS as t; print(','.join(map(str, t)))")}
  q=; [ "$MODE" = paths ] && q=,qwen3-235b-a22b  # paths: the sweep's jobs and Qwen3-235B TP8+EP8
  JOBS=${JOBS:-"bf16:1:llama4-scout-16e,llama4-maverick-128e,qwen3-235b-a22b bf16:8:deepseek-r1$q fp8-block128:1:deepseek-r1 fp8-block128:8:deepseek-r1$q fp8-channel:1:llama4-scout-16e,llama4-maverick-128e"}
fi
RUNSTAGE=${VLLM_RUNSTAGE:-/tmp/moe_lab_vllm_runs}; mkdir -p $RUNSTAGE  # a warm machine: the next call resumes here

backends_for() {  # dtype: vLLM as shipped beside the workbook's own layers of that scheme
  [ "$MODE" = align ] && { echo vllm,aiter-triton; return; }
  if [ "$MODE" = paths ]; then local b; case $1 in  # vLLM's paths of the scheme (a refusal is a row)
    bf16) b=vllm,vllm-deployed,flashinfer-cutlass,triton-kernels,aiter-triton,torch-grouped ;;
    fp8-block128) b=vllm,vllm-deployed,deepgemm,flashinfer-cutlass,vllm-cutlass,aiter-triton,torch-fp8 ;;
    *) b=vllm,vllm-deployed,vllm-cutlass,flashinfer-cutlass,deepgemm,torch-fp8-grouped,torch-fp8 ;;
  esac
  # FlashInfer's CUTLASS MoE is JIT-compiled once per machine (fi_jit, in the background);
  # until it is built its points would each spend the point limit compiling: left out
  fi_built || b=${b/flashinfer-cutlass,/}
  echo "$b"; return; fi
  case $1 in
    bf16) echo vllm,aiter-triton,torch-grouped ;;
    fp8-block128) echo vllm,aiter-triton,torch-fp8 ;;
    fp8-channel) echo vllm,torch-fp8-grouped,torch-fp8 ;;
    *) echo vllm ;;
  esac
}
run_id() {  # TAG: a new run folder for points measured again after a change
  local s=tp8 a=${TAG:-}; [ "$2" != 1 ] && s=tp8ep8; [ "$MODE" = align ] && a=${TAG:-align}; [ "$MODE" = paths ] && a=${TAG:-paths}
  echo "$DEVICE_TAG-vllm-${a:+$a-}$1-$s"
}

sweep() {  # gpu run dtype ep models backends config
  local s; s=$(( $(left) - 20 ))
  [ "$s" -lt 40 ] && { echo "$2 $6 --config $7: no time left" | tee -a $B/logs/left.txt; return; }
  CUDA_VISIBLE_DEVICES=$1 timeout -s TERM -k 20 $s python3 -m moe_lab sweep --models "$5" \
    --tp 8 --ep "$4" --tokens "$TOKENS" --dtype "$3" --backends "$6" --config "$7" \
    --modes graph --data-dir $B/runs --run-id "$2" --no-progress >> $B/logs/$2.log 2>&1
  echo "$2 $6 --config $7: rc=$? ($(( $(date +%s) - t0 )) s): $(tail -1 $B/logs/$2.log)"
}

with_tuned_files() {  # backend jobs -> each job as dtype:ep:models with a tuned file of
  # this device for the backend (data/configs/$DEVICE_SLUG, as it travels)
  python3 - "$GPU_NAME" "$CONFIGS" "$@" <<'PY'
import sys
from moe_lab.storage.configs import load_tuned
from moe_lab.core.problems import make_problem
device, configs, backend = sys.argv[1:4]
for job in sys.argv[4:]:
    dtype, ep, models = job.split(":")
    print(f"{dtype}:{ep}:" + ",".join(
        m for m in models.split(",") if load_tuned(backend, make_problem(m, 1, dtype, 8, int(ep)),
                                                   device, configs)))
PY
}

job() {  # gpu dtype:ep:models
  local g=$1 dtype ep models run
  IFS=: read -r dtype ep models <<< "$2"
  run=$(run_id "$dtype" "$ep")
  if [ -d $RUNSTAGE/$run ]; then cp -r $RUNSTAGE/$run $B/runs/$run
  elif [ -d data/runs/$run ]; then cp -r data/runs/$run $B/runs/$run; fi
  local tuned rest at; tuned=$(grep "^$dtype:$ep:" <<< "$TUNED" | cut -d: -f3)
  at=$(grep "^$dtype:$ep:" <<< "$AT_TUNED" | cut -d: -f3)
  rest=$(tr , '\n' <<< "$models" | grep -vxF -f <(tr , '\n' <<< "$tuned") | paste -sd, -)
  if [ "$MODE" != tuned ]; then
    # the models with a tuned vLLM file (sweep only: align reads no TUNED): every backend
    # with --config default,tuned in one process, so each token count's vLLM as shipped,
    # vLLM with moe-lab's file and the tunable backends' two configurations are timed back
    # to back
    [ -n "$tuned" ] &&
      sweep "$g" "$run" "$dtype" "$ep" "$tuned" "$(backends_for "$dtype")" default,tuned
    if [ -n "$rest" ]; then
      sweep "$g" "$run" "$dtype" "$ep" "$rest" "$(backends_for "$dtype")" default
      # aiter-triton with this device's tuned file, where it has one (none: no row)
      at=$(tr , '\n' <<< "$rest" | grep -xF -f <(tr , '\n' <<< "${at:-,}") | paste -sd, -)
      [ "$dtype" != fp8-channel ] && [ -n "$at" ] && sweep "$g" "$run" "$dtype" "$ep" "$at" aiter-triton tuned
    fi
    # vLLM's own tuning of a shape for this GPU under a name its lookup never reads here
    # (vllm_files.unread_files: `NVIDIA_H100` on an `NVIDIA H100 80GB HBM3`): vllm with that
    # file, beside vLLM as shipped (which runs its default there)
    local m f
    for m in ${models//,/ }; do
      for f in $(unread "$m" "$dtype" "$ep"); do
        sweep "$g" "$run" "$dtype" "$ep" "$m" vllm "$f"
      done
    done
  elif [ -n "$tuned" ]; then sweep "$g" "$run" "$dtype" "$ep" "$tuned" vllm tuned
  else echo "$run: no tuned vllm file in $CONFIGS/vllm for $models"; fi
  [ -d $B/runs/$run ] && rm -rf $RUNSTAGE/$run.tmp && cp -r $B/runs/$run $RUNSTAGE/$run.tmp &&
    rm -rf $RUNSTAGE/$run && mv $RUNSTAGE/$run.tmp $RUNSTAGE/$run
}

read -r -a all <<< "$JOBS"
TUNED= AT_TUNED=
[ "$MODE" != align ] && TUNED=$(with_tuned_files vllm "${all[@]}")
AT_TUNED=$(with_tuned_files aiter-triton "${all[@]}")
unread() {  # model dtype ep -> the files of PUBLISHED (carried) vLLM's lookup misses here
  [ -n "${PUBLISHED:-}" ] && [ "$MODE" = sweep ] || return 0
  python3 -c "import sys; from moe_lab.analysis.vllm_files import unread_files; print(' '.join(unread_files(*sys.argv[1:5], int(sys.argv[5]))))" "$PUBLISHED" "$GPU_NAME" "$1" "$2" "$3"
}
fi_built() { grep -q "^built" $RUNSTAGE/flashinfer-jit.log 2>/dev/null; }
[ "$MODE" = paths ] && export FLASHINFER_WORKSPACE_BASE=$RUNSTAGE/flashinfer
if [ "$MODE" = paths ] && ! fi_built && [ ! -f $RUNSTAGE/flashinfer-jit.pid ] &&
   python3 -c "import flashinfer" 2>/dev/null; then
  # FlashInfer's sm90 CUTLASS fused-MoE module, built with the machine's nvcc while the other
  # paths are measured (graph-mode times are the GPU's; the build uses the CPUs), kept in
  # FLASHINFER_WORKSPACE_BASE on this machine for the calls that follow
  setsid nohup bash -c 't=$(date +%s); echo "building since $(date -u +%FT%TZ)"; MAX_JOBS=12 python3 -c "from flashinfer.fused_moe.core import get_cutlass_fused_moe_module as g; g(\"90\")" && echo "built in $(( $(date +%s) - t )) s" || echo "failed after $(( $(date +%s) - t )) s"' \
    > $RUNSTAGE/flashinfer-jit.log 2>&1 < /dev/null &
  echo $! > $RUNSTAGE/flashinfer-jit.pid
  echo "flashinfer: building its sm90 CUTLASS MoE module in the background (logs/flashinfer-jit.log)"
fi
# this GPU's ceilings, once (data/ceilings/<slug>.json: the roofs of its rows)
if [ "$MODE" = sweep ] || [ "$MODE" = paths ] && [ ! -f data/ceilings/$DEVICE_SLUG.json ] && [ ! -f $RUNSTAGE/ceilings/$DEVICE_SLUG.json ]; then
  mkdir -p $B/ceilings $RUNSTAGE/ceilings
  python3 -m moe_lab ceilings --out-dir $B/ceilings > $B/logs/ceilings.log 2>&1 &&
    cp $B/ceilings/* $RUNSTAGE/ceilings/
  echo "ceilings: rc=$? $(tail -1 $B/logs/ceilings.log)"
fi
# the rows' roofs from this GPU's measured ceilings (a file measured by an earlier call)
[ -f data/ceilings/$DEVICE_SLUG.json ] || cp $RUNSTAGE/ceilings/$DEVICE_SLUG.json data/ceilings/ 2>/dev/null
deal job "${all[@]}"
if [ -f $RUNSTAGE/flashinfer-jit.log ]; then  # built, failed, or how long it has been building
  cp $RUNSTAGE/flashinfer-jit.log $B/logs/
  fi_state=$(tail -1 $RUNSTAGE/flashinfer-jit.log)
  if ! fi_built && ! grep -q "^failed" $RUNSTAGE/flashinfer-jit.log; then
    kill -0 "$(cat $RUNSTAGE/flashinfer-jit.pid 2>/dev/null)" 2>/dev/null &&
      fi_state="$fi_state: still building" || fi_state="$fi_state: the build ended without a word"
  fi
  echo "flashinfer: $fi_state" | tee -a $B/logs/flashinfer-jit.log
fi
runs=(); for j in "${all[@]}"; do IFS=: read -r d e _ <<< "$j"; runs+=("$(run_id "$d" "$e")"); done
python3 - $B/runs "$MODE" "${runs[@]}" <<'PY'
import json, os, sys
import pandas as pd
root, mode, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
left = os.path.join(os.path.dirname(root), "logs", "left.txt")  # steps skipped for time
left = open(left).read().splitlines() if os.path.exists(left) else []
for step in left:
    print(f"left for the next call: {step}")
done = not left
for run in runs:  # every job's run, started or not
    try:
        man = json.load(open(os.path.join(root, run, "manifest.json")))
        res = pd.read_parquet(os.path.join(root, run, "results.parquet"))
    except OSError:
        print(f"{run}: not started")
        done = False
        continue
    n = res.groupby(["backend", "config", "status"]).size()
    print(f"{run}: {man.get('status')}; " + ", ".join(f"{b} {c} {s} {k}" for (b, c, s), k in n.items()))
    if "error" in res and res["error"].fillna("").astype(str).str.contains("no kernel image").any():
        print(f"{run}: rows say 'no kernel image is available': vLLM's libraries lack code this "
              f"GPU loads; here: VLLM_ARCH=all bash scripts/fetch-device-wheels.sh vllm, then stage again")
    done &= man.get("status") == "complete"
print(f"{mode}: every job complete" if done else f"{mode}: not complete: call again")
PY
echo "device_vllm $MODE: $(( $(date +%s) - t0 )) s"
if [ "$THEN" = tune ]; then tune; fi  # one bundle: these runs beside the searches'
