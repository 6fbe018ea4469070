"""Several devices in one figure: the same MoE shapes measured on different GPUs (by
moe-lab on each GPU it ran on, AMD Instinct GPUs by aiter's own tuner, imported), in
absolute time and in % of each device's own roof. Every series says where its numbers
come from; no device is named in the code: the data says which there are.

    rows_for(runs, ...)        one sharding's rows of the given runs, each with a series
                               label (notebook 01's AMD-beside-the-GPU figure, the review)
    device_runs(runs=None)     the runs the side by side reads: the GPU runs moe-lab
                               measured and the imported tables (not marked running/failed)
    shape_rows(runs)           every candidate row of the seed shapes (SEED_DEVICE_SHAPES):
                               graph rows of the default glue on a GPU, AMD's imported rows
    newest_series(rows)        per shape, device, backend and configuration: the rows of its
                               newest run, roofline recomputed on that row's own device
    tuned_over_default(rows)   per shape, device, backend and token count: default_us /
                               tuned_us of the newest run holding both
    side_by_side(rows)         per shape x device x token count: the device's best
                               configuration (one per shape and device), its time and % of
                               roof, the fastest at that count, and tuned over default
    per_shape(table)           the table split per seed shape, in SEED_DEVICE_SHAPES' order
    coverage(table)            one line: per device, the seed shapes it has and its source
"""
from __future__ import annotations
import numpy as np
import pandas as pd
from ..core.constants import SEED_SWEEP_TOKENS, TP_DEFAULT
from ..core.devices import ceilings_for
from ..core.errors import UsageError
from ..core.problems import sharding_name
from ..cost.roofline import add_roofline_columns
from ..storage.store import open_run
from ..storage.rows import deployed_rows, ok_rows
from .runs import (  # noqa: F401
    SEED_SHAPES, _imported, default_runs, imported_runs, on_gpu, richest_run)
from .metrics import geomean
from .tuned import COMPARED, LLAMA4
from ..storage.checked import MODE, NAMES, RUN, RUNS, SHAPES, TEXT, TP, columns, frame, takes


# the series of moe-lab's rows worth drawing beside AMD's, on any GPU: the best of what it measured
MEASURED_SERIES = (("aiter-triton", "tuned"), ("aiter-triton", "default"),
                   ("torch-grouped", "default"))
# the seed shapes (model, tp, ep, dtype) every GPU is compared on: the vLLM comparison's
# shapes and schemes (analysis.tuned: issue 63's, the H200's h200-vllm-* runs)
SEED_DEVICE_SHAPES = tuple([(m, TP_DEFAULT, ep, dt) for m, ep, dt in COMPARED]
                           + [(m, TP_DEFAULT, 1, "fp8-channel") for m in LLAMA4])
SHAPE = ["model", "tp", "ep", "dtype"]
SERIES = SHAPE + ["device", "backend", "config"]
MEASURED, IMPORTED = "measured by moe-lab", "aiter's tuner, imported"


def _source(run) -> str:
    return IMPORTED if _imported(run) else MEASURED


def short_device(name) -> str:
    """'NVIDIA H200' -> 'H200', 'AMD Instinct MI355X (256 CUs; ...)' -> 'Instinct MI355X':
    what figures call a device."""
    return str(name).split(" (")[0].removeprefix("NVIDIA ").removeprefix("AMD ")


@takes(runs=RUNS, models=NAMES, tp=TP, ep=TP, dtype=TEXT, mode=MODE)
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
            keep = [(b, c) for b, c in MEASURED_SERIES]
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


@takes(rows=columns("model", "tp", "ep", "tokens", "median_us", "device", "roof_us", "pct_of_roof",
       "series"))
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


@takes(rows=frame("series", "device"))
def measured_devices(rows: pd.DataFrame) -> str:
    """The devices of the rows moe-lab measured (not imported), short ('NVIDIA H200' ->
    'H200'), '/'-joined: what the side-by-side figure and its summary call them."""
    own = rows[~rows["series"].str.contains("imported")] if len(rows) else rows
    names = sorted({short_device(d) for d in (own["device"] if len(own) else [])})
    return "/".join(names) or "no GPU"


@takes(rows=columns("device", "series"))
def summary(rows: pd.DataFrame) -> str:
    """One line: how many rows of each source the side-by-side figure draws."""
    amd = rows["series"].str.contains("imported") if len(rows) else pd.Series(dtype=bool)
    return (f"side by side: {int((~amd).sum())} {measured_devices(rows)} rows measured by moe-lab, "
            f"{int(amd.sum())} AMD rows from aiter's tuner "
            f"({', '.join(sorted(rows.loc[amd, 'device'].unique())) if amd.any() else 'none'})")


@takes(run=RUN, model=TEXT, tp=TP)
def claim_shapes(run, model: str = "deepseek-r1", tp: int = TP_DEFAULT) -> pd.DataFrame:
    """Rows of an imported table per sharding of one model: the seed claims are about
    DeepSeek-R1 TP8 EP8, which aiter's shipped table may not have."""
    r = open_run(run).results
    r = r[(r["model"] == model) & (r["tp"] == tp)]
    return (r.groupby(["ep", "device", "dtype", "status"]).size().rename("rows").reset_index()
            if len(r) else pd.DataFrame(columns=["ep", "device", "dtype", "status", "rows"]))


# --- the seed shapes on every device (issue 63 item 4) ---------------------------------------

@takes(runs=RUNS)
def device_runs(runs=None) -> list:
    """The runs the side by side reads: `runs` (ids, folders or Runs) opened as given, else
    every run under the data folder not marked running or failed that was measured on a
    GPU by moe-lab or imported from aiter's tables (runs.default_runs: newest first)."""
    if runs is not None:
        return [open_run(r) for r in ([runs] if isinstance(runs, str) else runs)]
    return [r for r in default_runs() if _imported(r) or on_gpu(r)]


def _candidates(run, shapes) -> pd.DataFrame:
    """One run's rows of `shapes`: ok graph rows of the default glue and uniform routing of
    a GPU run, or an imported table's ok rows of the seed models' activation (SiLU, weight
    after stage 2); empty for a CPU run."""
    if _imported(run):
        r = ok_rows(run.results)
        if "act_type" in r:
            r = r[r["act_type"].astype(str).str.endswith("Silu")
                  & (r["doweight_stage1"].astype(int) == 0)]
    elif on_gpu(run):
        r = deployed_rows(run.results, "graph")
        if "routing" in r:  # the seed sweeps' routing; a skewed one is another question
            r = r[r["routing"].fillna("uniform").astype(str) == "uniform"]
    else:
        return pd.DataFrame()
    if r.empty or not set(SHAPE) <= set(r.columns):
        return pd.DataFrame()
    keys = set(shapes)
    tp, ep = (pd.to_numeric(r[c], errors="coerce") for c in ("tp", "ep"))  # NaN: a rank shape
    r = r[[(m, t, e, d) in keys for m, t, e, d in zip(r["model"], tp, ep, r["dtype"])]]
    cfg = r["config"].fillna("default").astype(str) if "config" in r else "default"
    return r.assign(config=cfg, run_id=run.run_id, source=_source(run),
                    started=str(run.manifest.get("started") or ""))


@takes(runs=RUNS, shapes=SHAPES)
def shape_rows(runs=None, shapes=SEED_DEVICE_SHAPES) -> pd.DataFrame:
    """Every candidate row of `shapes` ((model, tp, ep, dtype) each) in device_runs(runs):
    each with run_id, source (MEASURED or IMPORTED), the run's `started` and its sharding;
    a point a run measured twice: its last row. Empty when no run has one."""
    parts = [_candidates(r, shapes) for r in device_runs(runs)]
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=SERIES + ["tokens", "median_us", "run_id", "source",
                                              "started", "sharding"])
    out = pd.concat(parts, ignore_index=True)
    out["tp"], out["ep"] = out["tp"].astype(int), out["ep"].astype(int)
    order = ["measured_at"] if "measured_at" in out else []
    out = out.sort_values(order, kind="stable").drop_duplicates(
        SERIES + ["run_id", "tokens"], keep="last")
    out["sharding"] = [sharding_name(t, e) for t, e in zip(out["tp"], out["ep"])]
    return out.reset_index(drop=True)


def _with_roof(g: pd.DataFrame, device: str) -> pd.DataFrame:
    """g with roof_us, pct_of_roof, ceiling_source and roof_basis on `device`'s own ceilings
    (measured where committed, else its vendor's); NaN and 'none' for a GPU with no spec."""
    g = g.drop(columns=["pct_of_roof", "roof_us", "ceiling_source", "roof_basis"],
               errors="ignore")
    try:
        return add_roofline_columns(g, device)
    except UsageError:
        return g.assign(roof_us=np.nan, pct_of_roof=np.nan, ceiling_source="none (no spec)",
                        roof_basis="")


@takes(rows=columns(*SERIES, "tokens", "median_us", "run_id", "started"))
def newest_series(rows: pd.DataFrame) -> pd.DataFrame:
    """Per shape, device, backend and configuration: the rows of its newest run (by the
    manifest's `started`, then the id), the roofline recomputed on each row's own device.
    A series is one device, one configuration and one run."""
    if rows.empty:
        return rows.assign(roof_us=np.nan, pct_of_roof=np.nan)
    newest = rows.sort_values(["started", "run_id"]).groupby(SERIES)["run_id"].last()
    keep = rows.merge(newest.rename("newest").reset_index(), on=SERIES)
    keep = keep[keep["run_id"] == keep["newest"]].drop(columns="newest")
    out = [_with_roof(g, dev) for dev, g in keep.groupby("device", sort=True)]
    return pd.concat(out, ignore_index=True).sort_values(SERIES + ["tokens"]).reset_index(drop=True)


def _best_config(g: pd.DataFrame) -> tuple[str, str]:
    """(backend, config) of one shape and device's series: of those covering the most seed
    token counts (SEED_SWEEP_TOKENS; any count where none has one), the lowest geometric
    mean time over the counts they all share."""
    seed = g[g["tokens"].isin(SEED_SWEEP_TOKENS)]
    g = seed if len(seed) else g
    toks = g.groupby(["backend", "config"])["tokens"].agg(frozenset)
    top = toks[toks.map(len) == toks.map(len).max()]
    common = frozenset.intersection(*top)
    sub = g[g["tokens"].isin(common) & g.set_index(["backend", "config"]).index.isin(top.index)]
    return sub.groupby(["backend", "config"])["median_us"].agg(geomean).idxmin()


PAIR_COLUMNS = SHAPE + ["sharding", "device", "backend", "tokens", "pair_run_id", "default_us",
                        "tuned_us", "tuned_over_default"]


@takes(rows=columns(*SERIES, "tokens", "median_us", "run_id", "started", "sharding"))
def tuned_over_default(rows: pd.DataFrame) -> pd.DataFrame:
    """Per shape, device, backend and token count: default_us and tuned_us of the backend
    from the newest run holding both configurations of it (pair_run_id; never one from
    each of two runs), and tuned_over_default = default_us / tuned_us (> 1: tuned faster).
    Empty (PAIR_COLUMNS) when no run holds both."""
    r = rows[rows["config"].isin(["default", "tuned"])] if len(rows) else rows
    out = []
    for key, g in r.groupby(SHAPE + ["sharding", "device", "backend"], sort=True):
        both = g.groupby("run_id")["config"].nunique()
        both = both[both == 2].index
        if not len(both):
            continue
        run = g[g["run_id"].isin(both)].sort_values(["started", "run_id"])["run_id"].iloc[-1]
        g = g[g["run_id"] == run]
        d = g[g["config"] == "default"].set_index("tokens")["median_us"]
        t = g[g["config"] == "tuned"].set_index("tokens")["median_us"]
        p = pd.DataFrame({"default_us": d, "tuned_us": t}).dropna().reset_index()
        out.append(p.assign(**dict(zip(SHAPE + ["sharding", "device", "backend"], key)),
                            pair_run_id=run))
    if not out:
        return pd.DataFrame(columns=PAIR_COLUMNS)
    t = pd.concat(out, ignore_index=True)
    t["tuned_over_default"] = t["default_us"] / t["tuned_us"]
    t = t[PAIR_COLUMNS].sort_values(SHAPE + ["device", "backend", "tokens"])
    return t.reset_index(drop=True)


SIDE_COLUMNS = SHAPE + ["sharding", "device", "source", "backend", "config", "run_id", "tokens",
                        "median_us", "roof_us", "pct_of_roof", "ceiling_source", "roof_basis",
                        "fastest", "fastest_us", "tuned_backend", "pair_run_id", "default_us",
                        "tuned_us", "tuned_over_default", "git_commit"]


def _pair_backend(pairs: pd.DataFrame, chosen: str) -> str | None:
    """The backend whose tuned over default a shape and device's rows carry: the chosen
    configuration's backend where a run holds both of it, else the backend whose tuned
    time has the lowest geometric mean; None when there is none."""
    if pairs.empty:
        return None
    if (pairs["backend"] == chosen).any():
        return chosen
    return pairs.groupby("backend")["tuned_us"].agg(geomean).idxmin()


@takes(rows=columns(*SERIES, "tokens", "median_us", "run_id", "started", "sharding"))
def side_by_side(rows: pd.DataFrame) -> pd.DataFrame:
    """Per seed shape x device x token count (SIDE_COLUMNS): the device's best
    configuration (one per shape and device, _best_config: a series never mixes
    configurations) from its newest run: median_us, roof_us and pct_of_roof on that
    device's own ceilings; `fastest` the fastest configuration at that count
    ('backend config', newest runs) and its time; tuned over default of `tuned_backend`
    (the best one's backend where a run holds both configurations, tuned_over_default).
    Empty when `rows` has none."""
    series, pairs = newest_series(rows), tuned_over_default(rows)
    if series.empty:
        return pd.DataFrame(columns=SIDE_COLUMNS)
    out, by = [], SHAPE + ["device"]
    pair_of = {k: p for k, p in pairs.groupby(by)} if len(pairs) else {}
    for key, g in series.groupby(by, sort=True):
        backend, config = _best_config(g)
        best = g[(g["backend"] == backend) & (g["config"] == config)].copy()
        fast = g.sort_values("median_us").drop_duplicates("tokens").set_index("tokens")
        best["fastest"] = best["tokens"].map(fast["backend"] + " " + fast["config"])
        best["fastest_us"] = best["tokens"].map(fast["median_us"])
        p = pair_of.get(key, pd.DataFrame(columns=PAIR_COLUMNS))
        tb = _pair_backend(p, backend)
        p = p[p["backend"] == tb][["tokens", "pair_run_id", "default_us", "tuned_us",
                                   "tuned_over_default"]]
        out.append(best.merge(p, on="tokens", how="left").assign(tuned_backend=tb))
    t = pd.concat(out, ignore_index=True)
    if "git_commit" not in t:
        t["git_commit"] = None
    return t[SIDE_COLUMNS].sort_values(SHAPE + ["device", "tokens"]).reset_index(drop=True)


@takes(table=frame("model", "tp", "ep", "dtype"), shapes=SHAPES)
def per_shape(table: pd.DataFrame, shapes=SEED_DEVICE_SHAPES) -> list[pd.DataFrame]:
    """The table's rows per shape, in `shapes`' order (a shape with no row: none)."""
    out = []
    for m, tp, ep, dt in shapes:
        t = table[(table["model"] == m) & (table["tp"] == tp) & (table["ep"] == ep)
                  & (table["dtype"] == dt)]
        if len(t):
            out.append(t.reset_index(drop=True))
    return out


@takes(shapes=SHAPES, table=columns("model", "tp", "ep", "dtype", "device", "source", "run_id"))
def coverage(table: pd.DataFrame, shapes=SEED_DEVICE_SHAPES) -> str:
    """'devices side by side: N seed shapes; NVIDIA H200: 8 shapes, 12 runs (measured by
    moe-lab); ...': per device (most shapes first), how many of `shapes` it has rows of."""
    if table.empty:
        return f"devices side by side: no device has rows of the {len(shapes)} seed shapes"
    per = {dev: (len(g[SHAPE].drop_duplicates()), g) for dev, g in table.groupby("device")}
    parts = [f"{dev}: {n} shape(s), {g['run_id'].nunique()} run(s) ({g['source'].iloc[0]})"
             for dev, (n, g) in sorted(per.items(), key=lambda kv: (-kv[1][0], kv[0]))]
    return f"devices side by side: {len(shapes)} seed shapes; " + "; ".join(parts)
