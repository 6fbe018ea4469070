"""What a distributed run says, as DataFrames (no plotting, no GPU):

    points(res)            one row per point: layer time (end to end, the slowest rank per
                           call), predicted = slowest rank's expert time + slowest rank's
                           collective (both timed like the layer: barrier, then the call),
                           their ratio, imbalance, the collective's share
    per_rank(res)          one row per point and rank: expert and collective time, pairs
    collective_model(pts)  per variant x mode x world size: time = latency + bytes / bandwidth
                           (least squares over the measured token counts)
    estimate(res, n)       the layer at n ranks from these measurements: per-rank cost fitted
                           as a + b*FLOPs + c*weight bytes (NNLS), each rank's work at n counted
                           from the same routing draw, collectives scaled by the ring
                           (all-reduce) and pairwise (all-to-all) models. An ESTIMATE.
    prediction_target(pts) how many points have predicted within 5% of measured
    spread_target(a, b)    a sweep spread over GPUs against the same sweep on one GPU
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import targets as tg
from ..storage.checked import DICT, FRAME, SEED, TEXT, TP, columns, frame, takes, whole

KEY = ["model", "dtype", "backend", "mode", "tokens", "routing", "parallel", "world_size"]
# the two targets' limits, from their records (moe_lab.analysis.targets)
TOLERANCE = tg.by_name("predicted within 5% of measured").limit
SPREAD_TARGET = tg.by_name("spread wall <= 0.6x one-GPU wall").limit
ESTIMATE_RANKS = 8  # the world the estimate scales to: the seeds' TP8 / EP8 (issue 18)


@takes(res=FRAME)
def distributed_rows(res: pd.DataFrame) -> pd.DataFrame:
    if "parallel" not in res:
        return res.iloc[:0]
    return res[res["parallel"].notna() & (res["parallel"].astype(str) != "")]


@takes(res=frame("status", "rank", "expert_us"))
def per_rank(res: pd.DataFrame) -> pd.DataFrame:
    d = distributed_rows(res)
    d = d[d["status"] == "ok"]
    cols = KEY + ["rank", "expert_us", "expert_sync_us", "collective_us", "rank_layer_us", "pairs",
                  "experts_hit", "sent_bytes", "layer_us"]
    out = d[[c for c in cols if c in d]].sort_values(KEY + ["rank"]).reset_index(drop=True)
    if "expert_sync_us" not in out:  # runs before it was measured: the timer's
        out["expert_sync_us"] = out["expert_us"]
    return out


@takes(res=columns("model", "dtype", "backend", "mode", "tokens", "routing", "status", "parallel",
       "world_size", "rank", "pairs", "sent_bytes", "layer_us", "expert_us", "collective_us"))
def points(res: pd.DataFrame) -> pd.DataFrame:
    """One row per ok point (ranks folded)."""
    r = per_rank(res)
    if r.empty:
        return pd.DataFrame(columns=KEY + ["layer_us", "predicted_us", "ratio"])
    g = r.groupby(KEY, sort=True)
    out = g.agg(layer_us=("layer_us", "first"), expert_max_us=("expert_us", "max"),
                expert_mean_us=("expert_us", "mean"), sync_max_us=("expert_sync_us", "max"),
                collective_us=("collective_us", "max"),
                pairs_max=("pairs", "max"), pairs_mean=("pairs", "mean"),
                sent_bytes=("sent_bytes", "max"), ranks=("rank", "nunique")).reset_index()
    out["predicted_us"] = out["sync_max_us"] + out["collective_us"]  # as the rows' predicted_us
    out["ratio"] = out["predicted_us"] / out["layer_us"]
    out["imbalance"] = np.where(out["pairs_mean"] > 0, out["pairs_max"] / out["pairs_mean"], 1.0)
    out["imbalance_time"] = out["expert_max_us"] / out["expert_mean_us"]
    out["collective_share"] = out["collective_us"] / out["layer_us"]
    return out


@takes(pts=columns("mode", "ratio"))
def prediction_target(pts: pd.DataFrame, tol: float = TOLERANCE) -> dict:
    """Points whose predicted layer time (slowest rank + collective) is within `tol` of the
    measured end to end, per mode."""
    out = {}
    for mode, g in pts.groupby("mode"):
        err = (g["ratio"] - 1).abs()
        out[mode] = dict(points=len(g), within=int((err <= tol).sum()),
                         median_ratio=float(g["ratio"].median()),
                         worst_ratio=float(g.loc[err.idxmax(), "ratio"]) if len(g) else np.nan)
    return out


@takes(pts=columns("mode", "parallel", "world_size", "collective_us", "sent_bytes"))
def collective_model(pts: pd.DataFrame) -> pd.DataFrame:
    """Per parallel x mode x world size: latency_us and gb_per_s of t = latency + bytes / bw,
    fitted to the measured collective times (the slowest rank's) by least squares. Where the
    time does not grow with the bytes over the points (slope <= 0: latency-bound, or too
    noisy to tell), no bandwidth is read from them: gb_per_s NaN, latency_us their mean and
    `fit` says so (it printed 1e9 GB/s, a clamp's artefact); the estimate counts latency
    alone."""
    rows = []
    for (par, mode, n), g in pts.groupby(["parallel", "mode", "world_size"]):
        x, y = g["sent_bytes"].astype(float).to_numpy(), g["collective_us"].to_numpy()
        if len(g) >= 2 and np.ptp(x) > 0:
            slope, icpt = np.polyfit(x, y, 1)
        else:
            slope, icpt = 0.0, float(np.mean(y))
        fitted = slope > 0
        if not fitted:  # latency alone: the constant nearest the times is their mean
            slope, icpt = 0.0, float(np.mean(y))
        icpt = max(icpt, 0.0)
        pred = icpt + slope * x
        ss = float(((y - y.mean()) ** 2).sum())
        rows.append(dict(parallel=par, mode=mode, world_size=int(n), latency_us=icpt,
                         gb_per_s=1e-3 / slope if fitted else np.nan, points=len(g),
                         r2=1 - float(((y - pred) ** 2).sum()) / ss if ss > 0 else np.nan,
                         fit="latency + bytes / bandwidth" if fitted else
                         "latency only: the time does not grow with the bytes here"))
    return pd.DataFrame(rows)


# --- the estimate at another world size ---------------------------------------------------

@takes(model=TEXT, tokens=whole(1, 131072), routing=TEXT, seed=SEED, parallel=TEXT, n=TP, elem_bytes=whole(1, 16))
def rank_work(model: str, tokens: int, routing: str, seed: int, parallel: str, n: int,
              elem_bytes: int = 2) -> pd.DataFrame:
    """Per rank at n ranks, from the point's own routing draw: pairs, experts hit, FLOPs,
    weight bytes read, and bytes handed to the collective."""
    from ..core.problems import parse_model
    from ..core.routing import make_routing
    spec = parse_model(model)
    _, ids, _ = make_routing(spec, tokens, routing, seed)
    flat = ids.reshape(-1).long()
    H, I, E = spec.hidden, spec.intermediate, spec.experts
    rows = []
    for r in range(n):
        if parallel == "tp-allreduce":
            pairs, hit, inter = flat.numel(), int(flat.unique().numel()), I // n
            sent = tokens * H * elem_bytes
        else:
            lo, hi = r * E // n, (r + 1) * E // n
            mine = flat[(flat >= lo) & (flat < hi)]
            pairs, hit, inter = int(mine.numel()), int(mine.unique().numel()), I
            sent = tokens * H * elem_bytes
            if parallel == "ep-alltoall":  # own chunk's pairs to other ranks, and results back
                chunk = np.array_split(np.arange(tokens), n)[r]
                own = ids[chunk].reshape(-1).long() if len(chunk) else flat[:0]
                dest = own // (E // n)
                off = int((dest != r).sum())
                back = pairs - int((dest == r).sum())
                sent = off * (H * elem_bytes + 8) + back * H * elem_bytes
        rows.append(dict(rank=r, pairs=pairs, experts_hit=hit, sent_bytes=sent,
                         flops=2.0 * 3 * pairs * H * inter,
                         weight_bytes=float(hit) * 3 * H * inter * elem_bytes))
    return pd.DataFrame(rows)


def _nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    from scipy.optimize import nnls
    scale = np.where(a.max(axis=0) > 0, a.max(axis=0), 1.0)
    coef, _ = nnls(a / scale, b)
    return coef / scale


@takes(res=columns("model", "dtype", "backend", "mode", "tokens", "routing", "status", "parallel",
       "world_size", "rank", "pairs", "sent_bytes", "layer_us", "expert_us", "collective_us",
       "seed"))
def estimate(res: pd.DataFrame, n: int = ESTIMATE_RANKS) -> pd.DataFrame:
    """The layer at n ranks, per measured point: max over ranks of the fitted per-rank cost
    plus the collective scaled from the measured model. Labelled `estimate` in every row."""
    d = distributed_rows(res)
    d = d[d["status"] == "ok"]
    pts = points(res)
    if d.empty:
        return pd.DataFrame()
    coll = collective_model(pts).set_index(["parallel", "mode", "world_size"])
    work_cache: dict = {}

    def work(model, tokens, routing, seed, par, world):
        key = (model, tokens, routing, seed, par, world)
        if key not in work_cache:
            work_cache[key] = rank_work(model, int(tokens), routing, int(seed), par, world)
        return work_cache[key]

    out = []
    for (model, backend, mode, par, world), g in d.groupby(
            ["model", "backend", "mode", "parallel", "world_size"]):
        feats, ys = [], []
        for _, row in g.iterrows():
            w = work(model, row["tokens"], row["routing"], row["seed"], par, int(world))
            wr = w.iloc[int(row["rank"])]
            feats.append([1.0, wr["flops"], wr["weight_bytes"]])
            ys.append(row.get("expert_sync_us", row["expert_us"]))
        coef = _nnls(np.array(feats), np.array(ys))
        c = coll.loc[(par, mode, world)]
        lat = c["latency_us"]  # no bandwidth fitted: the bytes cost nothing measurable
        bw = c["gb_per_s"] * 1e3 if c["gb_per_s"] > 0 else np.inf  # bytes per us
        for (tokens, routing), p in g.groupby(["tokens", "routing"]):
            w = work(model, tokens, routing, p["seed"].iloc[0], par, n)
            per_rank_us = coef[0] + coef[1] * w["flops"] + coef[2] * w["weight_bytes"]
            if par == "ep-alltoall":  # pairwise exchange: n-1 steps, the bytes leaving a rank
                lat_n, bytes_n = lat / max(int(world) - 1, 1) * (n - 1), float(w["sent_bytes"].max())
                coll_us = lat_n + bytes_n / bw
            else:  # ring all-reduce: 2(n-1) steps, 2(n-1)/n of the buffer over each link
                f_n, f_w = 2 * (n - 1) / n, 2 * (int(world) - 1) / int(world)
                coll_us = lat / (2 * (int(world) - 1)) * 2 * (n - 1) + \
                    float(w["sent_bytes"].iloc[0]) * f_n / f_w / bw
            measured = pts[(pts["model"] == model) & (pts["backend"] == backend)
                           & (pts["mode"] == mode) & (pts["parallel"] == par)
                           & (pts["world_size"] == world) & (pts["tokens"] == tokens)
                           & (pts["routing"] == routing)]
            out.append(dict(model=model, backend=backend, mode=mode, parallel=par,
                            tokens=int(tokens), routing=routing, from_world_size=int(world),
                            world_size=n, slowest_rank_us=float(per_rank_us.max()),
                            collective_us=coll_us,
                            layer_us=float(per_rank_us.max()) + coll_us,
                            imbalance=float(w["pairs"].max() / w["pairs"].mean())
                            if w["pairs"].mean() > 0 else 1.0,
                            measured_layer_us_at_from=float(measured["layer_us"].iloc[0])
                            if len(measured) else np.nan,
                            kind="estimate"))
    return pd.DataFrame(out)


@takes(est=columns("model", "backend", "mode", "parallel", "tokens", "routing", "world_size",
       "layer_us"), res=columns("model", "dtype", "backend", "mode", "tokens", "routing", "status",
       "parallel", "world_size", "rank", "pairs", "sent_bytes", "layer_us", "expert_us",
       "collective_us"))
def estimate_vs_measured(est: pd.DataFrame, res: pd.DataFrame) -> pd.DataFrame:
    """An estimate next to a measured run at the same world size (issue 18): ratio
    estimate / measured per point."""
    pts = points(res)
    if est.empty or pts.empty:
        return pd.DataFrame()
    m = est.merge(pts[KEY + ["layer_us"]], on=["model", "backend", "mode", "tokens", "routing",
                                              "parallel", "world_size"],
                  suffixes=("_estimate", "_measured"))
    m["ratio"] = m["layer_us_estimate"] / m["layer_us_measured"]
    return m


@takes(spread_manifest=DICT, single_manifest=DICT)
def spread_target(spread_manifest: dict, single_manifest: dict) -> dict:
    """Wall time of a sweep spread over GPUs (`sweep --gpus`, the merged manifest's
    `spread.wall_s`) against the same sweep on one GPU (its manifest's wall time)."""
    spread = (spread_manifest or {}).get("spread") or {}
    one = (single_manifest or {}).get("wall_s_total", (single_manifest or {}).get("wall_s"))
    if not spread.get("wall_s") or not one:
        return dict(ratio=np.nan, met=None, note="no spread run and one-GPU run to compare yet")
    ratio = float(spread["wall_s"]) / float(one)
    return dict(ratio=ratio, met=ratio <= SPREAD_TARGET, gpus=spread.get("gpus"),
                spread_wall_s=float(spread["wall_s"]), one_gpu_wall_s=float(one))
