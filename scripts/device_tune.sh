#!/usr/bin/env bash
# The device runner of `moe-lab tune` searches (issue 38), of their verification and of the
# tuned-against-default sweeps: resumable, on any GPU count (one shape per GPU at a time, the
# shapes dealt to the GPUs in turn).
#
#   MOE_LAB_GIT_COMMIT=<sha> SHAPES="aiter-triton:llama4-maverick-128e:8:1:bf16 ..." \
#     BUDGET=540 bash scripts/device_tune.sh [tune|verify|sweep]
#
# A shape is backend:model:tp:ep:dtype. Without SHAPES, tune and sweep take what is left of
# the required aiter-triton* shapes (moe_lab.analysis.tuned.left, from the committed
# files and runs as they travel: searches not complete, started ones first; files holding
# the grid without a tuned-against-default point at every key), and print it.
# A shape's search is the run folder data/runs/<tag>-tune-<backend>-<model>-<sharding>-<dtype>
# (tag: the GPU's, core.devices.device_tag: h200, h100)
# (TP8 or TP8EP8): a folder committed
# from an earlier lease is copied in and resumed (moe-lab tune never times a row twice), so
# the same command again goes on where the last one stopped (on a warm machine, from the copy
# the last call staged under /tmp, so back-to-back calls need no commit in between). Each shape's winners are
# written to $OUT/bundle/configs/<backend>/ (never over the committed files: a cut search's
# winners are adopted into data/configs/<device slug> only once its manifest says complete).
# verify: `moe-lab tune --verify ${VERIFY:-4}` per shape into <tag>-verify-<...>: that many
# token keys searched again in another order with twice the survivors, against the committed
# winners of data/configs/<device slug> (verify.parquet; no file written).
# sweep: `moe-lab sweep --config default,tuned` per shape into <tag>-grid-<...> at TOKENS
# (default: TUNE_TOKENS, the 19 keys of the tuned files), graph mode, profiled: the tuned files measured
# beside the backend's default configuration (the committed files, as they travel); with
# PUBLISHED=<folder> (carried: fetch-device-wheels.sh vllm writes .whl/published) aiter-triton
# also with the published file vLLM names for the shape on this GPU (vLLM's shipped tuning of the
# same Triton kernel), where it ships one: `--config default,tuned,<folder>/<file>`.
# BUDGET: seconds for the whole command (each shape's command gets what is left, less a
# margin for its last writes). Everything lands in $OUT/bundle.tar.gz; adopt a
# run folder with `git add -f data/runs/<run>` (.gitignore keeps users' runs out of data/runs).
MODE=${1:-tune}
case $MODE in tune|verify|sweep) ;; *) echo "usage: bash scripts/device_tune.sh [tune|verify|sweep]"; exit 2 ;; esac
source "$(dirname "$0")/device_env.sh"
BUDGET=${BUDGET:-540}
TOKENS=${TOKENS:-$(python3 -c "from moe_lab.core.constants import TUNE_TOKENS as t; print(','.join(map(str, t)))")}
if [ -z "${SHAPES:-}" ] && [ "$MODE" != verify ]; then  # what is left (tuned.left)
  SHAPES=$(python3 -c "import sys; from moe_lab.analysis.tuned import left; print(' '.join(left('$MODE', sys.argv[1], backends=('aiter-triton', 'aiter-triton-silu'))))" "$GPU_NAME") || exit 1
  echo "device_tune $MODE: left: ${SHAPES:-nothing}"
  [ -n "$SHAPES" ] || exit 0
fi
SHAPES=${SHAPES:?give SHAPES=\"backend:model:tp:ep:dtype ...\" (verify takes no default)}
CORES=$(nproc)
t0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - t0) )); }
pack() { tar czf $OUT/bundle.tar.gz -C $OUT bundle && rm -rf $B; }
trap pack EXIT
# a warm machine keeps /tmp between calls: the next call resumes from what this one timed
STAGE=${TUNE_STAGE:-/tmp/moe_lab_tune_stage}; mkdir -p $STAGE  # TUNE_STAGE: elsewhere (tests)
mkdir -p $B/configs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $B/logs/gpus.txt 2>&1

run_id() {  # backend model tp ep dtype
  local sh="tp$3"; [ "$4" != 1 ] && sh="tp$3ep$4"
  local kind=tune; [ "$MODE" = verify ] && kind=verify; [ "$MODE" = sweep ] && kind=grid
  echo "$DEVICE_TAG-$kind-$1-$2-$sh-$5"
}

tune_one() {  # gpu shape
  local g=$1; IFS=: read -r backend model tp ep dtype <<< "$2"
  local run; run=$(run_id "$backend" "$model" "$tp" "$ep" "$dtype")
  # newest first: what an earlier call on this warm machine staged, else the committed folder
  if [ -d $STAGE/$run ]; then cp -r $STAGE/$run $B/runs/$run
  elif [ -d data/runs/$run ]; then cp -r data/runs/$run $B/runs/$run; fi
  local s; s=$(( $(left) - 25 ))
  [ "$s" -lt 30 ] && { echo "$run: no time left"; return; }
  local args configs=default,tuned pub
  case $MODE in
    tune) args=(tune --backend "$backend" --budget "$s" --configs-dir $B/configs
            --compile-workers $(( (CORES - 2) / NGPU > 12 ? 12 : (CORES - 2) / NGPU ))) ;;
    verify) args=(tune --backend "$backend" --budget "$s" --verify "${VERIFY:-4}"
              --configs-dir $CONFIGS) ;;
    sweep)
      if [ -n "${PUBLISHED:-}" ] && [ "$backend" = aiter-triton ]; then
        pub=$(python3 -c "import sys; from moe_lab.analysis.tuned import published_file; print(published_file('$2', sys.argv[1]))" "$GPU_NAME" 2>/dev/null)
        [ -n "$pub" ] && [ -f "$PUBLISHED/$pub" ] && configs="$configs,$PUBLISHED/$pub"
      fi
      args=(sweep --backends "$backend" --config "$configs" --modes graph --tokens "$TOKENS") ;;
  esac
  CUDA_VISIBLE_DEVICES=$g timeout -s TERM -k 20 $(( s + 15 )) python3 -m moe_lab "${args[@]}" \
    --models "$model" --tp "$tp" --ep "$ep" --dtype "$dtype" \
    --data-dir $B/runs --run-id "$run" --no-progress > $B/logs/$run.log 2>&1
  local rc=$?
  rm -rf $STAGE/$run.tmp && cp -r $B/runs/$run $STAGE/$run.tmp && rm -rf $STAGE/$run && mv $STAGE/$run.tmp $STAGE/$run
  echo "$run rc=$rc ($(( $(date +%s) - t0 )) s): $(grep -E '^done|^left|verdict' $B/logs/$run.log | tr '\n' ' ')"
}

read -r -a all <<< "$SHAPES"
deal tune_one "${all[@]}"
echo "device_tune: $(( $(date +%s) - t0 )) s"
