"""Eager vs `torch.compile`: the MoE layer (router + experts) compiled per backend, with
graph breaks, recompiles and compile time recorded rather than hidden.

Variants (mode names `compile:<variant>`):

    default, max-autotune-no-cudagraphs, reduce-overhead    torch.compile(mode=...)
    ...:dynamic                                             the same with dynamic=True
    off                                                     the same MoELayer, not compiled:
                                                            the eager baseline of the ratio

Without `:dynamic` the compile is `dynamic=False`: every new token count recompiles
(what a server that compiles fixed batch-size buckets pays once per bucket). The
recompile limit is raised for the sweep so that no token count silently falls back to
eager. `wrapped=True` routes the experts call through its `torch.library.custom_op`
(`moe_lab.custom_ops`), `wrapped=False` lets Dynamo trace into the backend's Python.

    rows, compile_rows = run_compile_sweep(problems, ["torch"], ["default"], "cpu")

Per row (one backend x variant x wrapped x token count):
    compile_s    wall time of the first call at this token count, synchronised: the
                 compile (or recompile) plus one run; for `off`, the first eager call
    recompiles   graphs Dynamo compiled while running this token count, after the first
                 token count (0 there: those are the first compile)
    graph_breaks graph breaks of the layer, from torch._dynamo.explain at the first
                 token count (the same for every variant)
Per compile row (backend x variant x wrapped): compile_s of the first token count,
total recompiles over the grid, graph breaks and their reasons, the first error.
"""
from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import Counter
from typing import Callable

import torch

from . import backends as B
from .backends.torch_ref import torch_moe
from .check import THRESHOLDS, classify_exception, make_weights, one_line, rel_err
from .errors import has_timeout, reraise_if_terminated, time_limit
from .layer import MoELayer
from .problems import Problem
from .routing import make_routing, route

VARIANTS = ("default", "default:dynamic",
            "max-autotune-no-cudagraphs", "max-autotune-no-cudagraphs:dynamic",
            "reduce-overhead", "reduce-overhead:dynamic")
BASELINE = "off"
# Backends measured both ways by default: the ones whose Python Dynamo should not trace.
WRAP_BOTH = ("aiter", "aiter-triton", "torch")
# Compile time (s) allowed for one backend x variant x wrapped over the whole token grid:
# a compile still running when it is spent is stopped, and it and the remaining token
# counts become `timeout` rows instead of compiling on for hours.
COMPILE_BUDGET_S = 900.0
REASON_CHARS = 400


# --- variants --------------------------------------------------------------------------

def parse_variant(text: str) -> tuple[str | None, bool]:
    """`default`, `compile:reduce-overhead:dynamic`, `off` -> (torch.compile mode or None
    for `off`, dynamic)."""
    parts = text.split(":")
    if parts[0] == "compile":
        parts = parts[1:]
    if not parts or len(parts) > 2 or (len(parts) == 2 and parts[1] != "dynamic"):
        raise ValueError(f"compile variant {text!r} is not <mode>[:dynamic]")
    mode, dynamic = parts[0], len(parts) == 2
    if mode == BASELINE:
        if dynamic:
            raise ValueError("compile:off takes no :dynamic")
        return None, False
    if mode + (":dynamic" if dynamic else "") not in VARIANTS:
        raise ValueError(f"unknown compile mode {mode!r}; known: "
                         f"{', '.join(v for v in VARIANTS if ':' not in v)}, off")
    return mode, dynamic


def mode_name(variant: str) -> str:
    return variant if variant.startswith("compile:") else f"compile:{variant}"


def compile_fn(fn: Callable, variant: str) -> Callable:
    mode, dynamic = parse_variant(variant)
    if mode is None:
        return fn
    return torch.compile(fn, mode=mode, dynamic=dynamic)


@contextlib.contextmanager
def recompile_limit(n: int):
    """Let Dynamo recompile a frame `n` times before falling back to eager."""
    cfg = torch._dynamo.config
    name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    with cfg.patch(**{name: max(n, getattr(cfg, name))}):
        yield


@contextlib.contextmanager
def quiet_dynamo():
    """Dynamo logs every graph break as a warning; the sweep records them in rows."""
    loggers = [logging.getLogger(n) for n in ("torch._dynamo", "torch._inductor")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        lines = [ln.strip() for ln in record.getMessage().strip().splitlines() if ln.strip()]
        self.messages.append(" ".join(lines[:2])[:REASON_CHARS])


@contextlib.contextmanager
def cudagraph_skips():
    """Messages of Inductor skipping CUDA graphs under reduce-overhead (the compiled
    function then runs without graphs: a silent slowdown unless recorded)."""
    handler = _Collect()
    try:
        from torch._inductor import cudagraph_utils
        log = cudagraph_utils.cudagraphs_log
    except Exception:  # another torch: no messages, the counter still works
        yield handler.messages
        return
    saved = (log.level, log.propagate, log.disabled)
    log.addHandler(handler)
    log.setLevel(logging.WARNING)
    log.propagate, log.disabled = False, False
    try:
        yield handler.messages
    finally:
        log.removeHandler(handler)
        log.setLevel(saved[0])
        log.propagate, log.disabled = saved[1], saved[2]


def graphs_compiled() -> int:
    """Graphs Dynamo has compiled since the last `torch._dynamo.reset()` / counters clear."""
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def reset_dynamo():
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()


# --- graph breaks ----------------------------------------------------------------------

def format_break(reason) -> str:
    """One line per break: the reason's first line, Dynamo's explanation, where."""
    lines = [ln.strip() for ln in str(reason.reason).strip().splitlines() if ln.strip()]
    text = lines[0] if lines else "?"
    expl = next((ln for ln in lines[1:] if ln.startswith("Explanation:")), None)
    if expl:
        text += " | " + expl[len("Explanation:"):].strip()
    stack = getattr(reason, "user_stack", None) or []
    if stack:
        fr = stack[-1]
        text += f" @ {fr.filename.split('/')[-1]}:{fr.lineno} ({fr.name})"
    return text[:REASON_CHARS]


def graph_breaks(fn: Callable, *args) -> dict:
    """Dynamo's graph breaks of `fn(*args)`: {graphs, graph_breaks, reasons: [str]}.
    Runs `fn` once under torch._dynamo.explain, then resets Dynamo."""
    reset_dynamo()
    try:
        ex = torch._dynamo.explain(fn)(*args)
        return dict(graphs=ex.graph_count, graph_breaks=ex.graph_break_count,
                    reasons=[format_break(r) for r in ex.break_reasons])
    finally:
        reset_dynamo()


# --- inputs ----------------------------------------------------------------------------

def layer_inputs(problem: Problem, device: str, routing: str = "uniform", seed: int = 0):
    """(x[T,H], router_logits fp32[T,E]) for the layer. For non-uniform loads the chosen
    experts' logits are raised so the model's router picks them (the DeepSeek router may
    still differ where the load ignores its group limit)."""
    w, ids, logits = make_routing(problem.model, problem.tokens, routing, seed)
    if routing != "uniform":
        logits = logits.scatter(1, ids.long(), logits.abs().max() + 10.0)
    g = torch.Generator(device=device).manual_seed(seed + 1)
    x = torch.randn(problem.tokens, problem.hidden, generator=g, device=device,
                    dtype=problem.torch_dtype)
    return x, logits.to(device)


def correction_bias(problem: Problem, device: str) -> torch.Tensor | None:
    """DeepSeek's e_score_correction_bias (zeros: exercises the path, changes nothing)."""
    if problem.model.router != "deepseek":
        return None
    return torch.zeros(problem.experts, dtype=torch.float32, device=device)


def layer_reference(problem: Problem, weights: B.Weights, x, logits, bias) -> torch.Tensor:
    """fp32 reference of the whole layer: eager router, then the fp32 expert loop."""
    tw, ti = route(problem.model, logits, bias)
    return torch_moe(x, weights.w1, weights.w2, tw, ti, weights.expert_map,
                     problem.weight_on_input, compute_dtype=torch.float32)


def arg_copies(x, logits, min_bytes: int = 128 << 20, max_copies: int = 8) -> list[tuple]:
    """Copies of the inputs for the timer to rotate through (the same routing in each)."""
    if not x.is_cuda:
        return [(x, logits)]
    per = x.numel() * x.element_size() + logits.numel() * logits.element_size()
    n = max(1, min(max_copies, math.ceil(min_bytes / per)))
    return [(x, logits)] + [(x.clone(), logits.clone()) for _ in range(n - 1)]


def _timer(device: str):
    from . import timing
    return timing.time_eager if str(device).startswith("cuda") else timing.time_cpu


def _sync(device: str):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


# --- the sweep -------------------------------------------------------------------------

def _group(problems: list[Problem]) -> list[tuple[Problem, list[int]]]:
    """Problems that differ only in tokens -> (first problem, sorted token grid)."""
    groups: dict = {}
    for p in problems:
        key = (p.model, p.dtype, p.tp, p.ep, p.ep_rank)
        groups.setdefault(key, (p, set()))[1].add(p.tokens)
    return [(p, sorted(toks)) for p, toks in groups.values()]


def _report(progress, msg: str):
    if progress is None:
        return
    if hasattr(progress, "update"):
        if hasattr(progress, "set_description"):
            progress.set_description(msg)
        progress.update(1)
    else:
        progress(msg)


def _wraps(backend: str, wraps) -> tuple[bool, ...]:
    if wraps is not None:
        return tuple(wraps)
    return (False, True) if backend in WRAP_BOTH else (False,)


def run_compile_sweep(problems: list[Problem], backends: list[str], variants: list[str],
                      device: str, routing: str = "uniform", seed: int = 0, progress=None,
                      wraps: tuple[bool, ...] | None = None,
                      budget_s: float = COMPILE_BUDGET_S,
                      cold_caches: bool = False, on_row=None) -> tuple[list[dict], list[dict]]:
    """Compile the MoE layer per backend x variant x wrapped and time it across the token
    grid of `problems`. Returns (rows, compile_rows); every failure is a row.

    `variants`: `default`, `compile:reduce-overhead:dynamic`, `off`, ... (see VARIANTS).
    `wraps`: which of wrapped=False/True to run; default both for WRAP_BOTH backends.
    `progress`: a tqdm-like object (update/set_description) or a callable taking a str.
    `cold_caches`: disable Inductor's on-disk caches (FX graph, autotuning) so every
    variant pays a cold compile; by default they are on, so a graph another variant (or an
    earlier process) already compiled loads from cache: compile_s is then the warm-cache
    time a restarted server sees. Triton's kernel cache stays on either way.
    """
    variants = [mode_name(v) for v in variants]
    global _ON_ROW
    _ON_ROW = on_row  # `on_row(row)`: each finished point at once, so a kill loses none
    for v in variants:
        parse_variant(v)  # bad names fail before any work
    caches = contextlib.nullcontext()
    if cold_caches and hasattr(torch._inductor.config, "force_disable_caches"):
        caches = torch._inductor.config.patch(force_disable_caches=True)
    with quiet_dynamo(), caches:
        rows, crows = _run(problems, backends, variants, device, routing, seed, progress,
                           wraps, budget_s)
    for c in crows:
        c["inductor_caches"] = "off" if cold_caches else "on"
    return rows, crows


_ON_ROW = None


def _emit(row: dict) -> dict:
    if _ON_ROW is not None:
        _ON_ROW(dict(row))
    return row


def _run(problems, backends, variants, device, routing, seed, progress, wraps, budget_s):
    rows, compile_rows = [], []
    for first, tokens in _group(problems):
        base = dict(model=first.model.name, tp=first.tp, ep=first.ep, ep_rank=first.ep_rank,
                    dtype=first.dtype, routing=routing)
        try:
            weights = make_weights(first, device, seed)
            bias = correction_bias(first, device)
            inputs = {}
            for t in tokens:
                p = first.with_tokens(t)
                x, logits = layer_inputs(p, device, routing, seed)
                ref = layer_reference(p, weights, x, logits, bias)
                inputs[t] = (x, logits, ref)
        except Exception as exc:  # e.g. the weights do not fit: one row per point
            reraise_if_terminated(exc)
            for b in backends:
                for w in _wraps(b, wraps):
                    for v in variants:
                        for t in tokens:
                            rows.append(_row(base, b, v, t, w, status=classify_exception(exc),
                                             error=one_line(exc)))
            continue
        for b in backends:
            for w in _wraps(b, wraps):
                r, c = _sweep_backend(first, tokens, b, w, variants, device, weights, bias,
                                      inputs, base, budget_s, progress)
                rows += r
                compile_rows += c
        del weights, inputs
        if str(device).startswith("cuda"):
            torch.cuda.empty_cache()
    return rows, compile_rows


def _row(base, backend, mode, tokens, wrapped, **kw) -> dict:
    row = dict(base, backend=backend, mode=mode, tokens=tokens, wrapped=wrapped,
               status="ok", error="", median_us=math.nan, p10_us=math.nan, p90_us=math.nan,
               n=0, max_rel_err=math.nan, compile_s=math.nan, graph_breaks=math.nan,
               recompiles=0, noisy=False, note="",
               measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    row.update(kw)
    return row


def _sweep_backend(first, tokens, backend, wrapped, variants, device, weights, bias,
                   inputs, base, budget_s, progress):
    rows, compile_rows = [], []
    be = B.get(backend)
    ok, why = be.available()
    status = "unavailable"
    if ok:
        ok, why = be.supports(first, device)
        status = "unsupported"
    if not ok:
        for v in variants:
            for t in tokens:
                rows.append(_row(base, backend, v, t, wrapped, status=status, error=why))
                _report(progress, f"{backend} {v} T={t}: {status}")
        return rows, compile_rows
    try:
        layer = MoELayer(first, backend, weights, wrap=wrapped, bias=bias)
    except Exception as exc:
        reraise_if_terminated(exc)
        for v in variants:
            for t in tokens:
                rows.append(_row(base, backend, v, t, wrapped, status=classify_exception(exc),
                                 error=f"prepare: {error_line(exc)}"))
        return rows, compile_rows

    x0, logits0, _ = inputs[tokens[0]]
    try:
        brk = graph_breaks(layer, x0, logits0)
        brk_error = ""
    except Exception as exc:
        reraise_if_terminated(exc)
        brk, brk_error = dict(graphs=math.nan, graph_breaks=math.nan, reasons=[]), \
            f"explain: {error_line(exc)}"
    _sync(device)

    for v in variants:
        mode, _ = parse_variant(v)
        vrows = []
        reset_dynamo()
        with recompile_limit(len(tokens) * 8 + 8), cudagraph_skips() as skips:
            fn = compile_fn(layer, v)
            spent, before, graphs_first = 0.0, 0, 0
            for i, t in enumerate(tokens):
                x, logits, ref = inputs[t]
                row = _row(base, backend, v, t, wrapped,
                           graph_breaks=brk["graph_breaks"] if mode else math.nan)
                if spent >= budget_s:
                    row.update(status="timeout", error=f"skipped: compile for earlier token "
                               f"counts used up the {budget_s:.0f} s budget")
                    vrows.append(_emit(row))
                    _report(progress, f"{backend} {v} T={t}: timeout")
                    continue
                t0 = time.perf_counter()
                try:
                    _sync(device)
                    t0 = time.perf_counter()
                    # the budget is a hard limit: a compile that would run past it stops
                    with time_limit(max(budget_s - spent, 1.0) if mode else None,
                                    f"compile (budget {budget_s:.0f} s per backend x variant)"):
                        out = fn(x, logits)
                        _sync(device)
                    row["compile_s"] = time.perf_counter() - t0
                    spent += row["compile_s"] if mode else 0.0
                    err = rel_err(out, ref)
                    del out
                    timing = _timer(device)(fn, arg_copies(x, logits))
                    row.update(median_us=timing.median_us, p10_us=timing.p10_us,
                               p90_us=timing.p90_us, n=timing.n, noisy=timing.noisy,
                               note=timing.note, max_rel_err=err)
                    tol = THRESHOLDS[first.dtype]
                    if not err <= tol:
                        row.update(status="incorrect",
                                   error=f"max_rel_err {err:.3g} > {tol:.0e} for {first.dtype}")
                except Exception as exc:  # a failed compile or call is a row
                    reraise_if_terminated(exc)
                    if has_timeout(exc):
                        spent = math.inf  # the rest of the grid is skipped, not compiled
                        row.update(status="timeout", error=f"compile stopped after "
                                   f"{time.perf_counter() - t0:.0f} s: the {budget_s:.0f} s "
                                   "budget per backend x variant ran out")
                    else:
                        row.update(status=classify_exception(exc), error=error_line(exc))
                    _sync_quietly(device)
                now = graphs_compiled()
                row["recompiles"] = (now - before) if (i > 0 and mode) else 0
                if i == 0:
                    graphs_first = now
                before = now
                vrows.append(_emit(row))
                _report(progress, f"{backend} {v} T={t}: {row['status']}")
            n_skips = int(torch._dynamo.utils.counters["inductor"]["cudagraph_skips"])
        reset_dynamo()
        rows += vrows
        if mode is not None:
            crow = _compile_row(base, backend, v, wrapped, vrows, brk, brk_error, device)
            crow.update(cudagraph_skips=n_skips, cudagraph_skip_reasons="\n".join(dict.fromkeys(skips)),
                        graphs_first_token=graphs_first)
            compile_rows.append(crow)
    return rows, compile_rows


def error_line(exc: BaseException) -> str:
    """One line that names the real failure: Dynamo/Inductor wrap the cause
    (`BackendCompilerFailed: backend='inductor' raised:` + the inner error on the next
    line), so follow `__cause__` and lines ending in ':'."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    if lines and lines[0].endswith(":") and len(lines) > 1:
        text += " " + lines[1]
    root = exc
    while root.__cause__ is not None and root.__cause__ is not root:
        root = root.__cause__
    inner = getattr(exc, "inner_exception", None) or (root if root is not exc else None)
    if inner is not None and str(inner).strip().splitlines()[:1] and \
            str(inner).strip().splitlines()[0] not in text:
        text += " <- " + one_line(inner)
    return text[:REASON_CHARS]


def _sync_quietly(device):
    try:
        _sync(device)
    except Exception:
        pass


def rollup_status(statuses: list[str]) -> str:
    """One status for a backend x variant x wrapped from its points' statuses: `ok` when
    every point ran (ok or incorrect), `partial` when some did, else the points' common
    status (e.g. `timeout`) or `failed`."""
    ran = sum(s in ("ok", "incorrect") for s in statuses)
    if ran == len(statuses):
        return "ok"
    if ran:
        return "partial"
    return statuses[0] if len(set(statuses)) == 1 else "failed"


def _compile_row(base, backend, variant, wrapped, vrows, brk, brk_error, device) -> dict:
    first = vrows[0]
    errors = [r["error"] for r in vrows if r["status"] not in ("ok",) and r["error"]]
    status = rollup_status([r["status"] for r in vrows])
    return dict(
        {k: base[k] for k in ("model", "tp", "ep", "ep_rank", "dtype", "routing")},
        backend=backend, mode=variant, wrapped=wrapped, device=str(device),
        tokens_first=first["tokens"], compile_s=first["compile_s"],
        compile_s_total=sum(r["compile_s"] for r in vrows if not math.isnan(r["compile_s"])),
        recompiles=sum(r["recompiles"] for r in vrows),
        graphs=brk["graphs"], graph_breaks=brk["graph_breaks"],
        break_reasons="\n".join(f"{r} (x{n})" if n > 1 else r
                                 for r, n in Counter(brk["reasons"]).items()),
        points=len(vrows), points_ok=sum(r["status"] == "ok" for r in vrows),
        status=status, error=(errors[0] if errors else brk_error),
    )


def merge_compile_rows(old: dict, new: dict) -> dict:
    """One compile-table row for a backend x variant x wrapped whose token grid was measured
    in two calls (a resumed sweep: `old` covers the first token counts, `new` the rest).
    Counts add up; every graph the second call compiled, its first token count's included,
    is a recompile of the whole grid; the first compile is the one at the smaller token
    count."""
    def num(r, k):
        v = r.get(k)
        return 0 if v is None or (isinstance(v, float) and math.isnan(v)) else v
    first = old if num(old, "tokens_first") <= num(new, "tokens_first") else new
    out = dict(new)
    out.update(
        tokens_first=first.get("tokens_first"), compile_s=first.get("compile_s"),
        compile_s_total=num(old, "compile_s_total") + num(new, "compile_s_total"),
        recompiles=num(old, "recompiles") + num(new, "recompiles")
        + num(new, "graphs_first_token"),
        graphs_first_token=num(old, "graphs_first_token"),
        points=num(old, "points") + num(new, "points"),
        points_ok=num(old, "points_ok") + num(new, "points_ok"),
        cudagraph_skips=num(old, "cudagraph_skips") + num(new, "cudagraph_skips"),
        cudagraph_skip_reasons="\n".join(dict.fromkeys(
            ln for r in (old, new) for ln in str(r.get("cudagraph_skip_reasons") or "").splitlines()
            if ln)),
        error=old.get("error") or new.get("error") or "",
        merged_calls=num(old, "merged_calls") + 1,
    )
    for k in ("graphs", "graph_breaks", "break_reasons"):
        if out.get(k) is None or (isinstance(out.get(k), float) and math.isnan(out[k])):
            out[k] = old.get(k)
    if out["points_ok"] == out["points"]:
        out["status"] = "ok"
    elif out["points_ok"] == 0 and old.get("status") == new.get("status"):
        out["status"] = new.get("status")
    else:
        out["status"] = "partial" if out["points_ok"] else "failed"
    return out
