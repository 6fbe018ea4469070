"""Evidence that the timers repeat: three chosen points, each timed REPS times in one
process (a fresh timer call each time, same inputs), in the settings `moe-lab sweep` uses
by default (`eager`, `graph`), interleaved rep by rep. Eager rows also carry the plain
median over every call of the same timer call (`median_all_us`), the statistic the
timer used before it learned to set aside blocks where the host ran slow, so the
evidence shows both on the same calls.
Every point is prepared and checked first, the host is warmed up with HOST_WARMUP_S of
untimed calls, then the reps run rep-major (A B C A B C ...).
Usage: python3 scripts/repeatability.py OUT_DIR [REPS] [HOST_WARMUP_S]"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from moe_lab import backends  # noqa: E402
from moe_lab.measuring.correctness import check_backend, make_inputs, make_weights, reference  # noqa: E402
from moe_lab.core.problems import make_problem  # noqa: E402
from moe_lab.core.environment import capture_environment  # noqa: E402
from moe_lab.measuring.timing import EAGER_MIN_REPS, time_eager, time_graph  # noqa: E402

WARMUP_MS, REP_MS = 10.0, 50.0  # moe-lab sweep's defaults (--warmup-ms, --rep-ms)
POINTS = [  # (model, tokens, tp, ep, backend): GPU-bound, and two host-bound points
    ("deepseek-r1", 64, 8, 8, "aiter-triton"),
    ("qwen3-235b-a22b", 1024, 8, 1, "torch-grouped"),
    ("llama4-scout-16e", 1, 8, 1, "aiter-triton"),
]


SETTINGS = [  # (label, timer, rep_ms)
    ("eager", time_eager, REP_MS),
    ("graph", time_graph, REP_MS),
]
out = sys.argv[1]
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
HOST_WARMUP_S = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
os.makedirs(out, exist_ok=True)
rows = []
t0 = time.time()
prepared = []
for model, T, tp, ep, bname in POINTS:  # every point ready before any timing
    p = make_problem(model, T, "bf16", tp, ep, 0)
    w = make_weights(p, "cuda", 0)
    inp = make_inputs(p, "cuda", 1)
    b = backends.get(bname)
    fn = b.prepare(p, w)
    chk = check_backend(b, p, w, inp, reference(p, w, inp), "cuda", fn)
    assert chk["status"] == "ok", chk
    prepared.append(((model, T, tp, ep, bname), w, inp, fn))
# The first seconds of a process ran slower on the H200 VMs: warm the host up with
# untimed eager calls of every point before the first timed one.
t_warm = time.time()
while time.time() - t_warm < HOST_WARMUP_S:
    for _, _, inp, fn in prepared:
        fn(*inp.args())
    torch.cuda.synchronize()
# rep-major order: each point's reps are spread over the whole command, so a slow
# stretch of the host lands on several points rather than on all reps of one
for r in range(reps):
    for (model, T, tp, ep, bname), _, inp, fn in prepared:
        for label, timer, rep_ms in SETTINGS:
            t = timer(fn, [inp.args()], warmup_ms=WARMUP_MS, rep_ms=rep_ms)
            rows.append(dict(model=model, tokens=T, tp=tp, ep=ep, backend=bname, mode=label,
                             rep=r, rep_ms=rep_ms, median_us=t.median_us, p10_us=t.p10_us,
                             p90_us=t.p90_us, n=t.n, median_all_us=t.median_all_us,
                             steady_frac=t.steady_frac,
                             at_s=round(time.time() - t0, 2)))
            print(rows[-1], flush=True)
del prepared
torch.cuda.empty_cache()
import pandas as pd  # noqa: E402
df = pd.DataFrame(rows)
summary = (df.groupby(["model", "tokens", "tp", "ep", "backend", "mode"])
           .agg(min=("median_us", "min"), median=("median_us", "median"),
                max=("median_us", "max"), n_min=("n", "min"),
                all_min=("median_all_us", "min"), all_max=("median_all_us", "max"),
                steady_frac_min=("steady_frac", "min")).reset_index())
summary["spread_pct"] = 100 * (summary["max"] - summary["min"]) / summary["median"]
summary["plain_median_spread_pct"] = 100 * (summary["all_max"] - summary["all_min"]) / summary["median"]
summary["within_5pct"] = summary["spread_pct"] <= 5.0
print(summary.to_string(index=False))
df.to_csv(os.path.join(out, "repeatability.csv"), index=False)
summary.to_csv(os.path.join(out, "repeatability_summary.csv"), index=False)
json.dump(dict(command=" ".join(sys.argv), reps=reps, wall_s=round(time.time() - t0, 1),
               environment=capture_environment(),
               method=(f"each rep is a fresh time_eager/time_graph call on the same inputs, "
                       f"warmup {WARMUP_MS:g} ms, {REP_MS:g} ms of timed calls (eager: at "
                       f"least {EAGER_MIN_REPS} calls, in blocks, statistics over the steady "
                       "blocks), L2 "
                       "flushed before each call, garbage collector paused while timing; "
                       "the settings interleaved rep by rep, points rep-major, after "
                       f"{HOST_WARMUP_S:g} s of untimed host warm-up")),
          open(os.path.join(out, "repeatability_manifest.json"), "w"), indent=1, default=str)
