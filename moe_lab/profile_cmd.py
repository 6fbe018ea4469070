"""`moe-lab profile`: one point under the profiler -> per-kernel table + Perfetto trace."""
from __future__ import annotations

import os

import torch

from . import backends as B
from .check import check_backend, default_device, make_inputs, make_weights, reference
from .errors import UsageError
from .problems import make_problem


def configure(p):
    p.add_argument("--model", required=True, help="preset or custom:H=..,I=..,E=..,k=..")
    p.add_argument("--tokens", type=int, required=True)
    p.add_argument("--backend", default="torch")
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--ep", type=int, default=1)
    p.add_argument("--ep-rank", type=int, default=0)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--routing", default="uniform")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None)
    p.add_argument("--iters", type=int, default=5, help="profiled calls (table is per call)")
    p.add_argument("--trace", default=None,
                   help="Chrome trace path (.json.gz; default out/traces/<point>.json.gz)")
    p.add_argument("--seed", type=int, default=0)


def run(args) -> int:
    from .profiling import export_trace, profile_kernels
    device = args.device or default_device()
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda but no GPU is visible to torch")
    B.parse_names(args.backend)
    if args.iters < 1:
        raise UsageError("--iters must be >= 1")
    prob = make_problem(args.model, args.tokens, args.dtype, args.tp, args.ep, args.ep_rank)
    backend = B.get(args.backend)
    for ok, why in (backend.available(), backend.supports(prob, device)):
        if not ok:
            raise UsageError(f"{args.backend} cannot run this point here: {why}")
    weights = make_weights(prob, device, args.seed)
    inp = make_inputs(prob, device, args.seed + 1, args.routing)
    fn = backend.prepare(prob, weights)
    chk = check_backend(backend, prob, weights, inp, reference(prob, weights, inp), device, fn)
    print(f"# {prob.describe()} backend={args.backend} routing={args.routing}: "
          f"{chk['status']} max_rel_err={chk['max_rel_err']:.2e} {chk['error']}")
    if chk["status"] != "ok":
        return 1
    df = profile_kernels(fn, inp.args(), iters=args.iters, device=device)
    trace = args.trace or os.path.join(
        "out", "traces", f"{prob.model.name}_{prob.sharding}_T{prob.tokens}_{args.backend}.json.gz")
    os.makedirs(os.path.dirname(os.path.abspath(trace)), exist_ok=True)
    export_trace(fn, inp.args(), trace, device=device)
    with_share = df.assign(pct=100 * df["total_us"] / max(df["total_us"].sum(), 1e-9))
    print(with_share.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    what = ("us device time in {} kernel launches" if device.startswith("cuda") else
            "us CPU time in {} top-level aten ops")
    print(f"# per call: {df['total_us'].sum():.1f} " + what.format(int(df["calls"].sum()))
          + "; by phase: "
          + ", ".join(f"{k} {v:.1f}" for k, v in df.groupby('phase')['total_us'].sum().items()))
    print(f"# trace: {trace} (open in https://ui.perfetto.dev)")
    return 0
