"""The tuned layer's % of roof from 256 tokens (issue 38's third target: per model, where it
stands and what holds it back), over tuned.current_pairs' points.

    roof_from(pairs, ledger_df, tokens=256)  per shape: the % of roof from `tokens` up
                                             (median, lowest and where), the floors at the
                                             lowest point and the point nearest the ridge,
                                             and the GEMM the ledger says holds it back
                                             (and how near its own floor it runs there)
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..targets import NO_KERNELS
from ...storage.checked import columns, takes

FROM_TOKENS = 256  # the token count from which the tuned layer's % of roof is read (issue 38)


@takes("tuned.roof_from", pairs=columns("backend", "model", "sharding", "dtype", "tokens",
       "pct_of_roof", "point_id", "tuned_us"), ledger_df=columns("point_id", "phase", "measured_us",
       "floor_us", "over_us") | None)
def roof_from(pairs: pd.DataFrame, ledger_df: pd.DataFrame | None, tokens: int = FROM_TOKENS,
              missing: str = NO_KERNELS) -> pd.DataFrame:
    """Per backend, model, sharding and dtype: the tuned layer's % of roof from `tokens`
    up (median, lowest and where; at the lowest, which floor sets the roof and the other as
    % of it, _floors; the bounds from the fewest tokens to the most, e.g. 'memory to
    compute'; the point nearest the ridge: the other floor the closest), and the GEMM that
    holds it back: of gemm1 and gemm2,
    the one with the most time above its floor over those points (the ledger's over_us),
    with that time's share of the layer's and, at the lowest point, its floor as % of its
    measured time (NO_KERNELS: the ledger has no GEMM row of them; '': neither GEMM is
    above its floor)."""
    p = pairs[pairs["tokens"] >= tokens]
    rows, ceils = [], {}  # the ceilings of each device, read once per call
    led = ledger_df if ledger_df is not None and len(ledger_df) else None
    for (b, m, s, dt), g in p.groupby(["backend", "model", "sharding", "dtype"]):
        roof = pd.to_numeric(g["pct_of_roof"], errors="coerce")
        low = g.loc[roof.idxmin()] if roof.notna().any() else None
        by_tokens = g.sort_values("tokens")
        fl = pd.DataFrame([_floors(x, ceils) for x in by_tokens.to_dict("records")],
                          index=by_tokens.index, columns=["bound", "other"])
        other, bounds = fl["other"], list(dict.fromkeys(b for b in fl["bound"] if b))
        over, gemm, at_low = {}, missing, np.nan
        if led is not None:
            lg_ = led[led["point_id"].isin(g["point_id"]) & led["phase"].isin(["gemm1", "gemm2"])]
            over = lg_.groupby("phase")["over_us"].sum().to_dict()
        if over:  # the GEMM with the most time above its floor; '' when neither is above
            gemm = max(over, key=over.get) if max(over.values()) > 0 else ""
            here = lg_[(lg_["phase"] == gemm) & (lg_["point_id"] == low["point_id"])] \
                if low is not None else lg_.iloc[:0]
            if len(here) and here["measured_us"].iloc[0] > 0:  # its floor / its time there
                at_low = 100 * here["floor_us"].iloc[0] / here["measured_us"].iloc[0]
        rows.append(dict(backend=b, model=m, sharding=s, dtype=dt, points=len(g),
                         tokens=f"{int(g['tokens'].min())}-{int(g['tokens'].max())}",
                         median_pct_of_roof=roof.median(), lowest_pct_of_roof=roof.min(),
                         lowest_at=int(low["tokens"]) if low is not None else np.nan,
                         **dict(zip(("bound_at_lowest", "other_floor_pct"),
                                    fl.loc[low.name] if low is not None else ("", np.nan))),
                         bounds=" to ".join(bounds),
                         nearest_ridge_at=(int(g.loc[other.idxmax(), "tokens"])
                                           if other.notna().any() else np.nan),
                         held_back_by=gemm,
                         gemm_over_us=over.get(gemm, np.nan),
                         share_of_layer=(100 * over[gemm] / g["tuned_us"].sum()
                                         if gemm in over else np.nan),
                         gemm_pct_of_floor_at_lowest=at_low))
    return pd.DataFrame(rows)


def _floors(row, ceils: dict) -> tuple[str, float]:
    """At a tuned point: which floor sets its roof (roofline.bound: 'compute', FLOPs at the
    matrix peak, or 'memory', bytes at the roof bandwidth, by its device's ceilings; the
    floors roofline.floor_us takes the larger of), and the other floor as % of it (100 at
    the ridge, where a kernel must keep both busy at once to reach the roof); ('', NaN)
    where the row lacks its FLOPs, bytes or device. `ceils`: {device: ceilings} read so far."""
    from ...core.devices import ceilings_for
    from ...core.errors import UsageError
    from ...cost.roofline import Cost, bound, compute_us, memory_us
    try:
        dev, dtype = str(row["device"]), str(row["dtype"])
        ceil = ceils[dev] if dev in ceils else ceils.setdefault(dev, ceilings_for(dev))
        c = Cost(flops=float(row["flops"]), bytes=float(row["bytes"]), weight_bytes=0.0,
                 act_bytes=0.0, inter_bytes=0.0, experts_hit=0.0)
        compute, memory = compute_us(c, ceil, dtype), memory_us(c, ceil)
    except (KeyError, TypeError, ValueError, UsageError):
        return "", np.nan
    if not (compute > 0 and memory > 0):
        return "", np.nan
    return bound(c, ceil, dtype), 100 * min(compute, memory) / max(compute, memory)

