"""Roofline figures and tables, for notebooks/03_roofline.ipynb.

The computation is moe_lab.cost.roofline's (add_roofline_columns for measured rows,
predicted_floors for predictions); this module draws it. Every figure has one legend and
the provenance footer: device (and whether its ceilings were measured), dtype, models,
run id and the commits of the rows drawn; predictions name no run and no commit."""
from __future__ import annotations
import pandas as pd
from ..core.devices import Ceilings, ceilings_for
from ..core.problems import sharding_name
from ..cost.roofline import add_roofline_columns
from ..storage.store import open_run
from ..storage.rows import ok_rows
from ..storage.checked import FRAME, RUN, TEXT, columns, takes





@takes(run=RUN, device=TEXT | None)
def measured(run, device: str | None = None) -> tuple[pd.DataFrame, Ceilings]:
    """(the run's ok rows with the roofline columns recomputed, the ceilings used). device:
    a torch device name or a DEVICE_SPECS key; default the run's device (its measured
    ceilings when data/ceilings has them). UsageError when neither is known."""
    run = open_run(run)
    device = device or run.device
    ceil = ceilings_for(device)
    return add_roofline_columns(ok_rows(run.results), device), ceil


@takes(df=FRAME & columns(lambda a: ("model", "tp", "ep", "backend", "tokens", a["values"])),
       values=TEXT)
def pct_of_roof_table(df: pd.DataFrame, values: str = "pct_of_roof") -> pd.DataFrame:
    """% of roof (median over repeats/ranks), rows model x sharding x tokens, columns
    backend (x mode when there are several). Needs the roofline columns (measured())."""
    d = ok_rows(df).copy()
    d["sharding"] = [sharding_name(t, e) for t, e in zip(d["tp"], d["ep"])]
    cols = ["backend"] + (["mode"] if "mode" in d.columns and d["mode"].nunique() > 1 else [])
    return d.pivot_table(index=["model", "sharding", "tokens"], columns=cols, values=values,
                         aggfunc="median").round(1)


@takes(df=columns("model", "tp", "ep", "backend", "mode", "tokens", "median_us", "roof_us",
       "pct_of_roof"))
def best_pct_of_roof(df: pd.DataFrame) -> str:
    """One line: the point closest to its roof (highest pct_of_roof)."""
    d = ok_rows(df)
    d = d[d["pct_of_roof"].notna()]
    if d.empty:
        return "highest pct_of_roof: none (no ok row with a roof)"
    r = d.loc[d["pct_of_roof"].idxmax()]
    return (f"highest pct_of_roof: {r['pct_of_roof']:.4g}% ({r['backend']} {r['mode']}, "
            f"{r['model']} {sharding_name(r['tp'], r['ep'])}, {int(r['tokens'])} "
            f"tokens, {r['median_us']:.4g} us against a {r['roof_us']:.4g} us roof); median "
            f"over {len(d)} rows: {d['pct_of_roof'].median():.4g}%")
