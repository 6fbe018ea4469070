"""`moe-lab check`: every backend on fresh random inputs against the reference, a
pass/fail line per backend and point; exit 1 on any failure.
(Heavy imports live in run(): the CLI's --help must not load torch or pandas.)"""
from __future__ import annotations

import os
import sys
import time

from ..core.errors import Terminated, reraise_if_terminated, terminate_gracefully
from . import options


def configure(p):
    options.models(p, "--model")
    p.add_argument("--tokens", default="1,64,1024", help="token counts, e.g. 1,64,1024 or 1-8192")
    options.device(p)
    options.dtype(p)
    options.shape(p, ep_default="1")
    p.add_argument("--routing", default="uniform", help="uniform | balanced | zipf:S | hot:P")
    p.add_argument("--backends", default=None, help="comma-separated (default: all)")
    options.config(p, many=False)
    p.add_argument("--seed", type=int, default=None, help="default: fresh random seed (printed)")
    p.add_argument("--out", default=None,
                   help="also write the printed report to this file: rewritten whole after "
                        "every point, so a check stopped (SIGTERM, a time limit) keeps what "
                        "it checked, with a line saying where it stopped")


def _problems(args, device: str) -> tuple[list[str], list]:
    """The backends to check and the points (model x TP x EP x tokens), from the flags
    checked in order: a UsageError names the first bad one."""
    from .. import backends
    from ..storage.configs import validate_config_arg
    from ..core.problems import make_problem, parse_int_list, parse_tokens, split_models
    from ..core.routing import parse_routing
    parse_routing(args.routing)
    validate_config_arg(args.config)
    tokens = parse_tokens(args.tokens)
    models = split_models(args.model) if args.model else options.default_models(
        device.startswith("cuda"))
    names = (backends.parse_names(args.backends) if args.backends else
             backends.for_dtype(backends.names(), args.dtype))
    tps, eps = parse_int_list(args.tp), parse_int_list(args.ep)
    problems = [make_problem(m, t, args.dtype, tp, ep if ep > 1 else 1,
                             args.ep_rank if ep > 1 else 0)
                for m in models for tp in tps for ep in eps for t in tokens]
    return names, problems


def _emit_header(emit, args, seed: int, device: str) -> None:
    """The report's `#` lines: when, the command, the device and its software, the seed,
    routing and the reference the errors are measured against."""
    from ..core.environment import capture_environment
    env = capture_environment()
    emit(f"# moe-lab check  {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    emit(f"# command: moe-lab {' '.join(getattr(args, '_argv', sys.argv[1:]))}")
    runtime = (f"HIP {env['hip_runtime']}" if env.get("hip_runtime") else
               f"CUDA {env.get('cuda_runtime')}" if env.get("cuda_runtime") else "none")
    emit(f"# device: {env.get('device_name')} ({env.get('vendor')}), "
         f"driver {env.get('driver')}, runtime {runtime}")
    emit(f"# torch {env.get('torch')}, triton {env.get('triton')}, aiter {env.get('aiter')}, "
         f"vllm {env.get('vllm')}, git {env.get('git_commit')}")
    emit(f"# seed {seed}, routing {args.routing}, metric max|out-ref|/max|ref| vs "
         f"{'fp64' if device == 'cpu' else 'fp32'} reference")


def run(args) -> int:
    from ..core import atomic
    from ..core.validate import output
    from ..measuring.correctness import resolve_device
    if args.out is not None:  # not a run's file (nor a folder): before any point is checked
        output(args.out, "--out")
    device = resolve_device(args.device)
    names, problems = _problems(args, device)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(3), "little")

    lines: list[str] = []

    def emit(s=""):
        print(s, flush=True)
        lines.append(s)

    def save(extra=()):  # the report so far, whole: an interrupted check keeps its lines
        if args.out:
            atomic.atomic_write_text(args.out, "\n".join([*lines, *extra]) + "\n")

    _emit_header(emit, args, seed, device)
    bw = max([14] + [len(n) for n in names])  # aiter-triton-silu, torch-fp8-dequant: 17
    mw = max([22] + [len(p.model.name) for p in problems])  # custom:H=..,I=..,E=..,k=..
    emit(f"{'model':{mw}} {'shard':9} {'tokens':>6} {'backend':{bw}} {'status':12} "
         f"{'max_rel_err':>11} {'limit':>6}  note")
    bad = done = 0
    passed = [0]  # backend-points that ran and passed
    save()
    try:
        with terminate_gracefully():
            for i, prob in enumerate(problems):
                bad += _check_one(prob, names, device, seed + i, args, emit, mw, bw, passed)
                done = i + 1
                save()
    except Terminated:
        save([f"# interrupted (SIGTERM) after {done} of {len(problems)} points: the "
              "lines above are what was checked"])
        raise
    emit(f"# {bad} failing backend-point(s)" if bad else
         "# all available backends pass" if passed[0] else
         "# no backend ran: every backend-point above was refused (unsupported or unavailable)")
    save()
    return 1 if bad else 0


def _check_one(prob, names, device, seed, args, emit, mw, bw, passed) -> int:
    """One point's lines; how many of its backend-points fail."""
    from ..measuring.correctness import check_problem, classify_exception, one_line
    try:
        rows = check_problem(prob, names, device, seed, args.routing, args.config)
    except Exception as exc:  # the reference itself could not run (e.g. OOM)
        reraise_if_terminated(exc)
        emit(f"{prob.model.name:{mw}} {prob.sharding:9} {prob.tokens:>6} {'(reference)':{bw}} "
             f"{classify_exception(exc):12} {'':>11} {'':>6}  {one_line(exc)}")
        return 1
    bad = 0
    for r in rows:
        err = "" if r["max_rel_err"] != r["max_rel_err"] else f"{r['max_rel_err']:.2e}"
        verdict = {"ok": "PASS", "incorrect": "FAIL", "failed": "FAIL", "oom": "FAIL"}.get(
            r["status"], r["status"])
        note = r["error"] or (f"quant_err {r['quant_err']:.2e} ({r['fp8_format']})"
                              if r.get("fp8_format") and r["status"] == "ok" else "")
        if r.get("config_file") and r["status"] == "ok":  # the backend's own lookup's file
            note = "; ".join(x for x in (note, f"config {r['config_file']}",
                                         r.get("backend_version") or "") if x)
        emit(f"{prob.model.name:{mw}} {prob.sharding:9} {prob.tokens:>6} {r['backend']:{bw}} "
             f"{verdict:12} {err:>11} {r['threshold']:>6.0e}  {note}")
        bad += r["status"] in ("incorrect", "failed", "oom")
        passed[0] += r["status"] == "ok"
    return bad
