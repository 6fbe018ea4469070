#!/usr/bin/env bash
# Put the Python wheels a GPU machine without network lacks (amd-aiter, pure Python) into
# .whl/ at the repo root (ignored by git), to carry with a device command. Run from the
# repo root; extra NAME==VERSION arguments add more wheels.
set -eu
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
python3 -m pip download -q --no-deps -d .whl amd-aiter "$@"
ls -la .whl
cat <<'TXT'
On the GPU machine, from the repo root, start the command with:
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=$PWD:/tmp/site
(importing `aiter` itself fails off ROCm; moe-lab loads aiter's Triton modules without it)
TXT
