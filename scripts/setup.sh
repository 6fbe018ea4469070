#!/usr/bin/env bash
# Set up moe-lab in the active Python environment (conda env, venv or system python).
# Reuses an installed torch (ROCm, CUDA or CPU build); only where none is installed does
# it add the CPU build, never a multi-gigabyte CUDA build.
#   bash scripts/setup.sh          # package + notebooks
#   bash scripts/setup.sh test     # + test dependencies (pytest, amd-aiter, triton: the
#                                  #   tests run aiter's Triton kernels in Triton's interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
pip_q() { "$PY" -m pip install -q --disable-pip-version-check "$@"; }
if "$PY" -c "import torch" 2>/dev/null; then
  echo "setup: using installed torch $("$PY" -c 'import torch; print(torch.__version__)')"
else
  # no torch: the CPU build, unless an NVIDIA GPU is here (ROCm users bring their own build).
  # The plain index gives the CUDA build on most machines, so take PyTorch's CPU index; only
  # where that index cannot be reached, the plain one (a mirror that carries the CPU wheel).
  CPU_INDEX=https://download.pytorch.org/whl/cpu
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "setup: no torch found, an NVIDIA GPU is: installing torch==2.13.0 (CUDA build)"
    pip_q torch==2.13.0
  elif "$PY" -c "import urllib.request,sys; urllib.request.urlopen('$CPU_INDEX/torch/', timeout=8)" 2>/dev/null; then
    echo "setup: no torch found; installing the CPU build torch==2.13.0 from $CPU_INDEX"
    pip_q torch==2.13.0 --index-url "$CPU_INDEX"
  else
    # the configured index (a mirror, a wheel folder): only if what it resolves is the CPU
    # build; PyPI's Linux torch is the CUDA build and pulls gigabytes of nvidia-* packages
    plan=$("$PY" -m pip install --dry-run --quiet --disable-pip-version-check --report - \
           torch==2.13.0 2>/dev/null | "$PY" -c "import json, sys
try: print(' '.join(i['metadata']['name'].lower() + '==' + i['metadata']['version'] for i in json.load(sys.stdin)['install']))
except ValueError: pass") || true
    what=$(grep -oE 'torch==[^ ]+' <<< "$plan") || true
    if [ -z "$what" ] || grep -qE 'nvidia-|torch==[^ ]*\+cu' <<< "$plan"; then
      echo "setup: no torch found, $CPU_INDEX cannot be reached and the configured index" \
           "offers ${what:+$what, a CUDA build with $(grep -oE 'nvidia-' <<< "$plan" | wc -l) nvidia-* packages}${what:-no torch==2.13.0}:" \
           "install PyTorch's CPU build yourself (pip install torch --index-url $CPU_INDEX), then run this again" >&2
      exit 2
    fi
    echo "setup: no torch found and $CPU_INDEX cannot be reached; the configured index has" \
         "the CPU build: installing $(grep -oE 'torch==[^ ]+' <<< "$plan")"
    pip_q torch==2.13.0
  fi
fi
extras="notebooks"
[ "${1:-}" = "test" ] && extras="notebooks,test"
t0=$(date +%s)
echo "setup: installing moe-lab (editable) with [$extras]: pandas, pyarrow, matplotlib, tqdm," \
     "jupyterlab, nbclient, nbconvert, ipykernel, papermill$([ "$extras" != notebooks ] && echo ', pytest, amd-aiter (its Triton kernels), triton')" \
     "(1-2 minutes on a fresh machine, seconds when present)"
if ! pip_q -e ".[$extras]"; then
  # no package index (the lent GPU machines have none): where the image already has what
  # the main job imports, moe-lab runs from this working tree (`python -m moe_lab`), its
  # `moe-lab` command registered offline; the notebook tools are what is missing then
  if "$PY" -c "import pandas, pyarrow, matplotlib, tqdm, numpy, scipy" 2>/dev/null; then
    "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps \
      --no-build-isolation -e . >/dev/null 2>&1 || true
    echo "setup: could not install [$extras] (no package index?): running moe-lab from this" \
         "checkout with the installed pandas, pyarrow, matplotlib, tqdm, numpy and scipy;" \
         "$("$PY" -c 'import papermill, jupyterlab' 2>/dev/null && echo 'the notebook tools are here' || echo 'no notebook tools (jupyterlab, papermill): `moe-lab report` needs them')"
  else
    echo "setup: could not install moe-lab [$extras] and this Python lacks its runtime" \
         "packages (pandas, pyarrow, matplotlib, tqdm, numpy, scipy): install them, then run this again" >&2
    exit 2
  fi
fi
# aiter's Triton kernels need triton and a GPU; ROCm/CUDA torch builds bring their own
# triton. A CPU machine's main job has nothing to run it on (the test extra brings it for
# the tests, which run the kernels in Triton's interpreter): no 1 GB download for nothing.
if ! "$PY" -c "import triton" 2>/dev/null && \
   "$PY" -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "setup: installing triton (aiter's Triton kernels run on this GPU; this torch build has none)"
  pip_q triton
fi
# `backends` says yes only for a backend that can run something on this machine
echo "setup: done in $(( $(date +%s) - t0 )) s ($("$PY" -m moe_lab backends | grep -c ' yes ') backends available here; \`python -m moe_lab backends\` says why not)"
