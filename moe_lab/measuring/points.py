"""A point's one path to its row: gate, prepare, check, time, row.

    status, why = gate(backend, problem, device)       # can it run here at all?
    row = new_row(key, git_commit=..., device=...)     # every declared column at its default
    finish(row, timing=t, problem=p, topk_ids=ids, device="cuda")  # timer, metrics, roof, id

The sweep, compile sweeps, distributed ranks, tune and the aiter import build their rows
with `new_row` and close them with `finish`; none copies timer fields or computes the
roofline itself. A new per-point metric is a `Column` in moe_lab.storage.rows and one line in
`fill_metrics`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..storage.rows import ID_FIELDS, OPTIONAL_ID_FIELDS, defaults, validate
from ..storage.store import point_id

IDENTITY = frozenset(ID_FIELDS + OPTIONAL_ID_FIELDS)


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
