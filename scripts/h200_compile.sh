#!/usr/bin/env bash
# One device command for the eager / graph / torch.compile comparison (issue 4):
# the four seed models at TP8 spread over the machine's GPUs (one process per GPU, one run
# folder per model), all compile variants, dynamic on and off. Everything returns in
# $OUT/bundle.tar.gz. Pass MOE_LAB_GIT_COMMIT=<sha>; PER_GPU_S bounds each process.
# Runs are written into the repo's data/runs/ (which travels with the working tree), so
# the same command on a later lease resumes the committed folders instead of starting over.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 MOE_LAB_GIT_COMMIT=${MOE_LAB_GIT_COMMIT:-unknown}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=$OUT/bundle; mkdir -p $B/runs
RUNS=data/runs
STAMP=${STAMP:-20261129}  # keep the committed run ids so a rerun resumes them
PER_GPU_S=${PER_GPU_S:-480}
TOKENS=${TOKENS:-1,16,256,4096}
MODES=${MODES:-eager,graph,compile:default,compile:default:dynamic,compile:reduce-overhead,compile:reduce-overhead:dynamic,compile:max-autotune-no-cudagraphs,compile:max-autotune-no-cudagraphs:dynamic}
MODELS=(llama4-scout-16e llama4-maverick-128e deepseek-r1 qwen3-235b-a22b)
NG=$(python3 -c "import torch; print(torch.cuda.device_count())")
PER_MODEL_S=$(( PER_GPU_S / ((${#MODELS[@]} + NG - 1) / NG) ))
echo "gpus=$NG tokens=$TOKENS per-model limit ${PER_MODEL_S}s"
for g in $(seq 0 $((NG-1))); do
  (
    for i in "${!MODELS[@]}"; do
      [ $((i % NG)) -eq $g ] || continue
      m=${MODELS[$i]}
      CUDA_VISIBLE_DEVICES=$g timeout $PER_MODEL_S python3 -m moe_lab sweep --models $m --tp 8 --ep 1 \
        --tokens $TOKENS --backends torch,torch-grouped,aiter-triton --modes $MODES \
        --data-dir $RUNS --run-id h200-compile-$m-$STAMP --no-progress \
        > $B/runs/compile_$m.log 2>&1
      echo "$m rc=$?"
    done
  ) &
done
wait
for f in $B/runs/compile_*.log; do echo "== $f"; grep -v "^[EWI][0-9]" $f | tail -3; done
cp -r $RUNS/h200-compile-* $B/runs/
tar czf $OUT/bundle.tar.gz -C $OUT bundle && rm -rf $B
