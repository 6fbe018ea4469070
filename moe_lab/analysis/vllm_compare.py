"""The comparison a reviewer asks for (issue 41): per shape, scheme and token count, the
workbook's best own layer over vLLM's fused MoE as shipped. Frames in, frames out; the
figure is moe_lab.plots.vllm_compare's.

    best_over_vllm(results, ledger=None) -> per run and point: vllm_us (backend `vllm`,
        config `default`: vLLM's Triton fused_experts with its shipped files), best_us and
        best (the fastest ok row among OWN of the same run, point and mode), ratio =
        best_us / vllm_us (< 1: ours faster), slower (ratio > BAND), and for a slower
        point the ledger's answer: loses_in, the phase whose measured time exceeds vLLM's
        the most, and loses_us, by how much (from the ledger frame of
        moe_lab.analysis.ledger when given and holding both points' phases; else '' and NaN)
    newest(table) -> the newest measurement of each point (model, sharding, scheme, mode,
        tokens): of the runs that compared it, the one whose vLLM row was measured last (a
        point measured again after a change is read from its new run; each row is still a
        comparison within one run)
    target_metrics(table, reading="") -> the metric frame of issue 41's two targets
        (analysis.targets: BAND is the per-point one's limit)
    readings(runs) -> (results, {reading: table}): both readings of issue 66, with vLLM's
        kernel on moe-lab's tuned files among the own layers (targets.WITH_PEERS: OWN) and
        with the workbook's own kernels alone (targets.OWN_KERNELS: OWN_ONLY)
    readings_metrics(tables), readings_targets(tables), by_shape_readings(tables) -> the
        targets' metric frame, their table (a row per target and reading) and by_shape,
        each in both readings side by side; both_readings(runs): notebook 05's two
    by_shape(table) -> per shape and scheme, over the newest measurement of each point:
        points, geomean_ratio, worst_ratio and its tokens, slower points, met (every point
        within BAND and the geomean at or below GEOMEAN: issue 41's goal), best (the own
        layers that are the best at its points, with how many, most first) and run_id (the
        runs the points come from, newest first)
    own_text(own=OWN) -> the own layers as the findings name them ('backend config' each)
    vllm_runs(runs=None, device=None) -> the runs holding ok `vllm` default rows (ids or
        folders given: those), chosen by analysis.runs' one rule (GPU runs first; every such
        run on the chosen one's device, or on `device`, newest first); [] when none
    frames(runs, mode="graph") -> (results, ledger) of those runs, each row with its
        run_id (every run's own rows: a point two runs share is kept in both)
    compared(runs) -> (results, best_over_vllm table) of frames(runs), once per runs
        inside ledger.shared()
    fp8_over_bf16(results) -> per model, sharding, FP8 scheme and token count: the fastest
        ok bf16 and FP8 layers (any backend, any run of the frame; the default glue),
        speedup = bf16_us / fp8_us, and the same with vLLM left out of both sides
        (speedup_own: the workbook's own kernels only), so a statement about FP8 says
        whether it holds for the kernels or only for the kernel list
    fp8_summary(table) -> per model, sharding and scheme: points, FP8 faster at how many
        (with vLLM and own only), the speedup's range and its best FP8 backends

OWN, the workbook's own layers: aiter-triton and aiter-triton-silu (aiter's shipped or
moe-lab's tuned configurations), torch-grouped, the FP8 backends (torch-fp8,
torch-fp8-grouped) and vLLM's own kernel with moe-lab's tuned files (`vllm` tuned). Only rows of the default glue
(a deployment's) are compared; every point is compared within its run, never across runs
(a run resumed on a fresh lease spans two machines: its invocations' boot_id and gpu_uuid
say which, and its manifest's provenance_note where they were not yet recorded).
"""
from __future__ import annotations

import math

import pandas as pd

from ..core.errors import UsageError
from ..core.problems import sharding_name
from ..storage.rows import deployed_rows
from .metrics import geomean, span
from .runs import VLLM_AS_SHIPPED as BASE, vllm_choice
from .targets import (METRIC_COLUMNS, OWN_KERNELS, WITH_PEERS, by_name, evaluate, metric_rows,
                      summary)
from ..storage.checked import DICT, FRAME, MODE, PAIR, PAIRS, POSITIVE, RUNS, SOME_RUNS, STR, TEXT, columns, frame, shown, takes

OWN = (("aiter-triton", "default"), ("aiter-triton", "tuned"), ("aiter-triton-silu", "default"),
       ("aiter-triton-silu", "tuned"), ("torch-grouped", "default"),
       ("torch-fp8", "default"), ("torch-fp8-grouped", "default"), ("vllm", "tuned"))
OWN_ONLY = tuple(o for o in OWN if o[0] != BASE[0])  # the workbook's own kernels alone
DEPLOYED = ("vllm-deployed", "default")  # the class vLLM's oracle picks (backends.vllm_paths)
BAND_TARGET = "own layer within 1.03x of vLLM as shipped"  # issue 41's two targets
GEOMEAN_TARGET = "own layer's geomean at or below vLLM's, per shape"
BAND = by_name(BAND_TARGET).limit  # issue 41's band
GEOMEAN = by_name(GEOMEAN_TARGET).limit  # and its geomean
KEY = ["run_id", "model", "tp", "ep", "ep_rank", "dtype", "routing", "mode", "tokens"]
COLUMNS = ["run_id", "model", "sharding", "tp", "ep", "dtype", "mode", "tokens", "vllm_us",
           "vllm_config_file", "best_us", "best", "ratio", "slower", "loses_in", "loses_us",
           "best_point_id", "vllm_point_id", "measured_at"]
SHAPE = ["model", "sharding", "dtype", "mode"]
POINT = SHAPE + ["tp", "ep", "tokens"]


@takes(results=frame("mode"), mode=MODE | None)
def candidates(results: pd.DataFrame, mode: str | None) -> pd.DataFrame:
    """The rows a comparison reads: deployed_rows (ok, the default glue) of `mode` (None:
    every mode), config, run_id, routing and ep_rank filled where a frame lacks them."""
    r = deployed_rows(results, mode).copy()  # the default glue only (a deployment's)
    r["config"] = r["config"].fillna("default").astype(str) if "config" in r else "default"
    if "run_id" not in r:
        r["run_id"] = ""
    for c in ("routing", "ep_rank"):
        if c not in r:
            r[c] = "uniform" if c == "routing" else 0
    return r


@takes(mode=MODE | None, own=PAIRS, band=POSITIVE, base=PAIR, results=columns("model", "tp", "ep",
       "dtype", "backend", "mode", "tokens", "median_us", "point_id"), ledger=columns("point_id",
       "phase", "measured_us") | None)
def best_over_vllm(results: pd.DataFrame, ledger: pd.DataFrame | None = None,
                   mode: str | None = "graph", own=OWN, band: float = BAND,
                   base=BASE) -> pd.DataFrame:
    """Module doc. Points without an ok vLLM-default row or without an ok own row are left
    out; empty (COLUMNS) when none has both. `own`: the layers counted as the workbook's
    (OWN_ONLY: without vLLM's kernel on moe-lab's files); `base`: what vLLM runs
    (DEPLOYED: the experts class its oracle picks, `vllm-deployed`)."""
    r = candidates(results, mode)
    pair = list(zip(r["backend"].astype(str), r["config"]))
    base = r[[p == tuple(base) for p in pair]]
    mine = r[[p in set(own) for p in pair]]
    if base.empty or mine.empty:
        return pd.DataFrame(columns=COLUMNS)
    mine = mine.assign(best=mine["backend"] + " " + mine["config"])
    best = mine.sort_values("median_us").groupby(KEY, sort=False).head(1)
    base = base.sort_values("median_us").groupby(KEY, sort=False).head(1)
    if "measured_at" not in base:
        base = base.assign(measured_at="")
    cols = ["median_us", "point_id", "measured_at"] + (
        ["config_file"] if "config_file" in base else [])
    t = base[KEY + cols].rename(columns={"median_us": "vllm_us", "point_id": "vllm_point_id",
                                         "config_file": "vllm_config_file"}).merge(
        best[KEY + ["median_us", "best", "point_id"]].rename(
            columns={"median_us": "best_us", "point_id": "best_point_id"}), on=KEY)
    if t.empty:
        return pd.DataFrame(columns=COLUMNS)
    if "vllm_config_file" not in t:
        t["vllm_config_file"] = ""
    t["sharding"] = [sharding_name(a, b) for a, b in zip(t["tp"], t["ep"])]
    t["ratio"] = t["best_us"] / t["vllm_us"]
    t["slower"] = t["ratio"] > band
    t["loses_in"], t["loses_us"] = "", math.nan
    if ledger is not None and len(ledger) and t["slower"].any():
        led = ledger.copy()
        led["point_id"] = led["point_id"].astype(str)
        if "run_id" not in led:
            led["run_id"] = ""
        by = {k: g.groupby("phase")["measured_us"].sum()
              for k, g in led.groupby(["run_id", "point_id"])}
        for i in t.index[t["slower"]]:
            a = by.get((t.at[i, "run_id"], str(t.at[i, "best_point_id"])))
            b = by.get((t.at[i, "run_id"], str(t.at[i, "vllm_point_id"])))
            if a is None or b is None:
                continue
            d = a.sub(b, fill_value=0.0)
            if len(d) and d.max() > 0:
                t.at[i, "loses_in"], t.at[i, "loses_us"] = str(d.idxmax()), float(d.max())
    return t[COLUMNS].sort_values(["run_id", "model", "tp", "ep", "dtype", "mode", "tokens"]) \
        .reset_index(drop=True)


@takes(table=columns("model", "sharding", "tp", "ep", "dtype", "mode", "tokens", "measured_at"))
def newest(table: pd.DataFrame) -> pd.DataFrame:
    """Module doc; the table's order kept."""
    if table.empty:
        return table
    when = table["measured_at"].fillna("").astype(str)
    keep = table.assign(_when=when).sort_values("_when", ascending=False, kind="stable") \
        .drop_duplicates(POINT).index
    return table.loc[table.index.isin(keep)]


@takes(own=PAIRS)
def own_text(own=OWN) -> str:
    """Module doc: each own layer as `best` names it, vllm tuned said to be vLLM's kernel."""
    return ", ".join(f"{b} {c}" + (" (vLLM's kernel with moe-lab's tuned files)"
                                    if (b, c) == (BASE[0], "tuned") else "") for b, c in own)


@takes(g=frame("best"))
def bests(g: pd.DataFrame) -> str:
    """The own layers that are the best at a frame's points, with how many, most first."""
    n = g["best"].astype(str).value_counts()
    return ", ".join(f"{b} ({n[b]})" for b in sorted(n.index, key=lambda b: (-n[b], b)))


@takes(g=frame("measured_at", "run_id"))
def runs_of(g: pd.DataFrame) -> str:
    """The run ids of a frame's rows, newest measurement first, comma-separated."""
    g = g.sort_values("measured_at", ascending=False, kind="stable")
    return ", ".join(dict.fromkeys(g["run_id"].astype(str)))


@takes(band=POSITIVE, table=columns("run_id", "model", "sharding", "tp", "ep", "dtype", "mode",
       "tokens", "best", "ratio", "slower", "measured_at"))
def by_shape(table: pd.DataFrame, band: float = BAND) -> pd.DataFrame:
    """Module doc; empty when the table is."""
    cols = SHAPE + ["points", "geomean_ratio", "worst_ratio", "worst_tokens", "slower", "met",
                    "best", "run_id"]
    rows = []
    for k, g in newest(table).groupby(SHAPE, sort=True):
        worst = g.loc[g["ratio"].idxmax()]
        gm = geomean(g["ratio"])
        rows.append(dict(zip(SHAPE, k), points=len(g), geomean_ratio=gm,
                         worst_ratio=float(worst["ratio"]), worst_tokens=int(worst["tokens"]),
                         slower=int(g["slower"].sum()),
                         met=bool(not g["slower"].any() and gm <= GEOMEAN), best=bests(g),
                         run_id=runs_of(g)))
    return pd.DataFrame(rows, columns=cols)


@takes(table=FRAME, reading=STR)
def target_metrics(table: pd.DataFrame, reading: str = "") -> pd.DataFrame:
    """The issue-41 targets' metric frame over the newest measurement of each point:
    own_over_vllm per point (on the best own row), own_over_vllm_geomean per shape;
    `reading` (analysis.targets.READINGS) in its column."""
    if table.empty:
        return pd.DataFrame(columns=METRIC_COLUMNS + ["reading"])
    now = newest(table)
    shapes = by_shape(table)
    pts = metric_rows(now.assign(backend=now["best"], median_us=now["best_us"],
                                 point_id=now["best_point_id"]), "own_over_vllm", "ratio")
    per = metric_rows(shapes.assign(backend="best own", run_id=shapes["run_id"]),
                      "own_over_vllm_geomean", "geomean_ratio")
    return pd.concat([pts, per], ignore_index=True).assign(reading=reading)


@takes(runs=RUNS)
def readings(runs) -> tuple[pd.DataFrame, dict]:
    """(results, {reading: best_over_vllm table}) of frames(runs), once per runs inside
    ledger.shared(): WITH_PEERS the own layers OWN (vLLM's kernel on moe-lab's tuned files
    among them: compared(runs)'s table), OWN_KERNELS the workbook's own kernels alone
    (OWN_ONLY; no ledger: its slower points are not traced to a phase)."""
    from . import ledger as lg
    runs = lg.opened(runs)
    res, t = compared(runs)
    alone = lg.memo(("vllm_own_only", lg.run_paths(runs)),
                    lambda: best_over_vllm(res, own=OWN_ONLY))
    return res, {WITH_PEERS: t, OWN_KERNELS: alone}


@takes(tables=DICT)
def readings_metrics(tables: dict) -> pd.DataFrame:
    """The issue-41 targets' metric frame in both readings (readings(runs)[1])."""
    frames = [target_metrics(t, r) for r, t in tables.items() if len(t)]
    return pd.concat(frames, ignore_index=True) if frames else target_metrics(pd.DataFrame())


@takes(tables=DICT)
def readings_targets(tables: dict) -> pd.DataFrame:
    """The issue-41 targets' table (analysis.targets.summary of the one evaluation), a row
    per target and reading, side by side: points, met, missed, the worst miss."""
    return summary(evaluate(readings_metrics(tables)))


@takes(tables=DICT)
def by_shape_readings(tables: dict) -> pd.DataFrame:
    """by_shape of the WITH_PEERS reading with the OWN_KERNELS reading's geomean_ratio,
    slower, met and points beside it (suffix `_own_only`; NaN where the workbook's own
    kernels have no point of the shape)."""
    missing = [r for r in (WITH_PEERS, OWN_KERNELS) if r not in tables]
    if missing:
        raise UsageError(f"by_shape_readings: tables has no {missing[0]!r} reading (give "
                         "readings(runs)[1])")
    shapes = by_shape(tables[WITH_PEERS])
    alone = by_shape(tables[OWN_KERNELS]).set_index(SHAPE)[
        ["geomean_ratio", "slower", "met", "points"]].add_suffix("_own_only")
    return shapes.join(alone, on=SHAPE)


@takes(runs=RUNS)
def both_readings(runs) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(by_shape_readings, readings_targets) of `runs` (empty frames where none is given):
    notebook 05's both readings, with vLLM's kernel on moe-lab's tuned files among the own
    layers and with the workbook's own kernels alone."""
    if not runs:
        return pd.DataFrame(), pd.DataFrame()
    tables = readings(runs)[1]
    return by_shape_readings(tables), readings_targets(tables)


@takes(runs=RUNS | None, device=TEXT | None)
def vllm_runs(runs=None, device: str | None = None) -> list:
    """Module doc (analysis.runs.vllm_choice's runs; `device`: those measured on it)."""
    return vllm_choice(runs, device)[0]


@takes(runs=SOME_RUNS)
def compared(runs) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(results, table): frames(runs)'s results and best_over_vllm over them, once per
    runs inside ledger.shared() (the findings' targets and their vLLM section read both)."""
    from . import ledger as lg
    runs = lg.opened(runs)

    def compute():
        res, led = frames(runs)
        return res, best_over_vllm(res, led)
    return lg.memo(("vllm_compared", lg.run_paths(runs)), compute)


@takes(runs=RUNS)
def frames(runs, mode: str | None = "graph") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Module doc."""
    from .ledger import ledger, opened
    from ..core.errors import UsageError
    from ..storage import modes
    try:  # was: an unknown mode gave two empty frames, as if no run had rows of it
        if mode is not None:
            modes.parse_mode(mode if isinstance(mode, str) else "?")
    except UsageError:
        raise UsageError(f"frames: mode {shown(mode)}: give {', '.join(modes.BASE)}, "
                         f"compile:<variant>[:dynamic] (variant: "
                         f"{', '.join(modes.COMPILE_VARIANTS)}), or None for every mode") from None
    res, led = [], []
    for r in opened(runs):
        rows = r.results if mode is None else r.results[r.results["mode"] == mode]
        res.append(rows.assign(run_id=r.run_id))
        led.append(ledger(rows, r.kernels, r.phases).assign(run_id=r.run_id))
    res = [x for x in res if len(x)]
    led = [x for x in led if len(x)]
    return (pd.concat(res, ignore_index=True) if res else pd.DataFrame(),
            pd.concat(led, ignore_index=True) if led else pd.DataFrame())


FP8_KEY = ["model", "tp", "ep", "ep_rank", "routing", "mode", "tokens"]


def _fastest(r: pd.DataFrame) -> pd.DataFrame:
    r = r.assign(kernel=r["backend"].astype(str) + " " + r["config"].astype(str))
    return r.sort_values("median_us").groupby(FP8_KEY + ["dtype"], sort=False).head(1)


@takes(mode=MODE | None, results=columns("model", "tp", "ep", "mode", "tokens", "backend",
       "median_us"))
def fp8_over_bf16(results: pd.DataFrame, mode: str | None = "graph") -> pd.DataFrame:
    """Module doc; empty when no point has both a bf16 and an FP8 ok row."""
    cols = ["model", "sharding", "dtype", "tokens", "bf16_us", "bf16_best", "fp8_us",
            "fp8_best", "speedup", "bf16_own_us", "fp8_own_us", "fp8_own_best", "speedup_own"]
    r = candidates(results, mode)
    if r.empty or "dtype" not in r:
        return pd.DataFrame(columns=cols)
    own = r[r["backend"] != BASE[0]]
    out = []
    for frame, tag in ((r, ""), (own, "_own")):
        best = _fastest(frame)
        b = best[best["dtype"] == "bf16"][FP8_KEY + ["median_us", "kernel"]].rename(
            columns={"median_us": f"bf16{tag}_us", "kernel": f"bf16{tag}_best"})
        f = best[best["dtype"].astype(str).str.startswith("fp8")][
            FP8_KEY + ["dtype", "median_us", "kernel"]].rename(
            columns={"median_us": f"fp8{tag}_us", "kernel": f"fp8{tag}_best"})
        out.append(f.merge(b, on=FP8_KEY))
    t = out[0].merge(out[1], on=FP8_KEY + ["dtype"], how="left")
    if t.empty:
        return pd.DataFrame(columns=cols)
    t["sharding"] = [sharding_name(a, b) for a, b in zip(t["tp"], t["ep"])]
    t["speedup"] = t["bf16_us"] / t["fp8_us"]
    t["speedup_own"] = t["bf16_own_us"] / t["fp8_own_us"]
    return t[cols].sort_values(["model", "sharding", "dtype", "tokens"]).reset_index(drop=True)


@takes(table=columns("model", "sharding", "dtype", "speedup", "fp8_best", "speedup_own",
       "fp8_own_best"))
def fp8_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Module doc; empty when the table is."""
    cols = ["model", "sharding", "dtype", "points", "fp8_faster", "speedup", "fp8_best",
            "own_points", "fp8_faster_own", "speedup_own", "fp8_own_best"]
    rows = []
    for (m, s, d), g in table.groupby(["model", "sharding", "dtype"], sort=True):
        o = g.dropna(subset=["speedup_own"])
        rows.append(dict(model=m, sharding=s, dtype=d, points=len(g),
                         fp8_faster=int((g["speedup"] > 1).sum()), speedup=span(g["speedup"]),
                         fp8_best=", ".join(sorted(set(g["fp8_best"]))), own_points=len(o),
                         fp8_faster_own=int((o["speedup_own"] > 1).sum()),
                         speedup_own=span(o["speedup_own"]),
                         fp8_own_best=", ".join(sorted(set(o["fp8_own_best"].astype(str))))))
    return pd.DataFrame(rows, columns=cols)

