#!/usr/bin/env bash
# Issue 16 on a 2-GPU H200 lease (device kind nvidia-h200-x2). One step per device command
# (a command may run 10 minutes); every step resumes its folders, so a step cut by its
# timeout is finished by running it again: the runs live in out/runs/ (ignored, kept on a
# warm machine) and a run folder already in data/runs/ is copied there first. From the repo
# root, with the amd-aiter wheel in .whl/ and MOE_LAB_GIT_COMMIT=<sha>; every step's $OUT/bundle-$STEP.tar.gz holds all the
# runs so far (copy them into data/runs/). Give every step the same STAMP.
#
#   STEP=smoke  bash scripts/h200_distributed.sh  # NCCL, graph capture of collectives: tiny
#   STEP=eager  bash scripts/h200_distributed.sh  # TP2 vs EP2 (all-reduce, all-to-all), eager
#   STEP=graph  bash scripts/h200_distributed.sh  # the same points in graph mode
#   STEP=single bash scripts/h200_distributed.sh  # the seed sweep on one GPU (rerun until done)
#   STEP=spread bash scripts/h200_distributed.sh  # the same sweep over both GPUs (--gpus all)
#
# eager/graph: the four seed models with their real TP2 and EP2 shards (every rank holds an
# I/2 slice of every expert, or E/2 whole experts), TOKENS (1..8192), uniform and zipf:1.2
# routing, BACKENDS; one run folder h200x2-expert-parallel-$STAMP. single/spread: the same
# sweep twice (SWEEP_ARGS), once on GPU 0 and once spread over both, for the wall-time target
# (spread <= 0.6x one GPU: notebook 06 computes it from the two manifests).
set -uo pipefail
STEP=${STEP:?set STEP=smoke|eager|graph|single|spread}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
B=$OUT/bundle-$STEP; mkdir -p $B
STAMP=${STAMP:-$(date -u +%Y%m%d)}
RUNS=${RUNS:-$PWD/out/runs}; mkdir -p $RUNS
for id in h200x2-smoke-$STAMP h200x2-expert-parallel-$STAMP h200-seed-one-gpu-$STAMP h200-seed-spread-$STAMP; do
  [ -d data/runs/$id ] && [ ! -d $RUNS/$id ] && cp -r data/runs/$id $RUNS/
done
LIMIT_S=${LIMIT_S:-540}
MODELS=llama4-scout-16e,llama4-maverick-128e,deepseek-r1,qwen3-235b-a22b
TOKENS=${TOKENS:-1,4,16,64,256,1024,4096,8192}
BACKENDS=${BACKENDS:-torch-grouped}
SWEEP_ARGS=${SWEEP_ARGS:---models $MODELS --backends torch-grouped,aiter-triton --tokens 1-8192 --modes eager,graph}
nvidia-smi -L > $B/gpus.txt 2>&1
t0=$(date +%s)
ep() {  # $1 = modes, $2 = run id, rest: extra arguments
  local modes=$1 id=$2; shift 2
  timeout -s TERM -k 60 $LIMIT_S python3 -m moe_lab sweep --nproc 2 --modes $modes \
    --parallel tp-allreduce,ep-allreduce,ep-alltoall --data-dir $RUNS --run-id $id \
    --dist-timeout 300 "$@" > $RUNS/$id-$modes.log 2>&1
  echo "$id $modes rc=$? ($(( $(date +%s)-t0 )) s)"; tail -2 $RUNS/$id-$modes.log
}
case $STEP in
  smoke)
    ep eager,graph h200x2-smoke-$STAMP --models custom:H=1024,I=512,E=16,k=4 --tokens 1,64,1024 \
      --backends torch,torch-grouped,aiter-triton --routing uniform,zipf:1.2,hot:0.5 ;;
  eager|graph)
    ep $STEP h200x2-expert-parallel-$STAMP --models $MODELS --tokens $TOKENS \
      --routing uniform,zipf:1.2 --backends $BACKENDS ;;
  single)
    CUDA_VISIBLE_DEVICES=0 timeout -s TERM -k 30 $LIMIT_S python3 -m moe_lab sweep $SWEEP_ARGS \
      --data-dir $RUNS --run-id h200-seed-one-gpu-$STAMP --no-progress > $RUNS/single.log 2>&1
    echo "single rc=$? ($(( $(date +%s)-t0 )) s)"; tail -2 $RUNS/single.log ;;
  spread)
    timeout -s TERM -k 30 $LIMIT_S python3 -m moe_lab sweep $SWEEP_ARGS --gpus all \
      --data-dir $RUNS --run-id h200-seed-spread-$STAMP > $RUNS/spread.log 2>&1
    echo "spread rc=$? ($(( $(date +%s)-t0 )) s)"; tail -2 $RUNS/spread.log ;;
  *) echo "unknown STEP $STEP" >&2; exit 2 ;;
esac
cp -r $RUNS $B/runs
tar czf $OUT/bundle-$STEP.tar.gz -C $OUT bundle-$STEP && rm -rf $B
