"""A point's one path to its row: gate, prepare, check, time, row.

    pt = Point(problem, "aiter-triton", config="tuned", glue="fused", routing="uniform")
    c = measure_point(pt, weights, device, inputs=inp, ref=ref, modes=modes)  # the one path
    row = new_row(key, git_commit=..., device=...)     # every declared column at its default
    finish(row, timing=t, problem=p, topk_ids=ids, device="cuda")  # timer, metrics, roof, id

`measure_point` is the one function a measuring path hands a point to time (the sweep,
distributed ranks, the eager split): `check_point` resolves the backend once, gates once
(`gate`: can it run here at all?), resolves the launch configuration, prepares and checks
the output against the reference by the one limit rule (`within_limit`); only a point that
passed is timed, by `time_modes`, the one loop over modes and the one `not_capturable`
rule. Paths that only check (tune's would-be winners, `check`, `profile`) call
`check_point`; a compile grid checks each compiled token count by `within_limit` before
`time_modes` times it. What differs between paths is handed in, never written again: how
the callable is built (`build`: a compiled layer, a rank's shard), how its output and
reference are had (`output`), a verdict shared by ranks (`agree`), what is timed (`timed`)
and what a path adds per mode (`then`: a rank's synchronised loops).

The sweep, compile sweeps, distributed ranks, tune and the aiter import build their rows
with `new_row` and close them with `finish`; none copies timer fields or computes the
roofline itself. A new per-point metric is a `Column` in moe_lab.storage.rows and one line in
`fill_metrics`.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from ..core.problems import FP8_SCHEMES
from ..storage.rows import ID_FIELDS, OPTIONAL_ID_FIELDS, defaults, validate
from ..storage.store import point_id

IDENTITY = frozenset(ID_FIELDS + OPTIONAL_ID_FIELDS)

# Pass/fail threshold on max|out-ref|/max|ref| per dtype. bf16 keeps 8 bits of mantissa:
# rounding of the output alone is 2^-8 ~ 0.4% of an element, and the bf16 intermediate
# between the two GEMMs adds as much again; 2% leaves room for accumulation order.
THRESHOLDS = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 2e-3}
# fp8 schemes: the reference runs on the same dequantised weights and activations, with
# the intermediate between the GEMMs held in bf16 as the layer holds it (backends.torch_fp8
# .fp8_reference), so quantisation error is not in this number (it is `quant_err`). What
# is left: where a kernel's bf16 intermediate differs from the reference's by one bf16 step
# (accumulation order, its own rounding) and the value sits at an fp8 rounding boundary,
# re-quantising it lands one fp8 step (2^-3 of the element) away, and a few such flips
# per row move an output by a few % of the max. What each fp8 backend measures against
# it, per scheme, shape and token count, is in the committed checks (data/checks/*fp8*,
# CPU and H200); 6e-2 sits above every passing row there, and a wrong scale (x2, or
# e4m3fn bits read as e4m3fnuz without doubling) fails it (tests/test_quant.py).
THRESHOLDS.update({s: 6e-2 for s in FP8_SCHEMES})


def checkpoint_refusal(problem) -> str:
    """Why no checkpoint has this point's layout, or "": the rules about which layouts
    exist, asked once here for every backend (a backend keeps only rules about itself).

      * the router weight on the input (Llama-4) is top-1 only: with k > 1 the weighted
        sum of experts no longer factors through the input;
      * fp8-block128: a checkpoint's 128x128 weight blocks tile the whole weight, so this
        rank's H and I must be multiples of 128 (Qwen3-235B at TP8: I = 1536/8 = 192 would
        split blocks between ranks; vLLM refuses to load it)."""
    if problem.weight_on_input and problem.topk != 1:
        return (f"the router weight on the input (Llama-4) is top-1 only; "
                f"{problem.model.name} routes to k={problem.topk}")
    if problem.dtype == "fp8-block128":
        bad = [f"{n}={v}" for n, v in (("H", problem.hidden), ("I", problem.inter)) if v % 128]
        if bad:
            return (f"fp8-block128 needs this rank's H and I to be multiples of 128 "
                    f"({', '.join(bad)} at {problem.sharding}): a 128x128 weight block would "
                    f"straddle two ranks, and no checkpoint has that layout")
    return ""


def fp8_format_refusal(backend, problem, device) -> str:
    """Why `backend` cannot take the fp8 format an FP8 checkpoint has on `device`, or "":
    the format is the device's (moe_lab.core.devices.fp8_format_for: e4m3fnuz on MI300 /
    MI325X, whose checkpoints are converted on load; e4m3fn elsewhere), never a choice."""
    if not problem.is_fp8:
        return ""
    from ..core.devices import fp8_format_for
    from ..core.environment import device_name
    fmt = fp8_format_for(device_name(device))
    if fmt in backend.fp8_formats:
        return ""
    return (f"an fp8 checkpoint on this device is {fmt}; {backend.name} takes "
            f"{', '.join(backend.fp8_formats)} only")


def gate(backend, problem, device) -> tuple[str, str]:
    """("ok", "") when `backend` can run `problem` on `device`, else (status, why):
    `unsupported` (a layout no checkpoint has: checkpoint_refusal, asked first and the
    same for every backend; the shape, the device, the dtype scheme or the fp8 format
    this backend cannot take) or `unavailable` (not installed, no GPU). The one place
    this is asked."""
    why = checkpoint_refusal(problem)
    if why:
        return "unsupported", why
    ok, why = backend.available()
    if not ok:
        return "unavailable", why
    ok, why = backend.supports(problem, device)
    if not ok:
        return "unsupported", why
    if problem.is_fp8 and problem.dtype not in backend.quant_schemes:
        return "unsupported", (f"{backend.name} has no {problem.dtype} path" +
                               (f" (its fp8 schemes: {', '.join(backend.quant_schemes)})"
                                if backend.quant_schemes else ""))
    why = fp8_format_refusal(backend, problem, device)
    if why:
        return "unsupported", why
    return "ok", ""


def new_row(key: dict, *, git_commit=None, device=None, measured_at=None, **kw) -> dict:
    """A row: every core column at its declared default, then the point's key, its
    provenance (commit, device, time: now when not given) and `kw`."""
    from ..core.environment import now_iso
    row = defaults()
    row.update(key)
    row.update(git_commit=git_commit, device=device, measured_at=measured_at or now_iso())
    row.update(kw)
    return row


def timing_fields(t) -> dict:
    """What a moe_lab.measuring.timing.Timing puts on a row (the one copy of the timer's numbers)."""
    med_all = t.median_all_us if t.median_all_us == t.median_all_us else t.median_us
    return dict(median_us=t.median_us, p10_us=t.p10_us, p90_us=t.p90_us, n=t.n,
                noisy=bool(t.noisy), median_all_us=med_all, steady_frac=t.steady_frac)


@dataclass
class Measured:
    """What `fill_metrics` can read about a point: its timing (None when untimed) and
    problem (None when the row does not come from one, e.g. an imported table)."""
    timing: object = None
    problem: object = None


def fill_metrics(row: dict, m: Measured) -> None:
    """Per-point metrics computed from what was measured, one line each (their columns
    are declared in moe_lab.storage.rows)."""
    if m.timing is not None:
        row.update(timing_fields(m.timing))


def roofline_fields(problem, topk_ids, device: str) -> dict:
    """flops, bytes, roof_us, ceiling_source of a point on a GPU (the measured ceilings
    of the device); {} on a CPU (the workbook's floors are for GPUs). The one place the
    layer roof of a measured row is computed."""
    if not str(device).startswith("cuda"):
        return {}
    import torch
    from ..core.devices import ceilings_for
    from ..cost.roofline import cost, floor_us
    ceil = ceilings_for(torch.cuda.get_device_name())
    c = cost(problem, ids=topk_ids.cpu() if topk_ids is not None else None)
    return dict(flops=float(c.flops), bytes=float(c.bytes), roof_us=floor_us(c, ceil, problem.dtype),
                ceiling_source=ceil.source)


def finish(row: dict, *, timing=None, problem=None, topk_ids=None, device: str = "cpu") -> dict:
    """Close a row: the timer's numbers, the metrics, the roofline (GPU rows of a problem),
    pct_of_roof, point_id; validated against moe_lab.storage.rows. Returns the row."""
    fill_metrics(row, Measured(timing, problem))
    if problem is not None and str(device).startswith("cuda") and "roof_us" not in _set(row):
        try:
            row.update(roofline_fields(problem, topk_ids, device))
        except Exception as exc:  # annotation: never lose a measurement for it
            from ..core.errors import one_line
            row["warning"] = "; ".join(x for x in (row.get("warning") or "",
                                                   f"roofline: {one_line(exc)}") if x)
    roof, med = row.get("roof_us", math.nan), row.get("median_us", math.nan)
    if roof is not None and roof == roof and med is not None and med == med and med > 0:
        row["pct_of_roof"] = 100.0 * roof / med
    row["point_id"] = point_id(row)
    validate(row)
    return row


def _set(row: dict) -> set:
    """The columns of a row that hold a value (not None / NaN)."""
    return {k for k, v in row.items() if v is not None and not (isinstance(v, float) and v != v)}


def rel_err(out, ref) -> float:
    """max|out-ref| / max|ref|; inf when out has NaN/Inf or the wrong shape; 0 when both
    are empty (a rank that holds none of the batch's rows has nothing to get wrong)."""
    if out.shape != ref.shape:
        return float("inf")
    if ref.numel() == 0:
        return 0.0
    import torch
    o = out.to(ref.dtype)
    if not torch.isfinite(o).all():
        return float("inf")
    denom = ref.abs().max().item()
    num = (o - ref).abs().max().item()
    return num / denom if denom > 0 else num


def classify_exception(exc: BaseException) -> str:
    """A failure's status: `timeout` when the point's time limit stopped it (anywhere in the
    chain: the check, the timing, a wrapped compile), `oom`, else `failed`."""
    import torch
    from ..core.errors import has_timeout
    if has_timeout(exc):
        return "timeout"
    if isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower():
        return "oom"
    return "failed"


# --- the one path of a point ----------------------------------------------------------------

@dataclass(frozen=True)
class Point:
    """What is measured: `problem` (a model's shard at a token count and dtype) on `backend`
    (a name, or a Backend object a test builds), with its launch configuration (`config`:
    default, tuned or a file, resolved by moe_lab.storage.configs.config_for; `table`, an
    explicit one such as a tune candidate's, is used as it is), `glue` ('' for the backend's
    own) and `routing`."""
    problem: Any
    backend: Any
    config: str = "default"
    glue: str = ""
    routing: str = "uniform"
    table: dict | None = field(default=None, compare=False)


@dataclass
class Checked:
    """What `check_point` found: status (ok, or unsupported / unavailable / incorrect /
    failed / oom / timeout) and error, max_rel_err against its threshold, the prepared
    callable `fn` (None when it never got that far), the facts a row carries about what
    ran (`facts`: config_file, launch_config, backend_version, glue_used, glue_notes) and
    its modes' Timed (`timed`, measure_point's)."""
    point: Point
    backend: Any
    status: str = "ok"
    error: str = ""
    max_rel_err: float = math.nan
    threshold: float = math.nan
    fn: Any = None
    facts: dict = field(default_factory=dict)
    timed: Any = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def row(self) -> dict:
        """The check's columns of a row."""
        return dict(backend=self.backend.name, status=self.status, error=self.error,
                    max_rel_err=self.max_rel_err, threshold=self.threshold, **self.facts)


def within_limit(err: float, dtype: str) -> tuple[str, str]:
    """The limit rule, written once: ("ok", "") when max|out-ref|/max|ref| is within the
    dtype's threshold (THRESHOLDS above), else ("incorrect", why).
    NaN never passes."""
    tol = THRESHOLDS[dtype]
    if err <= tol:
        return "ok", ""
    return "incorrect", f"max_rel_err {err:.3g} > {tol:.0e} for {dtype}"


def resolve(backend):
    """A backend name to its object (the registry's), once per point; an object as it is."""
    if not isinstance(backend, str):
        return backend
    from .. import backends
    return backends.get(backend)


def check_point(point: Point, weights, device: str, *, inputs=None, ref=None,
                device_name: str | None = None, fn=None, cache: dict | None = None,
                build: Callable | None = None, output: Callable | None = None,
                agree: Callable | None = None) -> Checked:
    """A point up to its verdict (module doc): backend resolved, gated, configured,
    prepared, checked against the reference. Never raises for the point's own failures:
    each is the Checked's status and error (a kill, SIGTERM, is re-raised).

      fn      a callable already prepared for this point (used as it is)
      cache   {(backend, config, glue): fn}: a callable prepared for the same problem
              before (another routing of it) is reused, a new one is kept
      build   (backend, kw) -> callable; default backend.prepare(problem, weights, **kw),
              kw holding the configuration (tunable backends) and the glue
      output  fn -> (out, ref); default fn(*inputs.args()) against `ref`
      agree   (step, status, error, checked) -> (status, error): the verdict of every
              rank on the setup (step "setup": gate, configuration, prepare), asked on
              every path before the check, and on the check (step "check"), asked on every
              path that reached it, before anything is timed"""
    from ..core.errors import one_line, reraise_if_terminated
    be = resolve(point.backend)
    prob = point.problem
    c = Checked(point, be, threshold=THRESHOLDS[prob.dtype])
    status, why = gate(be, prob, device)
    table = point.table
    if status == "ok" and table is None and be.tunable and point.config != "default":
        from ..core.environment import device_name as name_of
        from ..storage.configs import config_for
        try:
            table, why = config_for(be.name, point.config, prob, device_name or name_of(device))
        except Exception as exc:  # noqa: BLE001 - an unreadable file is this point's row
            reraise_if_terminated(exc)
            table, why = None, f"--config {point.config}: {one_line(exc)}"
        status = "unsupported" if why else "ok"
    if status == "ok":
        try:
            c.fn = fn if fn is not None else _prepared(be, point, table, weights, cache, build)
            c.facts.update(getattr(c.fn, "row_facts", None) or {})  # its config file, version
            launch = getattr(c.fn, "launch_config", None)  # what each GEMM launches with
            if callable(launch):
                c.facts["launch_config"] = json.dumps(launch(prob.tokens), sort_keys=True)
            if point.glue:  # what ran: naive where fused cannot here
                g = getattr(c.fn, "glue", None)
                c.facts["glue_used"] = getattr(c.fn, "glue_used", point.glue)
                c.facts["glue_notes"] = "; ".join(f"{k}: {v}" for k, v in
                                                  (getattr(g, "notes", None) or {}).items())
        except Exception as exc:  # a failing backend is a row, not a crash
            reraise_if_terminated(exc)
            status, why = classify_exception(exc), one_line(exc)
    if agree is not None:
        status, why = agree("setup", status, why, c)
    if status != "ok":
        c.status, c.error = status, why
        return c
    try:
        out, want = output(c.fn) if output is not None else (c.fn(*inputs.args()), ref)
        if str(device).startswith("cuda"):
            import torch
            torch.cuda.synchronize()
        c.max_rel_err = rel_err(out, want)
        c.status, c.error = within_limit(c.max_rel_err, prob.dtype)
    except Exception as exc:
        reraise_if_terminated(exc)
        c.status, c.error = classify_exception(exc), one_line(exc)
    if agree is not None:
        c.status, c.error = agree("check", c.status, c.error, c)
    return c


def _prepared(be, point: Point, table, weights, cache, build):
    key = (be.name, point.config, point.glue)
    if cache is not None and key in cache:
        return cache[key]
    kw = dict(config=table) if be.tunable and table is not None else {}
    if point.glue:
        kw["glue"] = point.glue
    fn = build(be, kw) if build is not None else be.prepare(point.problem, weights, **kw)
    if cache is not None:
        cache[key] = fn
    return fn


# --- the one timing of a point ---------------------------------------------------------------

class Unsupported(Exception):
    """This mode cannot be timed here: its row is `unsupported`, str(exc) says why."""


@dataclass
class Timed:
    """One mode of a checked point: status and error, the timer's Timing (None unless ok)
    and what the path's `then` hook returned (`extra`)."""
    mode: Any
    status: str = "ok"
    error: str = ""
    timing: Any = None
    extra: Any = None
    exc: BaseException | None = None  # what stopped it (a path may handle it its own way)


def capture_refusal(c: Checked, kind: str, device: str, fn=None) -> str:
    """Why a graph of this point is not even tried on a GPU, or "": the `not_capturable`
    rule, written once (the backend's, or that of the object whose method is timed)."""
    if kind != "graph" or not str(device).startswith("cuda"):
        return ""
    owner = getattr(fn, "__self__", fn)
    return c.backend.not_capturable or getattr(owner, "not_capturable", None) or ""


def time_modes(c: Checked, modes, device: str, fn, arg_sets, *, limit_s=None, refuse=None,
               then: Callable | None = None, each: Callable | None = None,
               **timer_kw) -> list[Timed]:
    """The timing loop over modes, written once: per mode (a Mode or its name) the path's
    `refuse(c, mode)` (why not here, or "") and the capture rule, then timing.time_fn(kind,
    fn, arg_sets) within `limit_s`, then `then(c, mode, timing)` (what a path times after:
    a rank's synchronised loops), and `each(timed)`. A failure is the mode's status, never
    a raise (a kill is re-raised)."""
    from ..core.errors import PointTimeout, one_line, reraise_if_terminated, time_limit
    from .timing import CaptureError, time_fn
    out = []
    for mode in modes:
        kind = getattr(mode, "kind", mode)
        t = Timed(mode)
        try:
            with time_limit(limit_s):
                why = refuse(c, mode) if refuse is not None else ""
                if why:
                    raise Unsupported(why)
                why = capture_refusal(c, kind, device, fn)
                if why:
                    raise CaptureError(why)
                t.timing = time_fn(kind, fn, arg_sets, device, **timer_kw)
                if then is not None:
                    t.extra = then(c, mode, t.timing)
        except Exception as exc:
            reraise_if_terminated(exc)
            t.exc, t.timing, t.extra = exc, None, None  # a mode that failed has no time
            t.status, t.error = (
                ("unsupported", f"graph capture: {exc}") if isinstance(exc, CaptureError) else
                ("unsupported", str(exc)) if isinstance(exc, Unsupported) else
                ("timeout", str(exc)) if isinstance(exc, PointTimeout) else
                (classify_exception(exc), one_line(exc)))
        if each is not None:
            each(t)
        out.append(t)
    return out


def measure_point(point: Point, weights, device: str, *, modes, limit_s=None,
                  timed: Callable | None = None, before: Callable | None = None,
                  refuse=None, then: Callable | None = None, each: Callable | None = None,
                  timer_kw: dict | None = None, **check_kw) -> Checked:
    """The one measuring function: gate, configuration, prepare, check (check_point, in
    `limit_s`), then only for a point that passed `before(c)` (the sweep's profiler) and
    every mode timed (time_modes, each in `limit_s`) into Checked.timed. `timed(c)` ->
    (fn, arg_sets) is what is timed (default c.fn on check_kw's `inputs`)."""
    from ..core.errors import one_line, reraise_if_terminated, time_limit
    try:
        with time_limit(limit_s):
            c = check_point(point, weights, device, **check_kw)
    except Exception as exc:  # the point's time limit struck between its steps
        reraise_if_terminated(exc)
        return Checked(point, resolve(point.backend), status=classify_exception(exc),
                       error=one_line(exc), threshold=THRESHOLDS[point.problem.dtype])
    if not c.ok:
        return c
    if before is not None:
        before(c)
    fn, arg_sets = timed(c) if timed is not None else (c.fn, [check_kw["inputs"].args()])
    c.timed = time_modes(c, modes, device, fn, arg_sets, limit_s=limit_s, refuse=refuse,
                         then=then, each=each, **(timer_kw or {}))
    return c
