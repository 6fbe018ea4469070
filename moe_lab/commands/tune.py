"""`moe-lab tune`: search the launch configurations of a tunable backend per shape and token
count on this device; every candidate's time into data/runs/<run_id>/candidates.parquet, the
winners into data/configs/<device>/<backend>/ in the format the kernel's project reads."""
from __future__ import annotations

import os
import sys


from ..correctness import resolve_device
from ..core.environment import device_name
from ..core.errors import UsageError
from . import default_data_dir_arg, options
from ..core.problems import SEED_MODELS, make_problem, parse_int_list, parse_model, parse_tokens, split_models
from ..core.routing import parse_routing
from ..configs import configs_dir_for
from ..core.devices import device_slug
from ..tuning import Tuner

TUNE_TOKENS = "1,2,4,8,16,32,64,128,256,512,1024,2048,4096,8192"


def configure(p):
    p.add_argument("--backend", default="aiter-triton", help="a backend with tunable configurations")
    p.add_argument("--models", default=None,
                   help="presets or custom:... (default: the four seed models on GPU, "
                        "qwen3-30b-a3b on CPU)")
    options.shape(p)
    p.add_argument("--tokens", default=TUNE_TOKENS,
                   help="token counts to tune (config files are keyed by them; a caller uses "
                        "the nearest)")
    options.dtype(p)
    p.add_argument("--routing", default="uniform")
    options.device(p)
    p.add_argument("--run-id", default=None, help="folder under --data-dir (default: "
                   "tune-<backend>-<device>; the same command resumes it)")
    options.data_dir(p)
    p.add_argument("--configs-dir", default=None,
                   help="where the winners go (default: data/configs/<device-slug>)")
    p.add_argument("--budget", type=float, default=None, metavar="S",
                   help="search for S seconds in all: each point (shape x token count) gets "
                        "an equal share of what is left and each GEMM stage an equal share "
                        "of its point's, so every token count and gemm2 are searched; the "
                        "manifest says `budget spent` when a share cut a search (rerun to "
                        "resume: timed candidates are kept)")
    p.add_argument("--rep-ms", type=float, default=20.0, help="timed repetitions per candidate")
    p.add_argument("--warmup-ms", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")


def run(args) -> int:
    args.data_dir = args.data_dir or default_data_dir_arg()
    options.timing(args.warmup_ms, args.rep_ms)
    if args.run_id is not None:
        options.run_id(args.run_id)
    device = resolve_device(args.device)
    models = split_models(args.models) if args.models else (
        list(SEED_MODELS) if device == "cuda" else ["qwen3-30b-a3b"])
    for m in models:
        parse_model(m)
    parse_routing(args.routing)
    tokens = parse_tokens(args.tokens)
    if args.budget is not None and not args.budget > 0:
        raise UsageError("--budget must be a positive number of seconds")
    shards = [[make_problem(m, t, args.dtype, tp, ep) for t in tokens]
              for m in models for tp in parse_int_list(args.tp)
              for ep in parse_int_list(options.default_eps(args.ep, device == "cuda"))]
    dev = device_name(device)
    run_dir = os.path.join(args.data_dir, args.run_id or f"tune-{args.backend}-{device_slug(dev)}")
    tuner = Tuner(args.backend, device, run_dir, args.configs_dir or configs_dir_for(dev),
                  seed=args.seed, routing=args.routing, budget_s=args.budget,
                  warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, progress=not args.no_progress,
                  command="moe-lab " + " ".join(getattr(args, "_argv", sys.argv[1:])))
    ok, why = tuner.backend.available()
    if not ok:  # before: every candidate a `failed` row, "done: 0 points tuned", exit 0
        raise UsageError(f"{tuner.backend_name} cannot run here: {why}")
    tuner.check()  # another writer's folder, or one tuned otherwise: one line, untouched
    print(f"tune {args.backend}: {sum(len(s) for s in shards)} points -> {run_dir}, "
          f"configs to {tuner.configs_dir / tuner.backend_name}", flush=True)
    win = tuner.run(shards)
    for r in win.itertuples():
        print(f"{r.model:22} {r.sharding:9} T={r.tokens:<5} {r.default_us:9.1f} -> "
              f"{r.median_us:9.1f} us ({r.speedup:.2f}x)")
    print(f"done: {len(win)} points tuned; candidates in {run_dir}/candidates.parquet")
    return 0
