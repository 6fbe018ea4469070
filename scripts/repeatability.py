"""Evidence that the timers repeat: three chosen points, each timed REPS times in one
process (fresh timer call each time, same inputs), eager and graph.
Usage: python3 scripts/repeatability.py OUT_DIR [REPS]"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from moe_lab import backends as B  # noqa: E402
from moe_lab.check import check_backend, make_inputs, make_weights, reference  # noqa: E402
from moe_lab.problems import make_problem  # noqa: E402
from moe_lab.store import capture_environment  # noqa: E402
from moe_lab.timing import time_eager, time_graph  # noqa: E402

POINTS = [  # (model, tokens, tp, ep, backend)
    ("deepseek-r1", 64, 8, 8, "aiter-triton"),
    ("qwen3-235b-a22b", 1024, 8, 1, "torch-grouped"),
    ("llama4-scout-16e", 1, 8, 1, "aiter-triton"),
]
out = sys.argv[1]
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
os.makedirs(out, exist_ok=True)
rows = []
t0 = time.time()
for model, T, tp, ep, bname in POINTS:
    p = make_problem(model, T, "bf16", tp, ep, 0)
    w = make_weights(p, "cuda", 0)
    inp = make_inputs(p, "cuda", 1)
    b = B.get(bname)
    fn = b.prepare(p, w)
    chk = check_backend(b, p, w, inp, reference(p, w, inp), "cuda", fn)
    assert chk["status"] == "ok", chk
    for mode, timer in (("eager", time_eager), ("graph", time_graph)):
        for r in range(reps):
            t = timer(fn, [inp.args()], warmup_ms=10, rep_ms=50)
            rows.append(dict(model=model, tokens=T, tp=tp, ep=ep, backend=bname, mode=mode,
                             rep=r, median_us=t.median_us, p10_us=t.p10_us, p90_us=t.p90_us,
                             n=t.n))
            print(rows[-1], flush=True)
    del w, inp, fn
    torch.cuda.empty_cache()
import pandas as pd  # noqa: E402
df = pd.DataFrame(rows)
summary = (df.groupby(["model", "tokens", "tp", "ep", "backend", "mode"])["median_us"]
           .agg(["min", "median", "max"]).reset_index())
summary["spread_pct"] = 100 * (summary["max"] - summary["min"]) / summary["median"]
summary["within_5pct"] = summary["spread_pct"] <= 5.0
print(summary.to_string(index=False))
df.to_csv(os.path.join(out, "repeatability.csv"), index=False)
summary.to_csv(os.path.join(out, "repeatability_summary.csv"), index=False)
json.dump(dict(command=" ".join(sys.argv), reps=reps, wall_s=round(time.time() - t0, 1),
               environment=capture_environment(),
               method="each rep is a fresh time_eager/time_graph call on the same inputs, "
                      "warmup 10 ms, 50 ms of timed calls, L2 flushed before each call"),
          open(os.path.join(out, "repeatability_manifest.json"), "w"), indent=1, default=str)
