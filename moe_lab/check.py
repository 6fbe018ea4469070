"""Correct before fast: run backends on fresh random inputs against the reference.

The reference is the `torch` per-expert loop with every operand upcast (fp64 on the CPU,
fp32 on a GPU). The error is `max|out - ref| / max|ref|`; NaN or Inf never passes.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

import torch

from . import backends as B
from .backends.torch_ref import torch_moe
from .errors import UsageError
from .problems import Problem, make_problem, parse_int_list, parse_tokens, split_models
from .routing import make_routing, parse_routing

# Pass/fail threshold on max|out-ref|/max|ref| per dtype. bf16 keeps 8 bits of mantissa:
# rounding of the output alone is 2^-8 ~ 0.4% of an element, and the bf16 intermediate
# between the two GEMMs adds as much again; 2% leaves room for accumulation order.
THRESHOLDS = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 2e-3}


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def make_weights(problem: Problem, device: str, seed: int) -> B.Weights:
    """Random expert weights for this rank, scaled so activations stay O(1)."""
    g = torch.Generator(device=device).manual_seed(seed)
    E, I, H, dt = problem.local_experts, problem.inter, problem.hidden, problem.torch_dtype
    w1 = torch.randn(E, 2 * I, H, generator=g, device=device, dtype=dt).mul_(H ** -0.5)
    w2 = torch.randn(E, H, I, generator=g, device=device, dtype=dt).mul_(I ** -0.5)
    return B.Weights(w1, w2, problem.expert_map(device))


@dataclass
class Inputs:
    x: torch.Tensor
    topk_weights: torch.Tensor
    topk_ids: torch.Tensor

    def args(self):
        return self.x, self.topk_weights, self.topk_ids


def make_inputs(problem: Problem, device: str, seed: int, routing: str = "uniform",
                ensure_local: bool = True) -> Inputs:
    """Fresh random x and routing. Under EP a draw that sends no token to this rank's
    experts checks nothing and times empty launches, so with `ensure_local` the routing is
    redrawn (next seeds, up to 64 times) until at least one (token, slot) is local."""
    lo, hi = problem.first_local_expert, problem.first_local_expert + problem.local_experts
    for attempt in range(64 if ensure_local and problem.ep > 1 else 1):
        w, ids, _ = make_routing(problem.model, problem.tokens, routing, seed + 7919 * attempt)
        if ((ids >= lo) & (ids < hi)).any():
            break
    g = torch.Generator(device=device).manual_seed(seed + 1)
    x = torch.randn(problem.tokens, problem.hidden, generator=g, device=device,
                    dtype=problem.torch_dtype)
    return Inputs(x, w.to(device), ids.to(device))


def reference(problem: Problem, weights: B.Weights, inp: Inputs) -> torch.Tensor:
    cd = torch.float64 if inp.x.device.type == "cpu" else torch.float32
    return torch_moe(inp.x, weights.w1, weights.w2, inp.topk_weights, inp.topk_ids,
                     weights.expert_map, problem.weight_on_input, compute_dtype=cd)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max|out-ref| / max|ref|; inf when out has NaN/Inf or the wrong shape."""
    if out.shape != ref.shape:
        return float("inf")
    o = out.to(ref.dtype)
    if not torch.isfinite(o).all():
        return float("inf")
    denom = ref.abs().max().item()
    num = (o - ref).abs().max().item()
    return num / denom if denom > 0 else num


def classify_exception(exc: BaseException) -> str:
    if isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower():
        return "oom"
    return "failed"


def one_line(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {msg[0] if msg else ''}"[:300]


def check_backend(backend: B.Backend, problem: Problem, weights: B.Weights, inp: Inputs,
                  ref: torch.Tensor, device: str, prepared=None) -> dict:
    """One backend, one point: status, error and max_rel_err. Never raises."""
    row = dict(backend=backend.name, status="ok", error="", max_rel_err=float("nan"),
               threshold=THRESHOLDS[problem.dtype])
    ok, why = backend.available()
    if not ok:
        return dict(row, status="unavailable", error=why)
    ok, why = backend.supports(problem, device)
    if not ok:
        return dict(row, status="unsupported", error=why)
    try:
        fn = prepared or backend.prepare(problem, weights)
        out = fn(*inp.args())
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        err = rel_err(out, ref)
    except Exception as exc:  # a failing backend is a row, not a crash
        return dict(row, status=classify_exception(exc), error=one_line(exc))
    row["max_rel_err"] = err
    if not err <= row["threshold"]:
        row.update(status="incorrect",
                   error=f"max_rel_err {err:.3g} > {row['threshold']:.0e} for {problem.dtype}")
    return row


def check_problem(problem: Problem, backend_names: list[str], device: str, seed: int,
                  routing: str = "uniform") -> list[dict]:
    weights = make_weights(problem, device, seed)
    inp = make_inputs(problem, device, seed + 7, routing)
    ref = reference(problem, weights, inp)
    rows = []
    for name in backend_names:
        t0 = time.perf_counter()
        row = check_backend(B.get(name), problem, weights, inp, ref, device)
        row.update(problem.key(), routing=routing, seed=seed,
                   check_s=round(time.perf_counter() - t0, 3))
        rows.append(row)
    del weights, inp, ref
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return rows


# --- CLI -------------------------------------------------------------------------------

def configure(p):
    p.add_argument("--model", default=None,
                   help="preset(s), comma-separated, or custom:H=..,I=..,E=..,k=.. "
                        "(default: qwen3-30b-a3b on CPU, the four seed models on GPU)")
    p.add_argument("--tokens", default="1,64,1024", help="token counts, e.g. 1,64,1024 or 1-8192")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="default: cuda when a GPU is visible, else cpu")
    p.add_argument("--dtype", default="bf16", choices=sorted(THRESHOLDS))
    p.add_argument("--tp", default="8", help="tensor-parallel size(s), e.g. 8")
    p.add_argument("--ep", default="1", help="expert-parallel size(s); 1 = no EP; e.g. 1,8 for both")
    p.add_argument("--ep-rank", type=int, default=0, help="which EP rank's experts to hold")
    p.add_argument("--routing", default="uniform", help="uniform | balanced | zipf:S | hot:P")
    p.add_argument("--backends", default=None, help="comma-separated (default: all)")
    p.add_argument("--seed", type=int, default=None, help="default: fresh random seed (printed)")
    p.add_argument("--out", default=None, help="also write the printed report to this file")


def _models_default(device: str) -> list[str]:
    from .problems import SEED_MODELS
    return list(SEED_MODELS) if device.startswith("cuda") else ["qwen3-30b-a3b"]


def run(args) -> int:
    from .store import capture_environment
    device = args.device or default_device()
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda but no GPU is visible to torch")
    parse_routing(args.routing)
    tokens = parse_tokens(args.tokens)
    models = split_models(args.model) if args.model else _models_default(device)
    names = B.parse_names(args.backends) if args.backends else B.names()
    tps, eps = parse_int_list(args.tp), parse_int_list(args.ep)
    problems = [make_problem(m, t, args.dtype, tp, ep if ep > 1 else 1,
                             args.ep_rank if ep > 1 else 0)
                for m in models for tp in tps for ep in eps for t in tokens]
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(3), "little")

    lines: list[str] = []

    def emit(s=""):
        print(s, flush=True)
        lines.append(s)

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
    emit(f"{'model':22} {'shard':9} {'tokens':>6} {'backend':14} {'status':12} "
         f"{'max_rel_err':>11} {'limit':>6}  note")
    bad = 0
    for i, prob in enumerate(problems):
        try:
            rows = check_problem(prob, names, device, seed + i, args.routing)
        except Exception as exc:  # the reference itself could not run (e.g. OOM)
            emit(f"{prob.model.name:22} {prob.sharding:9} {prob.tokens:>6} {'(reference)':14} "
                 f"{classify_exception(exc):12} {'':>11} {'':>6}  {one_line(exc)}")
            bad += 1
            continue
        for r in rows:
            err = "" if r["max_rel_err"] != r["max_rel_err"] else f"{r['max_rel_err']:.2e}"
            verdict = {"ok": "PASS", "incorrect": "FAIL", "failed": "FAIL", "oom": "FAIL"}.get(
                r["status"], r["status"])
            emit(f"{prob.model.name:22} {prob.sharding:9} {prob.tokens:>6} {r['backend']:14} "
                 f"{verdict:12} {err:>11} {r['threshold']:>6.0e}  {r['error']}")
            bad += r["status"] in ("incorrect", "failed", "oom")
    emit(f"# {bad} failing backend-point(s)" if bad else "# all available backends pass")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 1 if bad else 0
