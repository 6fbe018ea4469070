#!/usr/bin/env bash
# The main job: set up, check every backend against the reference, then sweep.
# On a CPU machine: qwen3-30b-a3b (TP8) at 1..64 tokens with the torch backends.
# With a GPU: the four seed models at TP8 and TP8+EP8, tokens 1..8192, every backend
# that runs there, eager and graph modes. Extra arguments go to `moe-lab sweep`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=${PYTHON:-python3}
if "$PY" -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  "$PY" -m moe_lab check --tokens 1,64,1024 --ep 1,8
else
  "$PY" -m moe_lab check --tokens 1,16
fi
"$PY" -m moe_lab sweep "$@"
