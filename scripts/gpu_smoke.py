"""Quick GPU smoke test: every backend on a few seed points + kernel names seen by the
profiler. Needs no other moe_lab instrument. Usage: python3 scripts/gpu_smoke.py OUT_DIR"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from moe_lab import backends  # noqa: E402
from moe_lab.correctness import check_problem, make_inputs, make_weights  # noqa: E402
from moe_lab.core.problems import make_problem  # noqa: E402

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())
for b in backends.all_backends():
    print(b.name, b.available())
names = {}
for model, T, ep in [("qwen3-235b-a22b", 64, 1), ("deepseek-r1", 64, 8), ("llama4-scout-16e", 1, 8),
                     ("llama4-maverick-128e", 1024, 1)]:
    p = make_problem(model, T, "bf16", 8, ep, 0)
    t0 = time.time()
    for r in check_problem(p, ["torch", "torch-grouped", "aiter-triton"], "cuda", 1):
        print(f"{model} ep{ep} T={T} {r['backend']:14} {r['status']:10} {r['max_rel_err']:.3e} "
              f"{r['error'][:150]} ({r['check_s']}s)", flush=True)
    w = make_weights(p, "cuda", 0)
    inp = make_inputs(p, "cuda", 1)
    for bn in ["torch", "torch-grouped", "aiter-triton"]:
        fn = backends.get(bn).prepare(p, w)
        fn(*inp.args())
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            fn(*inp.args())
            torch.cuda.synchronize()
        seq = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        names[f"{model}|ep{ep}|T{T}|{bn}"] = seq
        print(bn, len(seq), "kernels:", seq[:12], flush=True)
    del w, inp
    torch.cuda.empty_cache()
json.dump(names, open(os.path.join(out, "kernel_names_h200.json"), "w"), indent=1)
