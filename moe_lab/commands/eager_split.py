"""`moe-lab profile --split`: where an eager call's time goes, printed (one point measured
here, or every trace of a run against its eager rows)."""
from __future__ import annotations


from ..analysis.eager_split import run_split
from ..measuring.eager_split import split_point
from ..storage.vocabulary import PART_LABELS, PARTS
from ..core.errors import UsageError


def _parts(r) -> str:
    return ", ".join(f"{PART_LABELS[p]} {r[p]:.0f} us ({r[p] / r['wall_us']:.0%})" for p in PARTS)


def print_point_split(args) -> int:
    from ..measuring.correctness import resolve_device
    device = resolve_device(args.device)
    r = split_point(args.model, args.tokens, args.backend, args.tp, args.ep, args.ep_rank,
                    args.dtype, args.routing, device, args.iters, args.seed, args.trace)
    print(f"# {r['point']} backend={r['backend']} on {device}: one eager call, mean of "
          f"{r['calls']} profiled calls")
    print(f"window {r['wall_us']:.0f} us = {_parts(r)}")
    print(f"host time in launch calls {r['launch_api_us']:.0f} us; {r['n_kernels']:.0f} "
          f"kernels, {r['n_ops']:.0f} host ops per call"
          + ("" if r["device_timeline"] else "; no device timeline (CPU): the ops are the work"))
    print(f"timed eager median {r['eager_us']:.0f} us (under the profiler "
          f"{r['profiled_eager_us']:.0f} us): "
          + ("adds up within 10%" if r["adds_up"] else r["reason"]))
    print(f"# trace: {r['trace']} (open in https://ui.perfetto.dev)")
    return 0


def print_run_split(run) -> int:
    t = run_split(run)
    if t.empty:
        raise UsageError(f"run {run} has no sweep traces (traces/*.json.gz): sweep with "
                         "--traces N, or use --model/--tokens to profile a point here")
    for _, r in t.iterrows():
        sh = f"TP{r['tp']}" + (f"+EP{r['ep']}" if r["ep"] > 1 else "")
        print(f"{r['model']} {sh} T={r['tokens']} {r['backend']}: window {r['wall_us']:.0f} us "
              f"= {_parts(r)}; eager median {r['eager_us']:.0f} us: "
              + ("adds up within 10%" if r["adds_up"] else r["reason"]))
    print(f"# {int(t['adds_up'].sum())} of {len(t)} points add up to the timed eager median "
          "within 10%; the others say why")
    return 0
