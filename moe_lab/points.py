"""A point's one path to its row: gate, prepare, check, time, row.

    status, why = gate(backend, problem, device)       # can it run here at all?
    row = new_row(key, git_commit=..., device=...)     # every declared column at its default
    finish(row, timing=t, problem=p, topk_ids=ids, device="cuda")  # timer, metrics, roof, id

The sweep, compile sweeps, distributed ranks, tune and the aiter import build their rows
with `new_row` and close them with `finish`; none copies timer fields or computes the
roofline itself. A new per-point metric is a `Column` in moe_lab.rows and one line in
`fill_metrics`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .rows import ID_FIELDS, OPTIONAL_ID_FIELDS, defaults, validate
from .store import point_id

IDENTITY = frozenset(ID_FIELDS + OPTIONAL_ID_FIELDS)


def gate(backend, problem, device) -> tuple[str, str]:
    """("ok", "") when `backend` can run `problem` on `device`, else (status, why):
    `unavailable` (not installed, no GPU) or `unsupported` (the shape, the device or
    the dtype scheme). The one place this is asked."""
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
    return "ok", ""


def new_row(key: dict, *, git_commit=None, device=None, measured_at=None, **kw) -> dict:
    """A row: every core column at its declared default, then the point's key, its
    provenance (commit, device, time: now when not given) and `kw`."""
    from .core.environment import now_iso
    row = defaults()
    row.update(key)
    row.update(git_commit=git_commit, device=device, measured_at=measured_at or now_iso())
    row.update(kw)
    return row


def timing_fields(t) -> dict:
    """What a moe_lab.timing.Timing puts on a row (the one copy of the timer's numbers)."""
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
    are declared in moe_lab.rows)."""
    if m.timing is not None:
        row.update(timing_fields(m.timing))


def roofline_fields(problem, topk_ids, device: str) -> dict:
    """flops, bytes, roof_us, ceiling_source of a point on a GPU (the measured ceilings
    of the device); {} on a CPU (the workbook's floors are for GPUs). The one place the
    layer roof of a measured row is computed."""
    if not str(device).startswith("cuda"):
        return {}
    import torch
    from .core.devices import ceilings_for
    from .roofline import cost, floor_us
    ceil = ceilings_for(torch.cuda.get_device_name())
    c = cost(problem, ids=topk_ids.cpu() if topk_ids is not None else None)
    return dict(flops=float(c.flops), bytes=float(c.bytes), roof_us=floor_us(c, ceil, problem.dtype),
                ceiling_source=ceil.source)


def finish(row: dict, *, timing=None, problem=None, topk_ids=None, device: str = "cpu") -> dict:
    """Close a row: the timer's numbers, the metrics, the roofline (GPU rows of a problem),
    pct_of_roof, point_id; validated against moe_lab.rows. Returns the row."""
    fill_metrics(row, Measured(timing, problem))
    if problem is not None and str(device).startswith("cuda") and "roof_us" not in _set(row):
        try:
            row.update(roofline_fields(problem, topk_ids, device))
        except Exception as exc:  # annotation: never lose a measurement for it
            from .core.errors import one_line
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
