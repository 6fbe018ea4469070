#!/usr/bin/env bash
# Put what a GPU machine without network lacks into .whl/ at the repo root (ignored by git),
# cut to size for device commands, which carry at most 64 MiB each, the working tree
# included (scripts/device_bundle.py does the cutting). Run from the repo root.
#
#   bash scripts/fetch-device-wheels.sh            # amd-aiter: .whl/aiter-cut.tar.gz (+ NAME==VERSION ...)
#   bash scripts/fetch-device-wheels.sh vllm       # vLLM's fused MoE: .whl/vllm/parts/vllm-<id>-K-of-N
#
# amd-aiter: the wheel (40 MB; .whl/amd_aiter-*.whl, downloaded once) cut to the files the
# aiter-triton backends import (aiter's Triton MoE, align, activation and quant modules,
# what they import, its MoE config JSONs, its METADATA): .whl/aiter-cut.tar.gz, about
# 40 KB. A device command carries it (carry .whl/aiter-cut.tar.gz) and scripts/device_env.sh
# unpacks it into /tmp/site. Older device scripts that carry all of .whl/ still install the
# wheels there.
#
# vllm: the vllm 0.26.0 wheel (304 MB: torch 2.11, CUDA 13; found in .whl/vllm/,
# .vllm-wheel/ or $MOE_LAB_VLLM_WHEEL, else downloaded) cut to what its Triton fused MoE
# needs: its Python files and JSON configs, vllm/third_party/ without the FMHA builds
# (pynvml.py is how vLLM finds CUDA), the dist-info and the two compiled libraries
# `_C_stable_libtorch.abi3.so` and `_moe_C_stable_libtorch.abi3.so` (no flash-attention,
# no vllm-rs binary; DeepGEMM's extension for CPython 3.12), with the cp312 wheels of the pure-Python packages vLLM
# imports that the H200 image lacks (DEPS: the image has transformers, tokenizers,
# safetensors, huggingface-hub, aiohttp and regex), and FlashInfer as vLLM 0.26 pins it
# (flashinfer-python 0.6.14 with what its import needs: apache-tvm-ffi, nvidia-ml-py; ninja for
# its JIT with the machine's nvcc: the flashinfer-cutlass backend; DeepGEMM comes with the
# wheel's vllm/third_party/deep_gemm). One archive (the same inputs give the
# same bytes), split into the fewest equal parts that fit beside today's working tree and
# the aiter cut. scripts/device_vllm.sh gathers them on the device, one part per call.
# VLLM_ARCH (default 90, the H200): of the two libraries' compiled GPU code only what an
# sm_90 GPU's driver loads travels, as the wheel has it (device_bundle.py: the other GPUs'
# images zeroed in place: the two libraries 40 MB instead of 109, one part fewer); `all` keeps it all.
set -eu
EXCLUDE=$(git rev-parse --git-path info/exclude)  # .git is a file in a worktree
mkdir -p "$(dirname "$EXCLUDE")"
grep -qx '/.whl/' "$EXCLUDE" 2>/dev/null || echo '/.whl/' >> "$EXCLUDE"
mkdir -p .whl
if [ "${1:-}" != vllm ]; then
  ls .whl/amd_aiter-*.whl >/dev/null 2>&1 || python3 -m pip download -q --no-deps -d .whl amd-aiter
  [ $# -gt 0 ] && python3 -m pip download -q --no-deps -d .whl "$@"
  python3 scripts/device_bundle.py aiter-cut "$(ls .whl/amd_aiter-*.whl | tail -1)" .whl/aiter-cut.tar.gz
  cat <<'TXT'
A device command carries .whl/aiter-cut.tar.gz (carry) and sources scripts/device_env.sh,
which unpacks it into /tmp/site (importing `aiter` itself fails off ROCm; moe-lab loads
aiter's Triton modules without it).
TXT
  exit 0
fi
VLLM=0.26.0
DEPS="pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
      msgspec==0.23.0 cbor2==6.3.0 pyzmq==27.3.0 blake3==1.0.11 cachetools==8.0.2 pybase64==1.5.1"
FI_DEPS="flashinfer-python==0.6.14 apache-tvm-ffi==0.1.15.post2 nvidia-ml-py==13.615.71 ninja==1.13.2"
# VLLM_FLASHINFER=0: without FlashInfer (one part fewer: 43 MiB in 2 parts, id f75a58d2 with
# sm_90 code), for a lease too short to build its JIT module anyway
[ "${VLLM_FLASHINFER:-1}" = 0 ] || DEPS="$DEPS $FI_DEPS"
PYV=${DEVICE_PYTHON:-3.12}
D=.whl/vllm
mkdir -p $D/deps $D/parts
WHEEL=
for w in "${MOE_LAB_VLLM_WHEEL:-}" $D/vllm-$VLLM-*.whl .vllm-wheel/vllm-$VLLM-*.whl; do
  [ -n "$w" ] && [ -f "$w" ] && { WHEEL=$w; break; }
done
if [ -z "$WHEEL" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: -d $D "vllm==$VLLM" \
    --python-version $PYV --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_31_x86_64 --platform manylinux_2_35_x86_64 --platform manylinux2014_x86_64
  WHEEL=$(ls $D/vllm-$VLLM-*.whl | tail -1)
fi
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: -d $D/deps $DEPS \
  --python-version $PYV --implementation cp --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_26_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 --platform any
rm -f $D/deps/regex-*.whl  # the image has regex: one version only
if [ "${VLLM_FLASHINFER:-1}" = 0 ]; then  # an earlier fetch's FlashInfer wheels left out
  for p in $FI_DEPS; do n=${p%%==*}; rm -f "$D/deps/${n//-/_}"-*.whl; done
fi
# what travels with every call: the tracked and the untracked-not-ignored files
TREE=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 -r stat -c %s 2>/dev/null \
        | awk '{s += $1} END {print s + 0}')
[ -f .whl/aiter-cut.tar.gz ] || bash "$0"
python3 scripts/device_bundle.py vllm-parts "$WHEEL" $D/deps $D/parts "$TREE" .whl/aiter-cut.tar.gz \
  "${VLLM_ARCH:-90}"
# vLLM's published tunings of the fused-MoE kernel, every device's (326 files, 1.1 MB):
# what `device_tune.sh sweep` with PUBLISHED=.whl/published times aiter-triton with, beside
# default and tuned, and `device_vllm.sh sweep` vllm with where vLLM's lookup misses the
# GPU's file (vllm_files.unread_files); the device scripts take the GPU found's
rm -rf .whl/published && mkdir -p .whl/published
python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [open(".whl/published/" + n.rsplit("/", 1)[1], "wb").write(z.read(n)) for n in z.namelist() if "/fused_moe/configs/" in n and "device_name=" in n and n.endswith(".json")]' "$WHEEL"
echo "published: $(ls .whl/published | wc -l) files of vllm $VLLM in .whl/published ($(ls .whl/published | grep -c NVIDIA_H200) H200, $(ls .whl/published | grep -c 'NVIDIA_H100[_,]') H100; carry it for device_tune.sh sweep and device_vllm.sh sweep, PUBLISHED=.whl/published)"
echo "Next: the run calls at the top of scripts/device_vllm.sh, with these part names."
