"""`moe-lab compare A [B]`: per matching point, the ratio of medians B/A with a bootstrap
95% interval from the kept per-call samples and a verdict (faster, slower, no detectable
change) that needs the change to clear both that interval and the device's calibrated
between-process noise band in the mode (data/noise/<device>.json; none: the verdict says
so); points on one side only, or whose inputs differ, are listed, never silently compared.
`--by COLUMN --values X,Y` splits one run. `--calibrate A A'`: two runs of one commit (the
same sweep, two processes) add an A/A' pair to the device's noise calibration.
(Heavy imports live in run(): the CLI's --help must not load torch or pandas.)"""
from __future__ import annotations

import os

from ..core.constants import BOOTSTRAP_RESAMPLES
from ..core.errors import UsageError
from . import options


def configure(p):
    p.add_argument("run_a", help="run folder or run id (the baseline, A)")
    p.add_argument("run_b", nargs="?", default=None, help="run folder or id (B); default: A "
                   "itself, split with --by")
    p.add_argument("--by", default=None, help="split by this column, e.g. config or backend "
                   "(not model, tp, ep, mode or tokens: each point is drawn at them)")
    p.add_argument("--values", default=None, help="the two values of --by: A,B")
    p.add_argument("--mode", default=None, help="only this mode, e.g. graph")
    p.add_argument("--out", default=None, help="folder for the figure and the CSV (default: "
                   "reports)")
    p.add_argument("--resamples", type=int, default=BOOTSTRAP_RESAMPLES, help="bootstrap resamples")
    p.add_argument("--calibrate", action="store_true",
                   help="A and B are an A/A' pair (two runs of one commit, the same sweep, two "
                        "processes): add their between-process noise per mode to the device's "
                        "calibration file instead of comparing them")
    p.add_argument("--calibration", default=None,
                   help="the noise calibration file (or its folder): the one to judge against, "
                        "or with --calibrate the one to write or append to; default: "
                        "data/noise/<device-slug>.json")


def _calibrate(args) -> int:
    from ..analysis.compare import calibrate
    from ..storage.store import open_run
    if args.run_b is None or args.by or args.values or args.mode or args.out is not None:
        # --out was ignored without a word (the pair goes to --calibration's file)
        raise UsageError("--calibrate takes two runs of one commit, A A', and no --by, "
                         "--values, --mode or --out (it writes --calibration's file)")
    a, b = open_run(args.run_a), open_run(args.run_b)  # an A/A' pair: noise.check_pair's rule
    argv = getattr(args, "_argv", None)
    cal = calibrate(a, b, args.calibration,
                    " ".join(["moe-lab"] + list(argv)) if argv is not None else None)
    pair = cal.pairs[-1]
    for mode, d in cal.modes().items():
        mine = pair["modes"].get(mode)
        this = (f"this pair q95 {mine['noise']:.4f} over {mine['points']} points"
                if mine else "not in this pair")
        print(f"{cal.device} {mode}: noise {d['noise']:.4f} (ln), {cal.describe(mode)}; {this}")
    print(f"# {len(cal.pairs)} A/A' pair{'s' if len(cal.pairs) != 1 else ''} -> {cal.path}")
    return 0


def run(args) -> int:
    from ..analysis.compare import bands_line, check_args, compare, summary
    from ..storage.store import open_run
    if args.calibrate:
        return _calibrate(args)
    args.out = "reports" if args.out is None else args.out
    from ..core.validate import output
    output(args.out, "--out", folder=True)  # was '<file>: File exists'; a run's folder: refused
    # the arguments first, before any run is read: a refusal starts none of pyarrow's
    # threads (one read, then an exit, once aborted: "terminate called without an active
    # exception", exit 134)
    values = options.by_values(args.values)  # an empty value: one line saying so
    if values and not args.by:  # before: ignored, and B/A compared everything
        raise UsageError(f"--values {args.values}: give the column they are values of, --by COLUMN")
    if args.run_b is None and args.by is None:
        raise UsageError("give a second run, or --by COLUMN --values A,B to split one run")
    if args.resamples < 1:  # scipy's bootstrap raised ValueError (a traceback)
        raise UsageError(f"--resamples {args.resamples}: give a positive count "
                         f"(default {BOOTSTRAP_RESAMPLES})")
    a = open_run(args.run_a)
    b = open_run(args.run_b) if args.run_b else a
    if args.run_b and args.by is None and a.path.resolve() == b.path.resolve():
        # was: exit 0, every ratio 1.00 (--values torch,torch is refused for the same reason)
        raise UsageError(f"{args.run_a} and {args.run_b} are one run: comparing it with itself "
                         "says nothing (give another run, or --by COLUMN --values A,B)")
    check_args(a, b, args.by, values, args.mode)
    table = compare(a, b, args.by, values, n_resamples=args.resamples,
                    calibration=args.calibration)
    if args.mode:
        table = table[table["mode"] == args.mode]
    name = f"compare-{a.run_id}-{b.run_id if args.run_b else args.by}"
    import io

    from ..plots.compare import fig_ratio
    from ..report import write_whole
    fig = fig_ratio(table, a, b, args.by, values)
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)  # made in memory: the files are whole or none
    write_whole([(os.path.join(args.out, name + ".csv"), table.to_csv(index=False).encode()),
                 (os.path.join(args.out, name + ".png"), png.getvalue())])
    cols = [c for c in ("model", "tp", "ep", "backend", "mode", "tokens", "a_us", "b_us",
                        "ratio", "low", "high", "band_low", "band_high", "verdict")
            if c in table]  # --by backend: no backend column
    print(table[cols].to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print(f"# {bands_line(table)}")
    print(f"# B/A: {summary(table)}; {os.path.join(args.out, name)}.png, .csv")
    return 0
