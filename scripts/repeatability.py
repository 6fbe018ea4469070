"""Evidence that the timers repeat: three chosen points, each timed REPS times in one
process (a fresh timer call each time, same inputs), in the settings `moe-lab sweep` uses
by default (`eager`, `graph`) and, for comparison, eager with a 10x longer window
(`eager-500ms`) and eager with the process pinned to one core (`eager-pinned`). Reps of the three settings are interleaved, so a slow drift of the
machine shows in all of them rather than in one.
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
from moe_lab.timing import EAGER_MIN_REPS, time_eager, time_graph  # noqa: E402

WARMUP_MS, REP_MS = 10.0, 50.0  # moe-lab sweep's defaults (--warmup-ms, --rep-ms)
POINTS = [  # (model, tokens, tp, ep, backend): GPU-bound, and two host-bound points
    ("deepseek-r1", 64, 8, 8, "aiter-triton"),
    ("qwen3-235b-a22b", 1024, 8, 1, "torch-grouped"),
    ("llama4-scout-16e", 1, 8, 1, "aiter-triton"),
]


def pinned(timer):
    """The timer with this process held on one CPU core (diagnostic: is the spread the
    scheduler moving the launching thread between cores?)."""
    def run(*a, **kw):
        cpus = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(cpus)})
        try:
            return timer(*a, **kw)
        finally:
            os.sched_setaffinity(0, cpus)
    return run


SETTINGS = [  # (label, timer, rep_ms)
    ("eager", time_eager, REP_MS),
    ("graph", time_graph, REP_MS),
    ("eager-500ms", time_eager, 10 * REP_MS),
    ("eager-pinned", pinned(time_eager), REP_MS),
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
    for r in range(reps):
        for label, timer, rep_ms in SETTINGS:
            t = timer(fn, [inp.args()], warmup_ms=WARMUP_MS, rep_ms=rep_ms)
            rows.append(dict(model=model, tokens=T, tp=tp, ep=ep, backend=bname, mode=label,
                             rep=r, rep_ms=rep_ms, median_us=t.median_us, p10_us=t.p10_us,
                             p90_us=t.p90_us, n=t.n))
            print(rows[-1], flush=True)
    del w, inp, fn
    torch.cuda.empty_cache()
import pandas as pd  # noqa: E402
df = pd.DataFrame(rows)
summary = (df.groupby(["model", "tokens", "tp", "ep", "backend", "mode"])
           .agg(min=("median_us", "min"), median=("median_us", "median"),
                max=("median_us", "max"), n_min=("n", "min")).reset_index())
summary["spread_pct"] = 100 * (summary["max"] - summary["min"]) / summary["median"]
summary["within_5pct"] = summary["spread_pct"] <= 5.0
print(summary.to_string(index=False))
df.to_csv(os.path.join(out, "repeatability.csv"), index=False)
summary.to_csv(os.path.join(out, "repeatability_summary.csv"), index=False)
json.dump(dict(command=" ".join(sys.argv), reps=reps, wall_s=round(time.time() - t0, 1),
               environment=capture_environment(),
               method=(f"each rep is a fresh time_eager/time_graph call on the same inputs, "
                       f"warmup {WARMUP_MS:g} ms, {REP_MS:g} ms of timed calls (eager: at "
                       f"least {EAGER_MIN_REPS} calls; eager-500ms: {10 * REP_MS:g} ms), L2 "
                       "flushed before each call, garbage collector paused while timing; "
                       "the settings interleaved rep by rep")),
          open(os.path.join(out, "repeatability_manifest.json"), "w"), indent=1, default=str)
