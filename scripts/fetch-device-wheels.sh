#!/usr/bin/env bash
# Put the Python wheels a GPU machine without network lacks (amd-aiter, pure Python) into
# .whl/ at the repo root (ignored by git), to carry with a device command. Run from the
# repo root; extra NAME==VERSION arguments add more wheels.
#
#   bash scripts/fetch-device-wheels.sh            # amd-aiter (+ NAME==VERSION ...)
#   bash scripts/fetch-device-wheels.sh vllm       # vLLM's fused MoE, in parts (below)
#
# `vllm`: the vllm 0.26.0 wheel (304 MB: torch 2.11, CUDA 13) is downloaded once to
# .whl/vllm/ and only what its Triton fused MoE needs is kept: its Python files and JSON
# configs, vllm/third_party/ without its DeepGEMM/FMHA builds (pynvml.py is how vLLM finds
# CUDA), the dist-info, and the two compiled libraries `_C_stable_libtorch.abi3.so` and
# `_moe_C_stable_libtorch.abi3.so` (no flash-attention, DeepGEMM or other .so). That is one
# tar.gz split into 45 MiB parts (.whl/vllm/parts/) plus the pure-Python packages
# vLLM imports on the way (.whl/vllm/deps/*.whl), since a device command carries at most
# 64 MiB: one part per command, gathered on the device (the script prints how).
set -eu
EXCLUDE=$(git rev-parse --git-path info/exclude)  # .git is a file in a worktree
mkdir -p "$(dirname "$EXCLUDE")"
grep -qx '/.whl/' "$EXCLUDE" 2>/dev/null || echo '/.whl/' >> "$EXCLUDE"
mkdir -p .whl
if [ "${1:-}" != vllm ]; then
  python3 -m pip download -q --no-deps -d .whl amd-aiter "$@"
  ls -la .whl
  cat <<'TXT'
On the GPU machine, from the repo root, start the command with:
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=$PWD:/tmp/site
(importing `aiter` itself fails off ROCm; moe-lab loads aiter's Triton modules without it)
TXT
  exit 0
fi
VLLM=0.26.0
# vLLM's import dependencies a CUDA torch image may lack (pure Python, or small wheels for
# the device's Python: cp312 on the H200 image)
DEPS="pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
      msgspec==0.23.0 cbor2==6.3.0 pyzmq blake3==1.0.11 cachetools==8.0.2 pybase64==1.5.1
      regex==2026.11.19"
PYV=${DEVICE_PYTHON:-3.12}
D=.whl/vllm
mkdir -p $D/deps $D/parts
ls $D/vllm-$VLLM-*.whl >/dev/null 2>&1 ||
  python3 -m pip download -q --no-deps --only-binary=:all: -d $D "vllm==$VLLM" \
    --python-version $PYV --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_31_x86_64 --platform manylinux_2_35_x86_64 --platform manylinux2014_x86_64
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: -d $D/deps $DEPS \
  --python-version $PYV --implementation cp --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any
python3 - "$D" "$VLLM" <<'PY'
import glob, io, os, sys, tarfile, zipfile
d, ver = sys.argv[1], sys.argv[2]
SKIP = ("vllm/vllm_flash_attn/", "vllm/third_party/deep_gemm/", "vllm/third_party/fmha_sm100/",
        "vllm/third_party/tml_fa4/")
SO = ("vllm/_C_stable_libtorch.abi3.so", "vllm/_moe_C_stable_libtorch.abi3.so")
whl = sorted(glob.glob(os.path.join(d, f"vllm-{ver}-*.whl")))[0]
z = zipfile.ZipFile(whl)
keep = [i for i in z.infolist() if not i.is_dir() and (
    i.filename in SO or i.filename.startswith(f"vllm-{ver}.dist-info/")
    or (i.filename.startswith("vllm/") and not i.filename.startswith(SKIP)
        and not i.filename.endswith(".so")))]
tar_path = os.path.join(d, f"vllm-{ver}-fused-moe.tar.gz")
with tarfile.open(tar_path + ".tmp", "w:gz") as t:
    for i in keep:
        info = tarfile.TarInfo(i.filename)
        info.size, info.mode = i.file_size, 0o644
        t.addfile(info, io.BytesIO(z.read(i)))
os.replace(tar_path + ".tmp", tar_path)
for so in SO:
    print(f"  {so}: {z.getinfo(so).file_size / 2**20:.1f} MiB")
print(f"  {len(keep)} files, {sum(i.file_size for i in keep) / 2**20:.1f} MiB unpacked, "
      f"{os.path.getsize(tar_path) / 2**20:.1f} MiB packed")
PY
rm -f $D/parts/part-*
split -b 45M -d "$D/vllm-$VLLM-fused-moe.tar.gz" $D/parts/part-
rm "$D/vllm-$VLLM-fused-moe.tar.gz"
ls -la $D/parts $D/deps
cat <<TXT
On the GPU machine, one part per device command (each carries at most 64 MiB), gathered
in /tmp (kept while the machine stays warm), then unpacked once into /tmp/vllm-site:
  carry .whl/vllm/parts/part-00:  mkdir -p /tmp/vllm-stage && cp .whl/vllm/parts/part-00 /tmp/vllm-stage/
  carry .whl/vllm/parts/part-01:  cp .whl/vllm/parts/part-01 /tmp/vllm-stage/   (and so on)
  carry .whl/vllm/deps:           mkdir -p /tmp/vllm-site && cat /tmp/vllm-stage/part-* | tar xz -C /tmp/vllm-site &&
     python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/vllm-site .whl/vllm/deps/*.whl
Later commands: export PYTHONPATH=\$PWD:/tmp/site:/tmp/vllm-site; \`moe-lab backends\` says
whether vllm can run here, and what is missing where not.
TXT
