"""`moe-lab profile`: one point under the profiler -> per-kernel table + Perfetto trace,
then the point's ledger: every phase against its own floor (moe_lab.cost.ledger).
(Heavy imports live in run(): the CLI's --help must not load torch or pandas.)"""
from __future__ import annotations

import math

from . import options
from ..core.errors import UsageError

CU_DEFAULT = 304  # --explain without --cu-num: MI300X/MI325X, aiter's cu_num key


def configure(p):
    p.add_argument("--model", default=None, help="preset or custom:H=..,I=..,E=..,k=.. (required)")
    p.add_argument("--tokens", type=int, default=None, help="(required)")
    p.add_argument("--backend", default="torch", help="one backend (moe-lab backends lists them)")
    options.shape(p, many=False)
    options.dtype(p)
    p.add_argument("--routing", default="uniform", help="uniform | balanced | zipf:S | hot:P")
    options.device(p)
    p.add_argument("--iters", type=int, default=options.constants.PROFILE_ITERS,
                   help="profiled calls (table is per call)")
    p.add_argument("--trace", default=None,
                   help="Chrome trace path (.json.gz; default out/traces/<point>.json.gz)")
    p.add_argument("--config", default="default",
                   help="tunable backends: default (the backend's own choice), tuned (this "
                        "device's files from `moe-lab tune`; none for the shape: exit 2) or "
                        "a config file")
    p.add_argument("--seed", type=int, default=0,
                   help="inputs are a pure function of the point and this seed")
    p.add_argument("--explain", action="store_true",
                   help="no GPU: print which tuned_fmoe.csv row (or default) aiter's CK/asm "
                        "fused_moe would use for this point on --cu-num's GPU, and whether "
                        "its CK kernels accept the shape")
    p.add_argument("--cu-num", type=int, default=None,
                   help="with --explain: the GPU's CU count (304 MI300X/MI325X, 256 MI355X, "
                        f"80 MI308X), aiter's cu_num key (default: {CU_DEFAULT})")
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
    from ..core.problems import make_problem
    prob = make_problem(args.model, args.tokens, args.dtype, args.tp, args.ep,
                        args.ep_rank if args.ep > 1 else 0)
    try:
        print(explain_dispatch(prob, CU_DEFAULT if args.cu_num is None else args.cu_num, args.gfx))
    except (ImportError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    return 0


def _stray(args) -> None:
    """Options that shape another mode than the one asked for: UsageError (was: ignored,
    exit 0, e.g. `--cu-num 80` profiled the point here, `--run R` without --split too)."""
    given = [f for f, v in (("--cu-num", args.cu_num), ("--gfx", args.gfx)) if v is not None]
    if given and not args.explain:
        they = len(given) > 1
        raise UsageError(f"{', '.join(given)} without --explain: "
                         f"{'they shape' if they else 'it shapes'} --explain only; add "
                         f"--explain (or leave {'them' if they else 'it'} out)")
    mine = [f for f, v in (("--split", args.split), ("--trace", args.trace is not None),
                           ("--config", args.config != "default")) if v]
    if args.explain and mine:  # was: ignored, the explanation printed as if not given
        raise UsageError(f"--explain with {', '.join(mine)}: --explain profiles nothing (it "
                         "reads aiter's own dispatch and tuned table); leave "
                         f"{'them' if len(mine) > 1 else 'it'} out, or drop --explain")
    if args.run is not None and not args.split:
        raise UsageError("--run without --split: it names the run whose traces --split splits; "
                         "add --split (or leave it out)")
    if args.run is not None and args.model is not None:
        raise UsageError("--run with --model: --split splits one point (--model, --tokens) or "
                         "every trace of a run (--run); give one")


def run(args) -> int:
    _stray(args)
    if args.split and args.run and args.model is None:
        from .eager_split import print_run_split
        return print_run_split(args.run)
    if args.model is None or args.tokens is None:
        raise UsageError("profile needs --model and --tokens (or --split --run RUN)")
    if args.trace is not None:  # a folder, or under a file: was written beside it (DIR.json.gz)
        from ..core.validate import output  # or refused after the profiling
        output(args.trace, "--trace")
    if args.explain:
        return explain(args)
    if args.split:
        from .eager_split import print_point_split
        return print_point_split(args)
    from ..measuring.profiling import profile_point
    from ..core.problems import make_problem
    from ..measuring.correctness import resolve_device
    device = resolve_device(args.device)
    prob = make_problem(args.model, args.tokens, args.dtype, args.tp, args.ep,
                        args.ep_rank if args.ep > 1 else 0)
    config_table(args.backend, args.config, prob, device)  # a bad --config: one line, exit 2
    df, trace = profile_point(args.model, args.tokens, args.backend, args.tp, args.ep,
                              args.ep_rank, args.dtype, args.routing,
                              device, args.iters, args.trace, args.seed, config=args.config)
    chk = df.attrs["check"]
    print(f"# {df.attrs['point']} backend={args.backend} config={args.config} "
          f"routing={args.routing}: {chk['status']} max_rel_err={chk['max_rel_err']:.2e}")
    with_share = df.assign(pct=100 * df["total_us"] / max(df["total_us"].sum(), 1e-9))
    print(with_share.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    what = ("us device time in {} kernel launches" if device.startswith("cuda") else
            "us CPU time in {} top-level aten ops")
    print(f"# per call: {df['total_us'].sum():.1f} " + what.format(int(df["calls"].sum()))
          + "; by phase: "
          + ", ".join(f"{k} {v:.1f}" for k, v in df.groupby('phase')['total_us'].sum().items()))
    print_ledger(prob, args, device, df)
    print(f"# trace: {trace} (open in https://ui.perfetto.dev)")
    return 0


def config_table(backend: str, config: str, prob, device: str):
    """The launch configuration `--config` names (None: the backend's own choice);
    UsageError (one line, exit 2) for tuned without a tuned file for this shape, a file
    that is missing or malformed, or a configuration given to a backend that takes none."""
    from .. import backends
    from ..storage.configs import config_for, validate_config_arg
    from ..core.environment import device_name
    if config == "default":
        return None
    validate_config_arg(config)
    if "," in config:
        raise UsageError(f"--config: one configuration for profile, not {config!r}")
    if not backends.backend_class(backend).tunable:
        raise UsageError(f"--config {config}: backend {backend} takes no launch configuration "
                         "(not tunable); use --config default")
    try:
        table, why = config_for(backend, config, prob, device_name(device))
    except ValueError as exc:
        raise UsageError(f"--config: {exc}") from None
    if why:
        raise UsageError(why)
    return table


def print_ledger(prob, args, device: str, df) -> None:
    """The point's phases against their floors, recoverable us largest first."""
    import pandas as pd

    from ..measuring.correctness import make_inputs, point_seed
    from ..core.devices import ceilings_for
    from ..core.environment import device_name
    from ..cost.ledger import gathers_rows, phase_rows
    ids = make_inputs(prob, "cpu", point_seed(args.seed, args.tokens, args.routing),
                      args.routing).topk_ids  # the draw profile used: a pure function
    try:
        ceil = ceilings_for(device_name(device))
    except UsageError:
        ceil = None
    led = pd.DataFrame(phase_rows("", prob, ids, df, ceil, gathered=gathers_rows(args.backend)))
    led["over_us"] = (led["measured_us"] - led["floor_us"]).clip(lower=0)
    led["x_floor"] = led["measured_us"] / led["floor_us"].where(led["floor_us"] > 0)
    led = led.sort_values(["over_us", "measured_us"], ascending=False, na_position="last")
    print("# ledger: each phase against its floor (moe_lab.cost.ledger), recoverable first")
    print(led[["phase", "measured_us", "floor_us", "x_floor", "over_us", "bound"]].rename(
        columns={"measured_us": "measured", "floor_us": "floor", "x_floor": "x floor",
                 "over_us": "recoverable"}).to_string(
        index=False, float_format=lambda v: f"{v:.2f}", na_rep="-"))
    floor_sum = led["floor_us"].sum(min_count=1)
    print(f"# floors on {ceil.device} ({ceil.source}: {ceil.bandwidth_text}); sum of the "
          f"phase floors {floor_sum:.1f} us, recoverable {led['over_us'].sum():.1f} us"
          if ceil is not None and not math.isnan(floor_sum) else
          f"# no ceilings for {device_name(device)}: floors not known, measured only")
