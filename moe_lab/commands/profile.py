"""`moe-lab profile`: one point under the profiler -> per-kernel table + Perfetto trace."""
from __future__ import annotations


from ..api import profile
from ..correctness import resolve_device
from ..errors import UsageError


def configure(p):
    p.add_argument("--model", default=None, help="preset or custom:H=..,I=..,E=..,k=.. (required)")
    p.add_argument("--tokens", type=int, default=None, help="(required)")
    p.add_argument("--backend", default="torch", help="one backend (moe-lab backends lists them)")
    p.add_argument("--tp", type=int, default=8, help="tensor-parallel size")
    p.add_argument("--ep", type=int, default=1,
                   help="expert-parallel size, 1 = none (== tp when > 1)")
    p.add_argument("--ep-rank", type=int, default=0, help="EP rank whose experts are held")
    p.add_argument("--dtype", default="bf16",
                   help="bf16, fp16, fp32, fp8-tensor, fp8-channel or fp8-block128")
    p.add_argument("--routing", default="uniform", help="uniform | balanced | zipf:S | hot:P")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="default: cuda when a GPU is visible, else cpu")
    p.add_argument("--iters", type=int, default=5, help="profiled calls (table is per call)")
    p.add_argument("--trace", default=None,
                   help="Chrome trace path (.json.gz; default out/traces/<point>.json.gz)")
    p.add_argument("--seed", type=int, default=0,
                   help="inputs are a pure function of the point and this seed")
    p.add_argument("--explain", action="store_true",
                   help="no GPU: print which tuned_fmoe.csv row (or default) aiter's CK/asm "
                        "fused_moe would use for this point on --cu-num's GPU, and whether "
                        "its CK kernels accept the shape")
    p.add_argument("--cu-num", type=int, default=304,
                   help="with --explain: the GPU's CU count (304 MI300X/MI325X, 256 MI355X, "
                        "80 MI308X), aiter's cu_num key")
    p.add_argument("--split", action="store_true",
                   help="where eager time goes: split one call into Python/dispatch on the "
                        "host, launch gaps and kernel time, checked against a timed eager call")
    p.add_argument("--run", default=None,
                   help="with --split and no --model: split every trace of this run folder "
                        "against its eager rows")
    p.add_argument("--gfx", default=None,
                   help="with --explain: the GPU arch (gfx942, gfx950); default from --cu-num")


def explain(args) -> int:
    from ..backends._aiter_dispatch import explain as explain_dispatch
    from ..problems import make_problem
    prob = make_problem(args.model, args.tokens, args.dtype, args.tp, args.ep,
                        args.ep_rank if args.ep > 1 else 0)
    try:
        print(explain_dispatch(prob, args.cu_num, args.gfx))
    except (ImportError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    return 0


def run(args) -> int:
    if args.split and args.run and args.model is None:
        from .eager_split import print_run_split
        return print_run_split(args.run)
    if args.model is None or args.tokens is None:
        raise UsageError("profile needs --model and --tokens (or --split --run RUN)")
    if args.explain:
        return explain(args)
    if args.split:
        from .eager_split import print_point_split
        return print_point_split(args)
    device = resolve_device(args.device)
    df, trace = profile(args.model, args.tokens, args.backend, args.tp, args.ep, args.ep_rank,
                        args.dtype, args.routing, device, args.iters, args.trace, args.seed)
    chk = df.attrs["check"]
    print(f"# {df.attrs['point']} backend={args.backend} routing={args.routing}: "
          f"{chk['status']} max_rel_err={chk['max_rel_err']:.2e}")
    with_share = df.assign(pct=100 * df["total_us"] / max(df["total_us"].sum(), 1e-9))
    print(with_share.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    what = ("us device time in {} kernel launches" if device.startswith("cuda") else
            "us CPU time in {} top-level aten ops")
    print(f"# per call: {df['total_us'].sum():.1f} " + what.format(int(df["calls"].sum()))
          + "; by phase: "
          + ", ".join(f"{k} {v:.1f}" for k, v in df.groupby('phase')['total_us'].sum().items()))
    print(f"# trace: {trace} (open in https://ui.perfetto.dev)")
    return 0
