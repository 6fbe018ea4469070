"""The workbook's targets: one record each, one evaluation.

A target is a `Target` (name, what it measures, the metric, token range, limit, unit). The
analysis functions turn runs into a *metric frame*, a row per point (and per glue phase for
the glue target) with `metric`, `value` and the point's columns; `evaluate` puts every
target on the rows of its metric and its token range and returns, per row, the value, the
limit, met or missed, and for a miss by how much (`by`, in the target's unit; `by_us`, the
us to remove from the layer to meet it) and what holds the point back (`held_back_by`: the
phase with the most time above its floor in the ledger, `gaps` included; the glue target's
own phase; `no kernels` where the ledger has no row of the point). `summary` is the one
target table: per target, points, met, missed, the worst miss and where.

Two readings (issue 66): a target whose candidates hold a peer's kernel (PEERS: vLLM's, as
shipped or on moe-lab's tuned files) is read twice, with the peer's kernels (WITH_PEERS) and
with the workbook's own kernels alone (OWN_KERNELS); a metric frame's optional `reading`
column says which, and evaluate and summary keep each reading apart ('' where no peer is
among the candidates: one reading).

    Target, TARGETS, by_name(name)
    READINGS, PEERS, readings(build, rows) -> build's metric frame in both readings
    evaluate(metrics, ledger_df=None, targets=TARGETS, before=None) -> DataFrame
    summary(evaluation, targets=TARGETS) -> DataFrame
    held_back_by(ledger_df, point_id, exclude=()) -> str
    metric_rows(points, metric, value, **columns) -> DataFrame (a metric frame)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..core.constants import VERIFY_MARGIN
from ..storage.vocabulary import GEMMS
from ..storage.checked import CALLABLE, FRAME, STR, TEXT, columns, frame, shown, takes

NO_KERNELS = "no kernels"
WITH_PEERS, OWN_KERNELS = "with vLLM's kernels", "own kernels"
READINGS = (WITH_PEERS, OWN_KERNELS)  # the two readings, in the order the tables show them
PEERS = ("vllm", "vllm-deployed", "vllm-cutlass", "deepgemm", "flashinfer-cutlass",
         "triton-kernels")  # vLLM's kernels (backends.vllm_fused, backends.vllm_paths)
METRIC_COLUMNS = ["metric", "model", "sharding", "tokens", "dtype", "backend", "phase", "value",
                  "floor_us", "median_us", "point_id", "run_id"]


@dataclass(frozen=True)
class Target:
    """A target: met when `metric` >= `limit` (at_least) or <= it, for lo <= tokens <= hi.
    With `per_floor`, the limit is `limit` x the row's floor_us + `allowance_us`."""
    name: str
    measures: str
    metric: str
    lo: float
    hi: float
    limit: float
    unit: str
    at_least: bool = True
    per_floor: bool = False
    allowance_us: float = 0.0
    exclude: tuple = ()  # phases that do not count as holding the point back
    phases: bool = True  # a miss is held back by a phase of the layer (the ledger says which)

    @property
    def tokens(self) -> str:
        if self.hi == math.inf:
            return f"{self.lo:g}+" if self.lo > 1 else "all"
        return f"{self.lo:g}-{self.hi:g}"

    def limit_of(self, floor_us) -> float:
        return self.limit * float(floor_us) + self.allowance_us if self.per_floor else self.limit


INF = math.inf
TARGETS = (
    # the best layer per point (graph, the tuned run's candidates) against the roof
    Target("<16 tokens: >= 50% of roof", "the best layer's % of its roof (the ideal fused "
           "kernel), graph", "pct_of_roof", 1, 15, 50.0, "%"),
    Target("16-64 tokens: >= 85% of roof", "the best layer's % of its roof, graph",
           "pct_of_roof", 16, 64, 85.0, "%"),
    Target(">=4096 tokens: >= 60% of bf16 GEMM peak", "the best layer's TFLOP/s as % of the "
           "measured bf16 GEMM peak, graph", "pct_of_gemm_peak", 4096, INF, 60.0, "%"),
    # the best FP8 point against its own roof (FP8 weights, FP8 peak)
    Target("below 16 tokens: >= 50% of the FP8 roof", "the best FP8 layer's % of the FP8 "
           "roof, graph", "fp8_pct_of_roof", 1, 15, 50.0, "%"),
    Target("16 to 64 tokens: >= 85% of the FP8 roof", "the best FP8 layer's % of the FP8 "
           "roof, graph", "fp8_pct_of_roof", 16, 64, 85.0, "%"),
    # FP8 against bf16: the best of each per point; two token ranges, two targets
    Target("fp8 >= 1.5x bf16, 16-256 tokens", "best bf16 us / best FP8 us, graph (decode)",
           "fp8_speedup", 16, 256, 1.5, "x"),
    Target("fp8 >= 1.5x bf16, 4096+ tokens", "best bf16 us / best FP8 us, graph (prefill)",
           "fp8_speedup", 4096, INF, 1.5, "x"),
    Target("fp8 not slower than bf16", "best bf16 us / best FP8 us, graph, from 16 tokens",
           "fp8_speedup", 16, INF, 1.0, "x"),
    # the ledger: glue and GEMM share of the best point
    Target("glue <= 3x floor + 20 us", "each glue phase's us (quant, act, align, combine) "
           "of the best point, against 3x its floor + 20 us", "glue_us", 256, INF, 3.0,
           "us", at_least=False, per_floor=True, allowance_us=20.0),
    Target("gemm >= 75% of layer", "gemm1 + gemm2 us as % of the best point's median",
           "gemm_pct", 1024, INF, 75.0, "%", exclude=GEMMS),
    # the FP8 GEMM's promise over bf16 (whole layer), by what bounds bf16's GEMMs
    Target("fp8 >= 2x bf16 where bf16's GEMMs are memory-bound", "best bf16 us / best FP8 "
           "us where bf16's gemm1 is memory-bound (weights at 1 byte, not 2)",
           "fp8_speedup_memory_bound", 1, INF, 2.0, "x"),
    Target("fp8 >= 1.7x bf16 where bf16's GEMMs are compute-bound", "best bf16 us / best "
           "FP8 us where bf16's gemm1 is compute-bound (2x peak, less the scaling)",
           "fp8_speedup_compute_bound", 1, INF, 1.7, "x"),
    # tuning (issue 38): the committed files (analysis.tuned.current_pairs)
    Target("tuned not slower than default", "default us / tuned us of the same point and "
           "run, graph, the tuned row measured with the committed file",
           "default_over_tuned", 1, INF, 1.0, "x", phases=False),
    Target("tuned not slower at T tokens than at 2T", "tuned us at 2T / tuned us at T, "
           "graph, the committed files", "two_t_over_t", 1, INF, 1.0, "x", phases=False),
    Target("tuned not slower than a published tuning", "published file's us / tuned us of "
           "the same point and run, graph (vLLM's shipped tunings for the GPU of the same "
           "Triton kernel: run as aiter-triton --config FILE, or vLLM as shipped against vLLM "
           "with moe-lab's file)", "tuned_over_published", 1, INF, 1.0,
           "x", phases=False),
    Target("a second search finds nothing 2% faster", "the committed winner's us / the "
           "best a `tune --verify` search (another order, twice the survivors) finds, graph",
           "verify_ratio", 1, INF, VERIFY_MARGIN, "x", at_least=False, phases=False),
    # issue 41: the workbook's best own layer against vLLM as shipped, point by point
    Target("own layer within 1.03x of vLLM as shipped", "the best own layer's us / vLLM as "
           "shipped us of the same point and run, graph (1.03: the band issue 41 allows two "
           "measurements)", "own_over_vllm", 1, INF, 1.03, "x", at_least=False, phases=False),
    Target("own layer's geomean at or below vLLM's, per shape", "the geometric mean of "
           "best own us / vLLM us over a shape's token counts, graph", "own_over_vllm_geomean",
           0, INF, 1.0, "x", at_least=False, phases=False),
    # expert parallelism
    Target("predicted within 5% of measured", "|slowest rank + collective / layer - 1| per "
           "distributed point", "prediction_err", 1, INF, 0.05, "", at_least=False,
           phases=False),
    Target("spread wall <= 0.6x one-GPU wall", "a sweep spread over GPUs: its wall time / "
           "the same sweep's on one GPU", "spread_ratio", 0, INF, 0.6, "x", at_least=False,
           phases=False),
)


def by_name(name: str) -> Target:
    """The target of that name; UsageError naming the targets otherwise (was: KeyError)."""
    for t in TARGETS:
        if isinstance(name, str) and t.name == name:
            return t
    from ..core.errors import UsageError
    raise UsageError(f"by_name: no target {shown(name)}; the targets: "
                     + "; ".join(t.name for t in TARGETS))


def _targets(value, who: str) -> list:
    """`targets` as a list: a Target, or one or more of them (TARGETS, [by_name(name)]);
    UsageError naming `who` otherwise (was: a TypeError, or an empty table for a str)."""
    from ..core.errors import UsageError
    items = [value] if isinstance(value, Target) else list(value) if not isinstance(
        value, (str, bytes, dict)) and hasattr(value, "__iter__") else []
    if not items or not all(isinstance(t, Target) for t in items):
        raise UsageError(f"{who}: targets {repr(value)[:80]}: give one or more Targets "
                         "(targets.TARGETS, or [targets.by_name(name), ...])")
    return items


@takes(points=FRAME, metric=TEXT)
def metric_rows(points: pd.DataFrame, metric: str, value, **columns) -> pd.DataFrame:
    """A metric frame from a frame of points: `value` (a column name or values), the
    point's columns where it has them (sharding, backend or choice, run_id...)."""
    if not len(points):
        return pd.DataFrame(columns=METRIC_COLUMNS)
    p = points
    out = pd.DataFrame(dict(metric=metric, value=p[value] if isinstance(value, str) else value),
                       index=p.index)
    backend = p["choice"] if "choice" in p else p["backend"] if "backend" in p else ""
    for c, default in (("model", ""), ("sharding", ""), ("tokens", np.nan), ("dtype", ""),
                       ("phase", ""), ("floor_us", np.nan), ("median_us", np.nan),
                       ("point_id", ""), ("run_id", "")):
        out[c] = p[c] if c in p else default
    out["backend"] = backend
    for c, v in columns.items():
        out[c] = v
    return out[METRIC_COLUMNS].reset_index(drop=True)


@takes(build=CALLABLE, rows=FRAME)
def readings(build, rows: pd.DataFrame) -> pd.DataFrame:
    """build(rows) (a metric frame) with `reading`: where `rows` hold a peer's row (PEERS),
    twice, WITH_PEERS over every row and OWN_KERNELS over the rows of the workbook's own
    backends; else once, reading ''."""
    peer = rows["backend"].astype(str).isin(PEERS) if len(rows) and "backend" in rows else []
    if not len(rows) or not peer.any():
        return build(rows).assign(reading="")
    return pd.concat([build(rows).assign(reading=WITH_PEERS),
                      build(rows[~peer]).assign(reading=OWN_KERNELS)], ignore_index=True)


@takes(ledger_df=frame("point_id", "phase", "over_us") | None, run_id=STR | None)
def held_back_by(ledger_df: pd.DataFrame | None, point_id, exclude=(), run_id=None) -> str:
    """The phase of the point (of run_id, where both say) with the most us above its floor
    (over_us > 0; `gaps`, the time no kernel covers, is a phase with floor 0), among those
    not excluded; '' when no phase is above its floor; NO_KERNELS when the ledger has no row
    of the point."""
    if ledger_df is None or not len(ledger_df):
        return NO_KERNELS
    g = ledger_df[ledger_df["point_id"].astype(str) == str(point_id)]
    if run_id and "run_id" in g:
        g = g[g["run_id"].astype(str) == str(run_id)]
    if g.empty:
        return NO_KERNELS
    g = g[~g["phase"].isin(exclude) & (g["over_us"] > 0)]
    # by position: a ledger concatenated from several frames repeats index labels
    return "" if g.empty else str(g["phase"].iloc[int(np.argmax(g["over_us"].to_numpy()))])


EVAL_COLUMNS = ["target", "reading", "model", "sharding", "tokens", "dtype", "backend", "phase",
                "value", "limit", "unit", "met", "by", "by_us", "held_back_by", "median_us", "point_id",
                "run_id"]


@takes(metrics=columns(*METRIC_COLUMNS), ledger_df=columns("point_id", "phase", "over_us") | None,
       before=columns(*METRIC_COLUMNS) | None)
def evaluate(metrics: pd.DataFrame, ledger_df: pd.DataFrame | None = None, targets=TARGETS,
             before: pd.DataFrame | None = None) -> pd.DataFrame:
    """A row per (target, metric row in its token range with a value and a limit: a point
    without a roof or ceilings is not one): value, limit, met, by (the miss in the target's unit, 0 when met), by_us
    (the us to take off the layer, or the glue phase, to meet it; NaN where the metric is
    not a time ratio of the layer) and held_back_by ('' when met); `reading` as the metric
    row's (module doc; '' without one). `before`: a metric frame of the same points before
    a change (the shipped configurations): adds met_before."""
    targets, out = _targets(targets, "targets.evaluate"), []
    for t in targets:
        m = metrics[metrics["metric"] == t.metric] if len(metrics) else metrics
        tok = pd.to_numeric(m["tokens"], errors="coerce") if len(m) else pd.Series(dtype=float)
        m = m[tok.isna() | tok.between(t.lo, t.hi)] if len(m) else m
        for r in m.to_dict("records"):
            v = float(r["value"])
            lim = t.limit_of(r["floor_us"])
            if not (np.isfinite(v) and np.isfinite(lim)):
                continue  # nothing to judge (no roof, no ceilings): not a point of it
            met = bool(v >= lim) if t.at_least else bool(v <= lim)
            by = 0.0 if met else (lim - v if t.at_least else v - lim)
            med = float(r["median_us"]) if pd.notna(r["median_us"]) else np.nan
            if met:
                by_us = 0.0
            elif t.unit == "us":
                by_us = v - lim
            elif t.at_least:
                by_us = med * (1 - v / lim)  # the metric is inverse in the layer's time
            else:
                by_us = np.nan
            held = "" if met or not t.phases else (
                str(r["phase"]) if r["phase"] else held_back_by(ledger_df, r["point_id"], t.exclude,
                                                                 r["run_id"]))
            out.append(dict(target=t.name, reading=_reading(r.get("reading")),
                            model=r["model"], sharding=r["sharding"],
                            tokens=r["tokens"], dtype=r["dtype"], backend=r["backend"],
                            phase=r["phase"], value=v, limit=lim, unit=t.unit, met=met, by=by,
                            by_us=by_us, held_back_by=held, median_us=med,
                            point_id=r["point_id"], run_id=r["run_id"]))
    ev = pd.DataFrame(out, columns=EVAL_COLUMNS)
    if before is not None:
        key = ["target", "reading", "model", "sharding", "tokens", "dtype", "phase"]
        pre = evaluate(before, None, targets)[key + ["met"]].rename(columns={"met": "met_before"})
        ev = ev.merge(pre.drop_duplicates(key), on=key, how="left")
    return ev


@takes(evaluation=columns("target", "model", "sharding", "tokens", "backend", "value", "met", "by",
       "by_us", "held_back_by"))
def summary(evaluation: pd.DataFrame, targets=TARGETS) -> pd.DataFrame:
    """The target table: per target with points, in the order of `targets` (and per reading,
    READINGS' order, where it has two: module doc): points, met, missed, met_before (where
    the evaluation has it), the worst miss (the largest `by`, in the target's unit; `worst_by_us` that point's us to remove), where and what holds it
    back, and the median value."""
    targets, rows = _targets(targets, "targets.summary"), []
    rd = (evaluation["reading"].fillna("").astype(str) if "reading" in evaluation
          else pd.Series("", index=evaluation.index))
    for t, reading in ((t, r) for t in targets for r in ("",) + READINGS):
        g = evaluation[(evaluation["target"] == t.name) & (rd == reading)]
        if g.empty:
            continue
        miss = g[~g["met"].astype(bool)]
        w = miss.loc[miss["by"].idxmax()] if len(miss) else None
        at = "" if w is None else " ".join(
            str(x) for x in (w["model"], w["sharding"], _tok(w["tokens"]), w["backend"])
            if str(x) not in ("", "nan"))
        rows.append(dict(
            target=t.name, reading=reading, points=len(g), met=int(g["met"].astype(bool).sum()),
            missed=len(miss),
            met_before=(pd.NA if "met_before" not in g or g["met_before"].isna().all()
                        else int(g["met_before"].eq(True).sum())),
            worst_by=0.0 if w is None else round(float(w["by"]), 1 if t.unit in ("%", "us") else 2),
            unit=t.unit,
            worst_by_us=0.0 if w is None or pd.isna(w["by_us"]) else round(float(w["by_us"]), 1),
            worst_at=at, held_back_by="" if w is None else w["held_back_by"],
            median=round(float(g["value"].median()), 2)))
    cols = ["target", "reading", "points", "met", "missed", "met_before", "worst_by", "unit",
            "worst_by_us",
            "worst_at", "held_back_by", "median"]
    s = pd.DataFrame(rows, columns=cols)
    s["met_before"] = s["met_before"].astype("Int64")
    return s


def _reading(v) -> str:
    """A metric row's reading: '' where its frame has none (NaN after a concat)."""
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def _tok(t) -> str:
    return "" if pd.isna(t) else f"{int(t)}"
