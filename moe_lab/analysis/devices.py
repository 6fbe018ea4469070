"""Several devices in one figure: the same MoE shapes measured on different GPUs (the H200
by moe-lab, AMD Instinct GPUs by aiter's own tuner, imported), in absolute time and in %
of each device's own roof. Every series says where its numbers come from."""
from __future__ import annotations
import pandas as pd
from ..core.constants import TP_DEFAULT
from ..core.devices import ceilings_for
from ..cost.roofline import add_roofline_columns
from ..storage.store import open_run
from ..storage.rows import ok_rows
from .runs import SEED_SHAPES, _imported, imported_runs, richest_run  # noqa: F401
from ..core.validate import frames


# the H200 series worth drawing beside AMD's: the best of what moe-lab measured
H200_SERIES = (("aiter-triton", "tuned"), ("aiter-triton", "default"), ("torch-grouped", "default"))


def _source(run) -> str:
    return "aiter's tuner, imported" if _imported(run) else "measured by moe-lab"


def rows_for(runs, models=SEED_SHAPES["models"], tp=SEED_SHAPES["tp"], ep=SEED_SHAPES["ep"],
             dtype=SEED_SHAPES["dtype"], mode=SEED_SHAPES["mode"]) -> pd.DataFrame:
    """ok rows of `models` at one sharding from each run, with the roofline recomputed
    against each row's own device (measured ceilings where committed, else the vendor's)
    and a `series` label naming device, backend, configuration and source."""
    out = []
    for run in (open_run(r) for r in runs):
        r = ok_rows(run.results)
        sel = r[r["model"].isin(list(models)) & (r["tp"] == tp) & (r["ep"] == ep)
                & (r["dtype"] == dtype)]
        if "mode" in sel and (sel["mode"] == mode).any():
            sel = sel[sel["mode"] == mode]
        if "act_type" in sel:  # aiter's tables: the seed models' SiLU, weight after stage 2
            sel = sel[sel["act_type"].astype(str).str.endswith("Silu")
                      & (sel["doweight_stage1"].astype(int) == 0)]
        if "config" in sel:
            keep = [(b, c) for b, c in H200_SERIES]
            pairs = list(zip(sel["backend"], sel["config"].fillna("default")))
            if any(p in keep for p in pairs):
                sel = sel[[p in keep for p in pairs]]
        for dev, g in sel.groupby("device"):
            try:
                g = add_roofline_columns(g.drop(columns=["pct_of_roof", "roof_us"],
                                                errors="ignore"), dev)
            except Exception:  # a device with no spec: time only
                g = g.assign(pct_of_roof=float("nan"))
            cfg = (g["config"].fillna("default") if "config" in g  # one per row: a bare
                   else pd.Series("default", index=g.index))  # str zipped as its letters
            g = g.assign(series=[f"{dev.split(' (')[0]}: {b}"
                                 + ("" if c == "default" or str(c).startswith("aiter-tuned")
                                    else f" [{c}]")
                                 + f" ({_source(run)})"
                                 for b, c in zip(g["backend"], cfg if len(g) else [])],
                         run_id=run.run_id)
            out.append(g)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


@frames(rows=("model", "tp", "ep", "tokens", "median_us", "device", "roof_us",
        "pct_of_roof", "series"))
def floors_against_aiter(rows: pd.DataFrame) -> pd.DataFrame:
    """Per AMD row: the roofline floor on its device beside aiter's reported time, and
    how far the model is from AMD's measurement (reported / floor)."""
    amd = rows[rows["series"].str.contains("imported")] if len(rows) else rows
    if amd.empty:
        return pd.DataFrame()
    out = amd[["model", "tp", "ep", "device", "tokens", "median_us", "roof_us",
               "pct_of_roof"]].copy()
    out["reported_over_floor"] = out["median_us"] / out["roof_us"]
    out["ceilings"] = [_ceiling_source(d) for d in out["device"]]
    return out.sort_values(["model", "device", "tokens"]).reset_index(drop=True)


def _ceiling_source(device: str) -> str:
    try:
        return ceilings_for(device).source
    except Exception:  # no spec for this GPU: it has no roof
        return "none (no spec for this GPU)"


def measured_devices(rows: pd.DataFrame) -> str:
    """The devices of the rows moe-lab measured (not imported), short ('NVIDIA H200' ->
    'H200'), '/'-joined: what the side-by-side figure and its summary call them."""
    own = rows[~rows["series"].str.contains("imported")] if len(rows) else rows
    names = sorted({str(d).split(" (")[0].removeprefix("NVIDIA ").removeprefix("AMD ")
                    for d in (own["device"] if len(own) else [])})
    return "/".join(names) or "no GPU"


@frames(rows=("device", "series"))
def summary(rows: pd.DataFrame) -> str:
    """One line: how many rows of each source the side-by-side figure draws."""
    amd = rows["series"].str.contains("imported") if len(rows) else pd.Series(dtype=bool)
    return (f"side by side: {int((~amd).sum())} {measured_devices(rows)} rows measured by moe-lab, "
            f"{int(amd.sum())} AMD rows from aiter's tuner "
            f"({', '.join(sorted(rows.loc[amd, 'device'].unique())) if amd.any() else 'none'})")


def claim_shapes(run, model: str = "deepseek-r1", tp: int = TP_DEFAULT) -> pd.DataFrame:
    """Rows of an imported table per sharding of one model: the seed claims are about
    DeepSeek-R1 TP8 EP8, which aiter's shipped table may not have."""
    r = open_run(run).results
    r = r[(r["model"] == model) & (r["tp"] == tp)]
    return (r.groupby(["ep", "device", "dtype", "status"]).size().rename("rows").reset_index()
            if len(r) else pd.DataFrame(columns=["ep", "device", "dtype", "status", "rows"]))
