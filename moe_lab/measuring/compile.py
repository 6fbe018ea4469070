"""Eager vs `torch.compile`: the MoE layer (router + experts) compiled per backend, with
graph breaks, recompiles and compile time recorded rather than hidden.

A `CompileBench` prepares one shard's token grid once (weights, inputs, the fp32 layer
reference); `bench.run(backend, mode)` compiles the layer for one Mode
(`compile:<variant>[:dynamic]`, wrapped or not, see moe_lab.storage.modes) and times it at every
token count with the sweep's timing loop (`points.time_modes`), each token count checked
first (a compiled point that fails the check is `incorrect`, untimed). Without `:dynamic`
the compile is `dynamic=False`: every new token count recompiles (what a server that compiles fixed
batch-size buckets pays once per bucket); the recompile limit is raised so that no token
count silently falls back to eager. `compile:off` is the same layer uncompiled.

Per row (one backend x mode x token count):
    compile_s    wall time of the first call at this token count, synchronised: the
                 compile (or recompile) plus one run; for `off`, the first eager call
    recompiles   graphs Dynamo compiled while running this token count, after the first
                 token count (0 there: those are the first compile)
    graph_breaks graph breaks of the layer, from torch._dynamo.explain at the first
                 token count (the same for every variant)
The compile-table row (moe_lab.measuring.compile_table) sums these up per backend x mode.
"""
from __future__ import annotations

import contextlib
import logging
import math
import time
from typing import Callable

import torch

from .. import backends
from ..backends.torch_ref import torch_moe
from .compile_table import compile_row
from .correctness import classify_exception, make_weights, one_line, rel_err
from ..core.environment import now_iso
from ..core.errors import has_timeout, reraise_if_terminated, time_limit
from .layer import MoELayer
from ..storage.modes import Mode
from .points import Measured, Point, check_point, fill_metrics, new_row, time_modes, within_limit
from ..core.problems import Problem
from ..core.routing import make_routing, route
# Compile time (s) allowed for one backend x variant x wrapped over the whole token grid:
# a compile still running when it is spent is stopped, and it and the remaining token
# counts become `timeout` rows instead of compiling on for hours.
from ..core.constants import COMPILE_BUDGET_S  # defined torch-free: sweep --help states it
REASON_CHARS = 400


def compile_fn(fn: Callable, mode: Mode) -> Callable:
    """`fn` under torch.compile as `mode` says (unchanged for compile:off)."""
    if not mode.compiled:
        return fn
    return torch.compile(fn, mode=mode.variant, dynamic=mode.dynamic)


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
        logits = logits.scatter(1, ids.long(), float(logits.abs().max()) + 10.0)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(problem.tokens, problem.hidden, generator=g).to(problem.torch_dtype)
    return x.to(device), logits.to(device)


def correction_bias(problem: Problem, device: str) -> torch.Tensor | None:
    """DeepSeek's e_score_correction_bias (zeros: exercises the path, changes nothing)."""
    if problem.model.router != "deepseek":
        return None
    return torch.zeros(problem.experts, dtype=torch.float32, device=device)


def layer_reference(problem: Problem, weights: backends.Weights, x, logits, bias) -> torch.Tensor:
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


def _sync(device: str):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


# --- the bench -----------------------------------------------------------------------

class CompileBench:
    """One shard's token grid, prepared once for every backend x mode: the weights, the
    inputs per token count and the fp32 reference of the whole layer.

        bench = CompileBench(problem, [1, 16, 64], "cuda", seed=0)
        rows, crow = bench.run("aiter-triton", parse_mode("compile:reduce-overhead", wrapped=True))
    """

    def __init__(self, problem: Problem, tokens: list[int], device: str,
                 routing: str = "uniform", seed: int = 0, weights: backends.Weights | None = None,
                 point_seed: Callable[[int], int] | None = None):
        self.problem, self.tokens, self.device, self.routing = problem, list(tokens), device, routing
        self.weights = weights if weights is not None else make_weights(problem, device, seed)
        self.bias = correction_bias(problem, device)
        seed_of = point_seed or (lambda t: seed)
        self.inputs = {}
        for t in self.tokens:
            x, logits = layer_inputs(problem.with_tokens(t), device, routing, seed_of(t))
            ref = layer_reference(problem.with_tokens(t), self.weights, x, logits, self.bias)
            self.inputs[t] = (x, logits, ref)
        self.base = dict(problem.key(), routing=routing)
        self.base.pop("tokens")

    def row(self, backend: str, mode: Mode, tokens: int, **kw) -> dict:
        """A row of this bench (moe_lab.measuring.points.new_row; the sweep adds its provenance)."""
        row = new_row(dict(self.base, backend=backend, mode=mode.name, wrapped=mode.wrapped,
                           tokens=tokens), compile_s=math.nan, graph_breaks=math.nan,
                      recompiles=0, note="")
        row.update(kw)
        return row

    def run(self, backend: str, mode: Mode, budget_s: float = COMPILE_BUDGET_S,
            on_row: Callable[[dict], None] | None = None,
            tokens: list[int] | None = None) -> tuple[list[dict], dict | None]:
        """Compile and time the layer at every token count (or the prepared ones given in
        `tokens`, e.g. what a resumed sweep has left). Returns (rows, compile row or None
        for compile:off); `on_row(row)` gets each row as it is finished, so a kill loses
        none. Every failure is a row; the budget is a hard limit on compile time over the
        grid (what is left of the grid becomes `timeout` rows)."""
        tokens = list(self.tokens if tokens is None else tokens)
        emit = on_row or (lambda r: None)
        x0, logits0, ref0 = self.inputs[tokens[0]]
        failed = {}

        def build(be, kw):  # the layer (the prepared callable inside), eager, wrapped or not
            try:
                return MoELayer(self.problem, backend, self.weights, wrap=mode.wrapped,
                                bias=self.bias)
            except Exception as exc:
                failed["why"] = f"prepare: {error_line(exc)}"
                raise

        with quiet_dynamo():  # correct eager first (at the grid's first token), then compiled
            c = check_point(Point(self.problem.with_tokens(tokens[0]), backend,
                                  routing=self.routing), self.weights, self.device, build=build,
                            output=lambda layer: (layer(x0, logits0), ref0))
            if c.ok:
                brk, brk_error = self._breaks(c.fn) if mode.compiled else (None, "")
                timed = self._grid(c, backend, mode, brk, tokens, budget_s, emit)
        if not c.ok:
            rows = [self.row(backend, mode, t, status=c.status, error=failed.get("why", c.error),
                             max_rel_err=c.max_rel_err) for t in tokens]
            for r in rows:
                emit(r)
            return rows, None
        rows, n_skips, skips, graphs_first = timed
        if not mode.compiled:
            return rows, None
        crow = compile_row(self.base, backend, mode.name, mode.wrapped, rows, brk, brk_error,
                           self.device)
        crow.update(cudagraph_skips=n_skips, cudagraph_skip_reasons="\n".join(dict.fromkeys(skips)),
                    graphs_first_token=graphs_first, measured_at=now_iso())
        return rows, crow

    def _breaks(self, layer) -> tuple[dict, str]:
        x0, logits0, _ = self.inputs[self.tokens[0]]  # the grid's first point
        try:
            brk, err = graph_breaks(layer, x0, logits0), ""
        except Exception as exc:
            reraise_if_terminated(exc)
            brk, err = dict(graphs=math.nan, graph_breaks=math.nan, reasons=[]), \
                f"explain: {error_line(exc)}"
        _sync(self.device)
        return brk, err

    def _grid(self, c, backend, mode: Mode, brk, tokens, budget_s, emit):
        rows = []
        reset_dynamo()
        with recompile_limit(len(tokens) * 8 + 8), cudagraph_skips() as skips:
            fn = compile_fn(c.fn, mode)
            spent, before, graphs_first = 0.0, 0, 0
            for i, t in enumerate(tokens):
                row = self.row(backend, mode, t,
                               graph_breaks=brk["graph_breaks"] if brk else math.nan)
                if spent >= budget_s:
                    row.update(status="timeout", error=f"skipped: compile for earlier token "
                               f"counts used up the {budget_s:.0f} s budget")
                else:
                    spent += self._point(c, fn, mode, t, row, budget_s, spent)
                now = graphs_compiled()
                row["recompiles"] = (now - before) if (i > 0 and mode.compiled) else 0
                if i == 0:
                    graphs_first = now
                before = now
                rows.append(row)
                emit(dict(row))
            n_skips = int(torch._dynamo.utils.counters["inductor"]["cudagraph_skips"])
        reset_dynamo()
        return rows, n_skips, skips, graphs_first

    def _point(self, c, fn, mode: Mode, t: int, row: dict, budget_s: float, spent: float) -> float:
        """Compile (first call), check and, only when correct, time one token count into
        `row` (points.time_modes: a compiled point that fails the check has no time);
        returns the compile seconds spent (inf when the budget stopped it)."""
        x, logits, ref = self.inputs[t]
        t0 = time.perf_counter()
        try:
            _sync(self.device)
            t0 = time.perf_counter()
            with time_limit(max(budget_s - spent, 1.0) if mode.compiled else None,
                            f"compile (budget {budget_s:.0f} s per backend x variant)"):
                out = fn(x, logits)
                _sync(self.device)
            row["compile_s"] = time.perf_counter() - t0
            err = rel_err(out, ref)
            del out
            status, why = within_limit(err, self.problem.dtype)
            row.update(max_rel_err=err)
            if status != "ok":  # incorrect: a row with its error, never a time
                row.update(status=status, error=why)
                return row["compile_s"] if mode.compiled else 0.0
            timed, = time_modes(c, [mode], self.device, fn, arg_copies(x, logits))
            if timed.status != "ok":
                raise timed.exc
            timing = timed.timing
            fill_metrics(row, Measured(timing, self.problem.with_tokens(t)))
            row.update(note=timing.note, samples_us=list(timing.samples_us))
            return row["compile_s"] if mode.compiled else 0.0
        except Exception as exc:  # a failed compile or call is a row
            reraise_if_terminated(exc)
            _sync_quietly(self.device)
            if has_timeout(exc):
                row.update(status="timeout", error=f"compile stopped after "
                           f"{time.perf_counter() - t0:.0f} s: the {budget_s:.0f} s "
                           "budget per backend x variant ran out")
                return math.inf  # the rest of the grid is skipped, not compiled
            row.update(status=classify_exception(exc), error=error_line(exc))
            return 0.0


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
