"""`moe-lab sweep`: models x sharding x tokens x routing x backends x modes into
data/runs/<run_id>/ (resumable: the same command continues where it stopped).
(Heavy imports live in run(): the CLI's --help must not load torch or pandas.)"""
from __future__ import annotations

import hashlib
import json
import math
import os
import sys

from ..core import constants
from ..core.errors import UsageError
from . import default_data_dir_arg, options
from ..distributed.launch import (add_arguments as add_distributed_arguments, refuse_without_nproc,
                                  under_launcher)


# the timing budget of a new run (a resume keeps its run's), core.constants'
WARMUP_MS, REP_MS = constants.SWEEP_WARMUP_MS, constants.SWEEP_REP_MS


def resume_timing(args, run_dir: str | None) -> None:
    """--warmup-ms and --rep-ms not given: the run folder's own when it has them (a
    resume measures as its run did), else the defaults. Given and other than the run's:
    the sweep refuses (moe_lab.storage.resume)."""
    from ..core.errors import CorruptFile
    from ..storage.store import MANIFEST, read_json
    config = {}
    if run_dir and (args.warmup_ms is None or args.rep_ms is None):
        try:
            config = read_json(os.path.join(run_dir, MANIFEST)).get("config") or {}
        except CorruptFile:  # the sweep refuses it (or sets it aside) in its own words
            config = {}
        config = config if isinstance(config, dict) else {}
    for key, default in (("warmup_ms", WARMUP_MS), ("rep_ms", REP_MS)):
        if getattr(args, key) is None:
            v = config.get(key)
            setattr(args, key, float(v) if isinstance(v, (int, float)) and not isinstance(v, bool)
                    else default)


def parse_budget(text: str) -> dict[str, float]:
    """`150` or `150,torch=30` -> {"*": 150.0, "torch": 30.0} (seconds, all positive)."""
    from .. import backends as registry
    out: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, value = part.rpartition("=")
        try:
            sec = float(value)
        except ValueError:
            sec = math.nan
        if not sec > 0 or math.isinf(sec):
            raise UsageError(f"--compile-budget: {part!r} is not a positive number of seconds")
        if name:
            registry.parse_names(name)  # an unknown backend is a usage error
        out[name or "*"] = sec
    return out


def default_run_id(config: dict, device_name: str) -> str:
    """Same command on the same kind of device -> same run id, so a rerun resumes."""
    slug = "".join(c if c.isalnum() else "-" for c in device_name.lower()).strip("-")
    digest = hashlib.sha1(json.dumps(config, sort_keys=True).encode()).hexdigest()[:8]
    return f"{slug}-{digest}"


def configure(p):
    options.models(p)
    options.shape(p)
    p.add_argument("--tokens", default=None,
                   help="token counts, e.g. 1,64,1024 or 1-8192 (default: "
                        f"{constants.SWEEP_TOKENS['gpu']} on GPU, {constants.SWEEP_TOKENS['cpu']} "
                        "on CPU)")
    p.add_argument("--backends", default=None,
                   help="comma-separated (default: every backend available here)")
    p.add_argument("--modes", default=None,
                   help="eager,graph and/or compile:<variant>[:dynamic] (default: "
                        f"{constants.SWEEP_MODES['gpu']} on GPU, {constants.SWEEP_MODES['cpu']} "
                        "on CPU)")
    options.config(p)
    p.add_argument("--glue", default="fused", metavar="fused|aiter|naive[,...]",
                   help="the glue between kernels (SiLU*mul, activation quantisation, combine) "
                        "of backends that offer a choice, each its own point: one fused kernel "
                        "per step as deployments run it (default; the faster of aiter's and "
                        "ours where both exist), aiter (aiter's own glue kernels wherever it "
                        "ships one), naive (PyTorch elementwise glue); e.g. fused,aiter,naive")
    p.add_argument("--routing", default="uniform", help="comma-separated: uniform, balanced, "
                   "zipf:S, hot:P")
    options.dtype(p)
    options.device(p)
    options.data_dir(p)
    p.add_argument("--run-id", default=None,
                   help="folder name (default: derived from device and arguments, so the same "
                        "command resumes)")
    p.add_argument("--seed", type=int, default=0,
                   help="inputs of every point are a pure function of the point and this seed")
    p.add_argument("--no-profile", action="store_true", help="skip the per-kernel profiler pass")
    p.add_argument("--traces", type=int, default=0, help="export this many Chrome traces")
    p.add_argument("--warmup-ms", type=float, default=None,
                   help=f"warm-up, in ms (default: {WARMUP_MS}), a resume keeps its run's")
    p.add_argument("--rep-ms", type=float, default=None,
                   help=f"timed repetitions, in ms (default: {REP_MS}), a resume keeps its run's")
    p.add_argument("--point-timeout", type=float, default=constants.POINT_TIMEOUT_S,
                   help="seconds per point")
    options.compile_workers(p, "the launch configurations of the tunable backends (default, "
                            "tuned, a file) at the shard's token counts")
    p.add_argument("--compile-budget", default=None, metavar="S[,BACKEND=S...]",
                   help="compile modes: seconds of compile allowed per backend x variant "
                        "(x wrapped) over the token grid; a compile running past it is "
                        "stopped and it and the remaining token counts become timeout rows. "
                        "BACKEND=S sets one backend's budget, e.g. 150,torch=30 "
                        f"(default {constants.COMPILE_BUDGET_S:g})")
    p.add_argument("--shard", default=None, metavar="I/N",
                   help="measure part I of N of the points (0 <= I < N), split by point id: the "
                        "same on every machine, so N machines or GPUs can share a sweep; "
                        "`moe-lab merge` combines the parts' folders into one run")
    p.add_argument("--set-aside-corrupt", action="store_true",
                   help="resume a run whose files are unreadable: rename each such file to "
                        "<name>.corrupt-<time> (kept) and re-measure what it held (every point "
                        "when kernels, samples, phases or compile were set aside), so that "
                        "each file is made again")
    p.add_argument("--no-progress", action="store_true")
    add_distributed_arguments(p)


def _axes(args, gpu: bool) -> tuple[list, list, list, list, list]:
    """The sweep's models, tokens, routings, modes and backends from the flags (or this
    device's defaults), each checked: a UsageError names the first bad one."""
    from .. import backends as registry
    from ..core.problems import parse_model, parse_tokens, split_models
    from ..core.routing import parse_routing
    from ..storage.modes import parse_modes
    kind = "gpu" if gpu else "cpu"
    models = split_models(args.models) if args.models else options.default_models(gpu)
    for m in models:
        parse_model(m)
    tokens = parse_tokens(args.tokens or constants.SWEEP_TOKENS[kind])
    routings = list(dict.fromkeys(s.strip() for s in args.routing.split(",") if s.strip()))
    for r in routings:
        parse_routing(r)
    modes = parse_modes(args.modes or constants.SWEEP_MODES[kind])
    if args.dtype.startswith("fp8") and any(m.kind == "compile" for m in modes):
        raise UsageError(f"--dtype {args.dtype}: compile modes measure the bf16 layer only; "
                         "use --modes eager,graph")
    if args.backends:
        backends = registry.parse_names(args.backends)
    else:
        backends = registry.for_dtype([b.name for b in registry.all_backends()
                                       if b.available()[0]], args.dtype)
    return models, tokens, routings, modes, backends


def _shardings(args, models: list, gpu: bool) -> tuple[list[int], list[int]]:
    """The TP and EP degrees, every model x TP x EP checked before anything is measured."""
    from ..core.problems import make_problem, parse_int_list
    tps = parse_int_list(args.tp)
    eps = parse_int_list(options.default_eps(args.ep, gpu))
    if args.ep_rank and not any(ep > 1 for ep in eps):  # before: quietly measured rank 0
        raise UsageError(f"--ep-rank {args.ep_rank} with --ep {','.join(map(str, eps))}: an EP "
                         "rank exists only with --ep above 1")
    # validate every sharding before measuring anything
    for m in models:
        for tp in tps:
            for ep in eps:
                make_problem(m, 1, args.dtype, tp, ep, args.ep_rank if ep > 1 else 0)
    return tps, eps


def _measure(sweep, run_dir: str, device: str) -> int:
    """Run the sweep after checking its folder; print what it measured and the statuses."""
    from ..core.environment import device_name
    sweep.check()  # another writer's folder, or one measured otherwise: one line, untouched
    print(f"run {run_dir}: {sweep.total_points()} points ({device}: {device_name(device)})",
          flush=True)
    counts = sweep.run()
    res = sweep.store.load_results()
    summary = res["status"].value_counts().to_dict() if len(res) else {}
    print(f"done: {counts['measured']} measured now, {counts['skipped']} already there; "
          f"status counts {summary}; {run_dir}")
    return 0


def run(args) -> int:
    import torch

    from ..storage.configs import validate_config_arg
    from ..measuring.correctness import resolve_device
    from ..measuring.sweep import Grid, Sweep
    args.data_dir = args.data_dir or default_data_dir_arg()
    options.timing(args.warmup_ms, args.rep_ms, args.point_timeout, args.traces, args.nproc)
    if args.run_id is not None:
        options.run_id(args.run_id)
    device = resolve_device(args.device)
    gpu = device == "cuda"
    models, tokens, routings, modes, backends = _axes(args, gpu)
    budget = parse_budget(args.compile_budget) if args.compile_budget else None
    configs = validate_config_arg(args.config)
    from ..core.validate import parse_glues
    glues = parse_glues(args.glue)
    part = parse_part(args.shard) if args.shard else None
    if args.nproc and args.set_aside_corrupt:  # the ranks' writer does not set files aside
        raise UsageError("--set-aside-corrupt with --nproc: resume the folder's unreadable "
                         "files without --nproc first, or write another run id")
    if args.nproc and glues != ["fused"]:  # before: silently measured the default glue
        raise UsageError(f"--glue {args.glue} with --nproc: a distributed sweep measures the "
                         "default glue only; leave --glue out, or measure it without --nproc")
    if args.nproc or under_launcher():  # every point on N ranks (moe_lab.distributed)
        from ..distributed.launch import run_nproc
        resume_timing(args, None)
        return run_nproc(args, device, models, tokens, routings, modes, backends)
    refuse_without_nproc(args)
    tps, eps = _shardings(args, models, gpu)
    config = dict(models=models, tp=tps, ep=eps, ep_rank=args.ep_rank, tokens=tokens,
                  backends=backends, modes=[m.name for m in modes], routing=routings,
                  dtype=args.dtype, seed=args.seed,
                  **({} if configs == ["default"] else {"configs": configs}),
                  **({} if glues == ["fused"] else {"glues": glues}),
                  **({"shard": args.shard} if part else {}))
    dev_name = torch.cuda.get_device_name() if gpu else "cpu"
    run_id = args.run_id or default_run_id(config, dev_name)
    run_dir = os.path.join(args.data_dir, run_id)
    resume_timing(args, run_dir)
    if args.gpus:  # one part per local GPU, then merged
        from ..distributed.launch import run_spread
        return run_spread(args, run_dir)
    grid = Grid(models=models, tokens=tokens, backends=backends, modes=modes, tps=tps, eps=eps,
                ep_rank=args.ep_rank, routings=routings, dtype=args.dtype, configs=configs, glues=glues)
    sweep = Sweep(grid, device, run_dir, seed=args.seed, profile=not args.no_profile,
                  traces=args.traces, warmup_ms=args.warmup_ms, rep_ms=args.rep_ms,
                  point_timeout_s=args.point_timeout, progress=not args.no_progress,
                  compile_budget_s=budget, set_aside_corrupt=args.set_aside_corrupt, part=part,
                  compile_workers=args.compile_workers,
                  command="moe-lab " + " ".join(getattr(args, "_argv", sys.argv[1:])))
    return _measure(sweep, run_dir, device)


def parse_part(text: str) -> tuple[int, int]:
    """`1/4` -> (1, 4): part 1 of 4 (UsageError unless 0 <= I < N)."""
    i, sep, n = str(text).partition("/")
    try:
        i, n = int(i), int(n)
    except ValueError:
        i = n = -1
    if not sep or not (0 <= i < n):
        raise UsageError(f"--shard {text!r}: give I/N with 0 <= I < N, e.g. 0/2")
    return i, n


