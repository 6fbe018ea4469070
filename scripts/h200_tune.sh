#!/usr/bin/env bash
# One device command on a 2-GPU H200 host (issue 13): the ceilings (copy, read, GEMM), then
# `moe-lab tune` of aiter-triton and aiter-triton-silu for the four seed models, TP8 on GPU 0
# and TP8+EP8 on GPU 1 at once, then a smoke sweep of --config default,tuned.
# Run from the repo root with the amd-aiter wheel in .whl/ and MOE_LAB_GIT_COMMIT=<sha>.
# Everything lands in $OUT/bundle.tar.gz. Resumable: rerun with the bundle's runs/ unpacked
# into $B/runs and the searches continue.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
B=$OUT/bundle; mkdir -p $B/runs $B/ceilings $B/logs
export MOE_LAB_DATA=$B/runs            # tuned files go to $B/configs/<device> (data dir's ../configs)
TOKENS=${TOKENS:-1,4,16,64,256,1024,4096,8192}
MODELS=llama4-scout-16e,llama4-maverick-128e,deepseek-r1,qwen3-235b-a22b
T1=${T1:-270}; T2=${T2:-150}
t0=$(date +%s)
CUDA_VISIBLE_DEVICES=0 python3 -m moe_lab ceilings --out-dir $B/ceilings > $B/logs/ceilings.log 2>&1
echo "ceilings rc=$? ($(( $(date +%s)-t0 )) s)"; tail -4 $B/logs/ceilings.log
tune() {  # gpu ep backend budget
  CUDA_VISIBLE_DEVICES=$1 timeout -s TERM -k 20 $(( $4 + 40 )) python3 -m moe_lab tune \
    --backend $3 --models $MODELS --tp 8 --ep $2 --tokens $TOKENS --budget $4 \
    --rep-ms 10 --warmup-ms 2 --run-id tune-$3-ep$2 --configs-dir $B/configs-ep$2/nvidia-h200 \
    --data-dir $B/runs --no-progress > $B/logs/tune-$3-ep$2.log 2>&1
  echo "tune $3 ep$2 rc=$? ($(( $(date +%s)-t0 )) s)"
}
for ep in 1 8; do
  gpu=$([ $ep = 1 ] && echo 0 || echo 1)
  (tune $gpu $ep aiter-triton $T1; tune $gpu $ep aiter-triton-silu $T2) &
done
wait
python3 - "$B" <<'PY'
import json, shutil, sys
from pathlib import Path
B = Path(sys.argv[1]); dst = B / "configs" / "nvidia-h200"
for src in sorted(B.glob("configs-ep*/nvidia-h200")):
    for f in src.rglob("*.json"):
        rel = f.relative_to(src); out = dst / rel; out.parent.mkdir(parents=True, exist_ok=True)
        if f.name == "provenance.json":
            prov = json.loads(out.read_text()) if out.exists() else {}
            prov.update(json.loads(f.read_text())); out.write_text(json.dumps(prov, indent=2, sort_keys=True) + "\n")
        else:
            shutil.copy(f, out)
    shutil.rmtree(src.parent)
print("configs:", sorted(str(p.relative_to(dst)) for p in dst.rglob("*.json")))
PY
CUDA_VISIBLE_DEVICES=0 timeout -k 10 60 python3 -m moe_lab sweep --models deepseek-r1 --tp 8 --ep 1,8 \
  --tokens 1,64 --backends aiter-triton,aiter-triton-silu,torch-grouped --config default,tuned \
  --modes graph --data-dir $B/runs --run-id smoke-config --no-progress > $B/logs/smoke.log 2>&1
echo "smoke rc=$? ($(( $(date +%s)-t0 )) s)"; tail -3 $B/logs/smoke.log
for f in $B/logs/tune-*.log; do echo "== $f"; tail -4 $f; done
tar czf $OUT/bundle.tar.gz -C $OUT bundle && rm -rf $B
