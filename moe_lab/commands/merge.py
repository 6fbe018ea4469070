"""`moe-lab merge OUT RUN RUN...`: combine run folders measured apart (the parts of a
`--shard` sweep, the GPUs of one host, other machines) into one run; every row keeps its
device, commit and time, and a point measured twice is an error, never silently one.
One run alone is refused (there is nothing to combine: it was a copy of the run under a
merge's manifest, "merged 1 runs"); `sweep --gpus` merges what its parts measured through
moe_lab.storage.merging, one part included.
(Heavy imports live in run(): the CLI's --help must not load torch or pandas.)"""
from __future__ import annotations

from ..core.errors import UsageError


def configure(p):
    p.add_argument("out", help="the new run folder (new or empty; its name is the run id)")
    p.add_argument("runs", nargs="+", help="two or more run folders or run ids to combine")


def run(args) -> int:
    if len(args.runs) < 2:  # before anything is read or written
        raise UsageError(f"merge combines two or more runs (the parts of one sweep); "
                         f"{args.runs[0]} alone is a run already: use it as it is, or give "
                         "the other parts too")
    from ..storage.merging import merge_runs
    try:
        argv = getattr(args, "_argv", None)
        store = merge_runs(args.out, args.runs,
                           "moe-lab " + " ".join(argv) if argv is not None else None)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(f"merged {len(args.runs)} runs into {store.dir}: {len(store.load_results())} rows")
    return 0
