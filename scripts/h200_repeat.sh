#!/usr/bin/env bash
# One device command (issue 12's acceptance): the 32 graph points of the committed rerun
# (data/runs/h200-rerun-eager-graph-*: four seed models, TP8, tokens 1,16,256,4096,
# torch-grouped and aiter-triton) measured twice, in two fresh processes, with the same
# seed: the inputs are a pure function of the point and the seed, so both passes (and the
# committed rerun's routing) are identical; `inputs_digest` in every row proves it.
# Then the GPU tests. Run on the lent H200 from the repo root with the amd-aiter wheel in
# .whl/ and MOE_LAB_GIT_COMMIT=<sha>. Everything lands in $OUT/bundle.tar.gz.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
B=$OUT/bundle; mkdir -p $B/runs
STAMP=$(date -u +%Y%m%d)
PASS_S=${PASS_S:-200}
MODELS=llama4-scout-16e,llama4-maverick-128e,deepseek-r1,qwen3-235b-a22b
t0=$(date +%s)
for pass in a b; do
  timeout -s TERM -k 20 $PASS_S python3 -m moe_lab sweep --models $MODELS --tp 8 --ep 1 \
    --tokens 1,16,256,4096 --backends torch,torch-grouped,aiter-triton --modes eager,graph \
    --data-dir $B/runs --run-id h200-repeat-$pass-$STAMP --no-progress \
    > $B/runs/pass-$pass.log 2>&1
  echo "pass $pass rc=$? ($(( $(date +%s)-t0 )) s)"; tail -2 $B/runs/pass-$pass.log
done
timeout -k 10 ${TEST_S:-120} python3 -m pytest -q -p no:cacheprovider tests/test_timing.py \
  tests/test_compile.py tests/test_house.py -k "gpu or opcheck or measure" > $B/gpu_tests.log 2>&1
echo "gpu tests rc=$? ($(( $(date +%s)-t0 )) s)"; tail -3 $B/gpu_tests.log
tar czf $OUT/bundle.tar.gz -C $OUT bundle && rm -rf $B
