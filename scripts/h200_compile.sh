#!/usr/bin/env bash
# One device command for the eager / graph / torch.compile comparison (issue 4): the four
# seed models at TP8, all compile variants (dynamic on and off), spread over the machine's
# GPUs (one process per GPU at a time, one run folder per model). Everything returns in
# $OUT/bundle.tar.gz.
#
# Runs are written into the repo's data/runs/ (which travels with the working tree), so
# the same command on a later lease resumes the committed folders: points already there
# are skipped, and a variant's compile-table row is folded together across the calls.
#
# Environment:
#   MOE_LAB_GIT_COMMIT  the commit being run (the device copy has no .git)
#   DEADLINE_S          seconds from the start by which every sweep is stopped (520): give
#                       the device call 80 s more (SIGKILL 20 s after SIGTERM, a watchdog
#                       at +40 s, then the bundle)
#   COMPILE_BUDGET      --compile-budget: seconds of compile per backend x variant; the
#                       torch reference gets less: Dynamo unrolls its loop over experts
#   TOKENS, MODES, STAMP, COMPILE_MODELS (below)
#   FILL_TOKENS         a first pass over these token counts for every model before TOKENS
#                       (e.g. the grid already committed, so rows a killed lease left out
#                       and new cheap modes are filled in before the new token counts)
#   EVIDENCE=1          first, on GPU 0 the timer repeatability evidence (issue 3) and on
#                       GPU 1 (or after it, on one GPU) the GPU-only tests; EVIDENCE=repeat:
#                       the repeatability alone, with nothing else running on the host
#                       (another process launching work doubles eager host time at times)
set -uo pipefail
T_START=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 MOE_LAB_GIT_COMMIT=${MOE_LAB_GIT_COMMIT:-unknown}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=$OUT/bundle; mkdir -p $B/runs $B/evidence; rm -f $B/evidence/.repeat_done
RUNS=data/runs
STAMP=${STAMP:-20261129}  # keep the committed run ids so a rerun resumes them
DEADLINE_S=${DEADLINE_S:-520}
COMPILE_BUDGET=${COMPILE_BUDGET:-150,torch=30}
TOKENS=${TOKENS:-1,16,64,256,1024,4096}
FILL_TOKENS=${FILL_TOKENS:-}
# cheap variants first, so a lease that runs out leaves the expensive ones to the next
MODES=${MODES:-eager,graph,compile:off,compile:default,compile:default:dynamic,compile:reduce-overhead,compile:reduce-overhead:dynamic,compile:max-autotune-no-cudagraphs:dynamic,compile:max-autotune-no-cudagraphs}
# COMPILE_MODELS: the models this call measures (default the four). On one GPU give a call
# one model: max-autotune compiles of torch-grouped and aiter-triton take up to their whole
# budget each, and the four models' equal shares of 350 s reached only the torch reference
MODELS=(${COMPILE_MODELS:-deepseek-r1 qwen3-235b-a22b llama4-scout-16e llama4-maverick-128e})
NG=$(python3 -c "import torch; print(torch.cuda.device_count())")
echo "gpus=$NG tokens=${FILL_TOKENS:+$FILL_TOKENS then }$TOKENS deadline ${DEADLINE_S}s compile budget ${COMPILE_BUDGET}s commit $MOE_LAB_GIT_COMMIT"

evidence() {  # $1 = which part, on the GPU this subshell holds
  case $1 in
    repeat) python3 scripts/repeatability.py $B/evidence 5 > $B/evidence/repeatability_stdout.txt 2>&1
            echo "repeatability rc=$?"; touch $B/evidence/.repeat_done;;
    tests)  python3 -m pytest -q -rs -p no:cacheprovider tests/test_compile.py tests/test_timing.py \
              tests/test_profiling.py -k "gpu or cuda" > $B/evidence/gpu_tests.txt 2>&1
            echo "gpu tests rc=$?"; tail -3 $B/evidence/gpu_tests.txt;;
  esac
}

# the bundle must be written whatever happens: a sweep past the deadline is killed (the
# device call's own limit would take everything measured on the lease with it)
( sleep $((DEADLINE_S + 40)); pkill -9 -f "moe_lab sweep" && echo "watchdog: killed sweeps" ) &
WATCHDOG=$!
for g in $(seq 0 $((NG-1))); do
  (
    export CUDA_VISIBLE_DEVICES=$g
    if [ "${EVIDENCE:-0}" != 0 ]; then
      [ $g -eq 0 ] && evidence repeat
      { [ $g -eq 1 ] || [ $NG -eq 1 ]; } && [ "$EVIDENCE" != repeat ] && evidence tests
      # no compile (many CPU workers) while the eager timers are being checked
      for _ in $(seq 180); do [ -e $B/evidence/.repeat_done ] && break; sleep 1; done
    fi
    mine=()
    for i in "${!MODELS[@]}"; do [ $((i % NG)) -eq $g ] && mine+=("${MODELS[$i]}"); done
    grids=($FILL_TOKENS $TOKENS)
    n_runs=$(( ${#grids[@]} * ${#mine[@]} )); k=0
    for p in "${!grids[@]}"; do
      for m in "${mine[@]}"; do
        left=$(( DEADLINE_S - ($(date +%s) - T_START) ))
        limit=$(( left / (n_runs - k) )); k=$((k + 1))  # an equal share of what is left
        [ $limit -gt 30 ] || { echo "$m tokens ${grids[$p]}: no time left"; continue; }
        timeout -k 20 $limit python3 -m moe_lab sweep --models $m --tp 8 --ep 1 \
          --tokens ${grids[$p]} --backends torch,torch-grouped,aiter-triton --modes $MODES \
          --compile-budget $COMPILE_BUDGET --data-dir $RUNS --run-id h200-compile-$m-$STAMP \
          --no-progress > $B/runs/compile_${m}_pass$p.log 2>&1
        echo "$m tokens ${grids[$p]} rc=$? (limit ${limit}s)"
      done
    done
  ) &
done
wait $(jobs -p | grep -v "^$WATCHDOG$")
kill $WATCHDOG 2>/dev/null
for f in $B/runs/compile_*.log; do echo "== $f"; grep -v "^[EWI][0-9]" $f | tail -2; done
cp -r $RUNS/h200-compile-* $B/runs/
tar czf $OUT/bundle.tar.gz -C $OUT bundle && rm -rf $B
echo "total $(( $(date +%s) - T_START ))s"
