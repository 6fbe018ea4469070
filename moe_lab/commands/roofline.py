"""`moe-lab roofline`: predicted floors for one model and sharding over token counts.

No GPU needed: expected experts hit under uniform routing, FLOPs, bytes, intensity and
the roofline floor on a vendor spec (or measured ceilings, given a device name with a
file in data/ceilings/). Without --device-spec the ceilings follow the data: the GPU
present (its measured ceilings, else its vendor spec); with none, one table per device
whose measured ceilings are committed in data/ceilings/ (default_ceilings).

(Heavy imports live in run(): the CLI's --help must not load torch or pandas.)"""
from __future__ import annotations

from ..core.constants import FP8_SCHEMES
from ..core import devices
from ..core.devices import DEVICE_SPECS, Ceilings, ceilings_for
from ..core.errors import UsageError
from . import options

COLUMNS = ("tokens", "experts_hit", "gflop", "mbytes", "flop_per_byte", "floor_us", "bound")


def resolve_ceilings(text: str) -> Ceilings:
    """A DEVICE_SPECS key (vendor peaks) or a torch device name (measured when a file
    exists in data/ceilings, else the vendor spec it maps to)."""
    if text in DEVICE_SPECS:
        s = DEVICE_SPECS[text]
        return Ceilings(s.name, s.bf16_tflops, s.fp8_tflops, s.hbm_tb_s, "vendor", s.source)
    try:
        return ceilings_for(text)
    except UsageError:
        raise UsageError(f"unknown device spec {text!r}; valid: {', '.join(DEVICE_SPECS)} "
                         "(or a torch device name such as 'NVIDIA H200')") from None


def default_ceilings() -> list[Ceilings]:
    """What --device-spec defaults to: the ceilings of the GPU present (measured ones from
    data/ceilings/<slug>.json when committed, else its vendor spec); with no GPU, those of
    each device with measured ceilings committed there (core.devices.measured_device_names),
    in name order. UsageError (one line naming --device-spec) when there is neither."""
    import torch
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        try:
            return [ceilings_for(name)]
        except UsageError:
            raise UsageError(f"the GPU here, {name!r}, has no measured ceilings and no vendor "
                             f"spec: give --device-spec (one of {', '.join(DEVICE_SPECS)})"
                             ) from None
    names = devices.measured_device_names()
    if not names:
        raise UsageError(f"no GPU here and no measured ceilings in {devices.DEFAULT_CEILINGS_DIR}: "
                         f"give --device-spec (one of {', '.join(DEVICE_SPECS)}, or a torch "
                         "device name)")
    return [ceilings_for(n) for n in names]


def floor_rows(model: str, tokens: list[int], ceil: Ceilings, dtype: str = "bf16",
               tp: int = 1, ep: int = 1, backend: str | None = None) -> list[dict]:
    """One dict per token count with the COLUMNS (expected routing, ep rank 0)."""
    from ..core.problems import make_problem
    from ..cost.roofline import bound, cost, floor_us, intensity
    rows = []
    for t in tokens:
        p = make_problem(model, t, dtype, tp, ep)
        c = cost(p, backend=backend)
        rows.append(dict(tokens=t, experts_hit=c.experts_hit, gflop=c.flops / 1e9,
                         mbytes=c.bytes / 1e6, flop_per_byte=intensity(c),
                         floor_us=floor_us(c, ceil, dtype), bound=bound(c, ceil, dtype)))
    return rows


def configure(parser) -> None:
    parser.add_argument("--model", default=None, help="preset name or custom:H=..,I=..,E=..,k=.. "
                        "(required unless --annotate)")
    parser.add_argument("--annotate", metavar="RUN_DIR", default=None,
                        help="instead: recompute flops, bytes, roof_us, pct_of_roof of a run's "
                             "results with the ceilings of the run's device (measured ones from "
                             "data/ceilings when committed) and record that in its manifest")
    parser.add_argument("--tokens", default="1-8192", help="1,64,1024 or 1-8192 (powers of two)")
    parser.add_argument("--tp", type=int, default=options.TP_DEFAULT, help="tensor-parallel size")
    parser.add_argument("--ep", type=int, default=1, help="expert parallel size (== tp when > 1)")
    parser.add_argument("--dtype", default="bf16", help="bf16, fp16 or an fp8 scheme: fp8-tensor, "
                        "fp8-channel, fp8-block128 (fp32 has no quoted peak)")
    parser.add_argument("--device-spec", default=None,
                        help=f"one of {', '.join(DEVICE_SPECS)}, or a torch device name; "
                             "default: the GPU present (its measured ceilings from "
                             "data/ceilings/<device>.json, else its vendor spec); with no GPU, "
                             "one table per device with measured ceilings committed in "
                             "data/ceilings/")
    parser.add_argument("--backend", default=None,
                        help="add this backend's declared intermediates (moe-lab backends lists "
                             "them); default: the ideal fused floor")


def annotate_run(run_dir: str) -> dict:
    """Roofline columns of a run recomputed with the current ceilings of its device.
    Only derived columns change; measurements are untouched. Returns the manifest note."""
    import os
    import time

    from ..cost.roofline import add_roofline_columns
    from ..storage.store import RunStore, atomic_write_parquet, open_run
    if not os.path.isfile(os.path.join(run_dir, "results.parquet")):
        raise UsageError(f"{run_dir!r} has no results.parquet")
    run = open_run(run_dir)  # CorruptFile (exit 2, one line) before anything is written
    manifest, results = run.manifest, run.results
    device = (manifest.get("environment") or {}).get("device_name")
    if not device:
        raise UsageError(f"{run_dir}: manifest names no device")
    out = add_roofline_columns(results, device)
    out["pct_of_roof"] = 100.0 * out["roof_us"] / out["median_us"]
    atomic_write_parquet(RunStore(run_dir).results_path, out)
    ceil = ceilings_for(device)
    note = dict(annotated=time.strftime("%Y-%m-%dT%H:%M:%S%z"), device=device,
                ceiling_source=ceil.source, tflops_bf16=ceil.tflops_bf16, tb_s=ceil.roof_tb_s,
                bandwidth=ceil.bandwidth_text,
                roof="ideal fused cost (no intermediates), exact experts_hit and pairs where recorded; "
                     "backend_roof_us adds each backend's intermediates")
    RunStore(run_dir).update_manifest(roofline=note)
    return note


def run(args) -> int:
    from .. import backends
    from ..core.problems import make_problem, parse_model, parse_tokens
    from ..cost.roofline import roof_basis
    if args.annotate:
        argv = getattr(args, "_argv", None) or []
        given = [f for f in ("--model", "--tokens", "--tp", "--ep", "--dtype", "--device-spec",
                             "--backend") if any(a == f or a.startswith(f + "=") for a in argv)]
        if given or args.model:  # before: ignored, and the run rewritten anyway
            raise UsageError(f"--annotate recomputes a run's own points on its own device: "
                             f"{', '.join(given or ['--model'])} would be ignored; leave "
                             f"{'them' if len(given) > 1 else 'it'} out")
        note = annotate_run(args.annotate)
        print(f"{args.annotate}: roofline columns recomputed with {note['ceiling_source']} "
              f"ceilings of {note['device']} ({note['tflops_bf16']:g} TFLOP/s bf16, "
              f"{note['bandwidth']})")
        return 0
    if not args.model:
        raise UsageError("--model is required (or --annotate RUN_DIR)")
    spec = parse_model(args.model)
    tokens = parse_tokens(args.tokens)
    ceils = [resolve_ceilings(args.device_spec)] if args.device_spec else default_ceilings()
    if args.backend is not None and backends.backend_class(args.backend).intermediates is None:
        raise UsageError(f"backend {args.backend!r} declares no intermediates for the cost model")
    if args.dtype not in ("bf16", "fp16") + FP8_SCHEMES:
        raise UsageError(f"--dtype must be bf16, fp16 or {', '.join(FP8_SCHEMES)} (the matrix "
                         f"peaks quoted), not {args.dtype!r}")
    p0 = make_problem(spec, tokens[0], args.dtype, args.tp, args.ep)
    print(f"# {spec.name} {p0.sharding}: H={p0.hidden} I={p0.inter} "
          f"E={p0.local_experts}/{p0.experts} k={p0.topk} {args.dtype}; "
          f"{args.backend or 'ideal fused (no intermediates)'}; uniform routing, expected")
    for i, ceil in enumerate(ceils):  # one table per device, headed by it and its source
        rows = floor_rows(spec, tokens, ceil, args.dtype, args.tp, args.ep, args.backend)
        print(("\n" if i else "") + f"# {ceil.device} [{ceil.source}]: "
              f"{roof_basis(ceil, args.dtype)}")
        print(f"{'tokens':>7} {'experts_hit':>11} {'GFLOP':>10} {'MB':>10} "
              f"{'FLOP/B':>8} {'floor_us':>9} {'bound':>7}")
        for r in rows:
            print(f"{r['tokens']:>7} {r['experts_hit']:>11.2f} {r['gflop']:>10.3f} "
                  f"{r['mbytes']:>10.2f} {r['flop_per_byte']:>8.1f} {r['floor_us']:>9.2f} "
                  f"{r['bound']:>7}")
    return 0
