# Sourced by the device scripts (device_tune.sh, device_vllm.sh): amd-aiter
# into /tmp/site (no index on the device machine): the cut of scripts/fetch-device-wheels.sh
# when carried (.whl/aiter-cut.tar.gz), and any wheels carried in .whl/; the working tree on
# the path, then /tmp/site, then vLLM where scripts/device_vllm.sh unpacked it
# (/tmp/vllm-site, its stand-ins in /tmp/vllm-standins); the bundle folders under $OUT, and
# the lease's STAMP (the first lease's YYYYMMDD, for resuming).
set -uo pipefail
# the lent GPU machine only: its run command sets OUT and torch sees its GPUs; elsewhere one
# line, exit 2 (a CPU machine ran the sweeps on its CPU, or stopped at `OUT: unbound variable`)
[ -n "${OUT:-}" ] || { echo "$(basename "$0"): OUT is not set: this script runs on the lent GPU machine, whose run command sets OUT (here: moe-lab sweep, tune)"; exit 2; }
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null)
[ "${NGPU:-0}" -gt 0 ] 2>/dev/null || { echo "$(basename "$0"): no GPU visible to torch here (python3: ${NGPU:-no torch}): this script runs on the lent GPU machine"; exit 2; }
# any GPU: its runs are named for it (DEVICE_TAG: h200-*, h100-*), its tuned files go to
# data/configs/$DEVICE_SLUG and it times against its own committed files (core.devices
# shell_vars); several GPUs of one machine must be one kind (a run is one device's points)
NAMES=$(python3 -c "import sys, torch; print('\n'.join(sorted({torch.cuda.get_device_name(i) for i in range(int(sys.argv[1]))})))" "$NGPU" 2>/dev/null)
[ "$(wc -l <<< "$NAMES")" = 1 ] || { echo "$(basename "$0"): this machine's GPUs are of several kinds ($(paste -sd, <<< "$NAMES")): a run is one device's points; give one kind with CUDA_VISIBLE_DEVICES"; exit 2; }
eval "$(PYTHONPATH=$PWD python3 -c "import sys; from moe_lab.core.devices import shell_vars; print(shell_vars(sys.argv[1]))" "$NAMES")" || exit 1
export GPU_NAME DEVICE_SLUG DEVICE_TAG FILE_DEVICE CONFIGS=data/configs/$DEVICE_SLUG
[ -n "${DEVICE_SAID:-}" ] || echo "$(basename "$0"): $NGPU x $GPU_NAME: runs $DEVICE_TAG-*, tuned files $CONFIGS"
DEVICE_SAID=1
[ -n "${DEVICE_CHECK_ONLY:-}" ] && return 0
SITE=${AITER_SITE:-/tmp/site}; mkdir -p $SITE
if [ -f .whl/aiter-cut.tar.gz ]; then tar xzf .whl/aiter-cut.tar.gz -C $SITE || exit 1; fi
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE .whl/*.whl || exit 1
fi
[ -d $SITE/aiter ] || echo "device_env: no amd-aiter here (carry .whl/aiter-cut.tar.gz): aiter-triton points will be unavailable rows"
export PYTHONPATH=$PWD:$SITE PYTHONUNBUFFERED=1
VLLM_SITE=${VLLM_SITE:-/tmp/vllm-site}; VLLM_STANDINS=${VLLM_STANDINS:-/tmp/vllm-standins}
[ -f "$VLLM_SITE/BUNDLE" ] && export PYTHONPATH=$PYTHONPATH:$VLLM_SITE:$VLLM_STANDINS
B=$OUT/bundle; mkdir -p $B/runs $B/logs $B/checks
STAMP=${STAMP:-$(date -u +%Y%m%d)}
deal() {  # fn items...: the items dealt to the GPUs in turn, `fn gpu item` one after another
  local fn=$1 g i; shift; local all=("$@")  # on each GPU, the GPUs side by side; waits
  for (( g = 0; g < NGPU; g++ )); do
    local mine=()
    for (( i = g; i < ${#all[@]}; i += NGPU )); do mine+=("${all[$i]}"); done
    [ ${#mine[@]} -gt 0 ] && (for x in "${mine[@]}"; do "$fn" "$g" "$x"; done) &
  done
  wait
}
