"""Tuning (notebook 05): which run compares tuned with shipped configurations, what tuned
configurations buy over the shipped ones, the best backend per point before and after
(with the roof targets' metric frame), where the time goes, and the winning
configurations. One roof for all (add_roofline_columns, current ceilings); only ok rows
are chosen. Tables only: moe_lab.plots.tuning draws them."""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from ..core.devices import Ceilings, ceilings_for
from ..core.errors import CorruptFile, UsageError
from ..core.problems import sharding_name
from ..cost.roofline import add_roofline_columns
from ..storage.rows import deployed_rows, ok_rows
from ..storage.store import data_dir, open_run
from ..storage.vocabulary import PHASES
from . import metrics
from .kernel_time import PHASE_TOKENS  # the phase figures' token counts, defined once
from .runs import newest_with
from .runs import open_tuned_run  # noqa: F401 (the run notebook 05 reads)
from ..storage.checked import DICT, FOLDER, FRAME, LISTED, MODE, NAMES, PAIRS, RUN, STR, TEXT, columns, takes

DEFAULT, TUNED = "default", "tuned"
BEFORE = (("torch-grouped", DEFAULT), ("aiter-triton", DEFAULT))  # shipped configurations
AFTER = BEFORE + (("aiter-triton", TUNED),)                       # moe-lab tune's added
POINT = ["model", "sharding", "tp", "ep", "ep_rank", "dtype", "routing", "tokens"]
GLUE_BEFORE_RUN = "h200-seed4-20261129"  # torch-grouped with its old fp32 glue


# --- which run, which rows ---------------------------------------------------------------


def _ok(rows: pd.DataFrame, candidates=None) -> pd.DataFrame:
    """Correct, timed rows (of the (backend, config) candidates; None: all)."""
    r = ok_rows(rows)
    want = {tuple(c) for c in candidates or ()}
    return r if candidates is None else r[[x in want for x in zip(r["backend"], r["config"])]]


@takes(run=RUN, mode=MODE)
def measured(run, mode: str = "graph") -> tuple[pd.DataFrame, Ceilings]:
    """(the rows of `mode` with sharding, config, choice ('backend config'); ok rows with the
    roofline recomputed, achieved_tflops, pct_of_gemm_peak; the ceilings used)."""
    run = open_run(run)
    r = run.results[run.results["mode"] == mode].copy()
    r["config"] = r["config"].fillna(DEFAULT) if "config" in r else DEFAULT
    ok = _ok(r)
    r = pd.concat([add_roofline_columns(ok, run.device) if len(ok) else ok,
                   r[~r.index.isin(ok.index)]]).sort_index()
    ceil = ceilings_for(run.device)
    r["sharding"] = [sharding_name(t, e) for t, e in zip(r["tp"], r["ep"])]
    r["choice"] = r["backend"] + " " + r["config"]
    r["achieved_tflops"] = r["flops"] / r["median_us"] / 1e6
    return r.assign(pct_of_gemm_peak=100 * r["achieved_tflops"] / ceil.tflops_bf16), ceil


@takes(values=TEXT, index=NAMES, table=columns(lambda a: (*a["index"], "tokens", a["values"])))
def by_tokens(table: pd.DataFrame, values: str, index=("model", "sharding")) -> pd.DataFrame:
    """One column of a table by `index` and tokens (NaN where a point has no value)."""
    return table.pivot_table(index=list(index), columns="tokens", values=values, dropna=False)


# --- 1. tuned over default -----------------------------------------------------------------

@takes(rows=FRAME & columns("model", "tp", "ep", "ep_rank", "dtype", "backend", "tokens", "routing",
       "config", "status", "error", "median_us", "point_id", "sharding"))
def tuned_vs_default(rows: pd.DataFrame) -> pd.DataFrame:
    """Per backend with tuned rows and point: default_us, tuned_us and default_over_tuned
    (> 1: tuned faster); tuned_status and tuned_error say why a tuned time is missing."""
    tuned = rows[rows["config"] == TUNED]
    d = _ok(rows[(rows["config"] == DEFAULT) & rows["backend"].isin(tuned["backend"])])
    key = POINT + ["backend"]
    j = d[key + ["median_us", "point_id"]].merge(
        tuned[key + ["median_us", "status", "error", "point_id"]], on=key,
        suffixes=("_default", "_tuned")).rename(columns={
            "median_us_default": "default_us", "median_us_tuned": "tuned_us",
            "status": "tuned_status", "error": "tuned_error"})
    j.loc[j["tuned_status"] != "ok", "tuned_us"] = np.nan
    j["default_over_tuned"] = j["default_us"] / j["tuned_us"]
    return j.sort_values(key).reset_index(drop=True)


@takes(table=columns("model", "sharding", "tokens", "backend", "tuned_status", "tuned_error",
       "default_over_tuned"))
def tuned_summary(table: pd.DataFrame) -> str:
    """Where tuned is faster, default/tuned's median and extremes; the points without one."""
    ok, r = table[table["default_over_tuned"].notna()], table["default_over_tuned"].dropna()
    miss = table[table["tuned_status"] != "ok"]
    missing = "\n".join([f"tuned missing (not drawn) at {len(miss)} points"] + [
        f"  {b} {m} {s}, tokens {','.join(map(str, g['tokens']))}: {st}: {g['tuned_error'].iloc[0]}"
        for (b, m, s, st), g in miss.groupby(["backend", "model", "sharding", "tuned_status"])])
    if ok.empty:
        return "no point with both a default and a tuned time; " + missing
    return (f"tuned faster than default at {int((r > 1).sum())} of {len(ok)} points\n"
            f"median default/tuned {r.median():.2f}x; max {r.max():.2f}x "
            f"({_at(ok.loc[r.idxmax()])}); min {r.min():.2f}x ({_at(ok.loc[r.idxmin()])})\n"
            + missing)


def _at(x) -> str:
    return f"{x.get('backend', '')} {x['model']} {x['sharding']}, {int(x['tokens'])} tokens".strip()


# --- 2. the best backend against the roof and the targets ----------------------------------

@takes(rows=FRAME & columns("model", "tp", "ep", "ep_rank", "dtype", "backend", "tokens", "routing",
       "config", "median_us", "sharding"), candidates=PAIRS | None)
def best_per_point(rows: pd.DataFrame, candidates=AFTER) -> pd.DataFrame:
    """Per point, the ok row with the lowest median among the candidates (None: all)."""
    r = _ok(rows, candidates).sort_values("median_us")
    return r.groupby(POINT).head(1).sort_values(POINT).reset_index(drop=True)


@takes(rows=FRAME & columns("model", "tp", "ep", "ep_rank", "dtype", "backend", "tokens", "routing",
       "config", "median_us", "sharding"), before=PAIRS, after=PAIRS)
def before_after(rows: pd.DataFrame, before=BEFORE, after=AFTER) -> pd.DataFrame:
    """Per point, the best before and after: before_/after_ choice, us, pct_of_roof, point_id;
    after_pct_of_gemm_peak; gain (before_us / after_us); after_over_dense (/ dense_gemm_us)."""
    cols = ["choice", "median_us", "pct_of_roof", "pct_of_gemm_peak", "dense_gemm_us", "point_id"]
    b, a = (best_per_point(rows, c).reindex(columns=POINT + cols) for c in (before, after))
    j = b.merge(a, on=POINT, suffixes=("_before", "_after"))
    j.columns = [re.sub(r"^(.*)_(before|after)$", r"\2_\1", c).replace("median_us", "us")
                 for c in j.columns]
    j["gain"] = j["before_us"] / j["after_us"]
    j["after_over_dense"] = j["after_us"] / j["after_dense_gemm_us"]
    return j.drop(columns=["before_dense_gemm_us", "before_pct_of_gemm_peak"])


@takes(point_ids=LISTED, kernels=columns("point_id", "phase", "total_us"))
def phases_of(kernels: pd.DataFrame, point_ids) -> pd.DataFrame:
    """Device time per phase (us per call), a row per point_id, phases in style order."""
    k = kernels[kernels["point_id"].isin(list(point_ids))]
    piv = k.pivot_table(index="point_id", columns="phase", values="total_us", aggfunc="sum",
                        fill_value=0.0)
    return piv[[p for p in PHASES if p in piv.columns]]


@takes(run_id=STR, candidates=PAIRS, rows=columns("model", "tp", "ep", "ep_rank", "dtype",
       "backend", "tokens", "routing", "config", "median_us", "pct_of_roof", "sharding",
       "pct_of_gemm_peak"))
def target_metrics(rows: pd.DataFrame, run_id: str = "", candidates=AFTER) -> pd.DataFrame:
    """The roof targets' metric frame (analysis.metrics.roof_metrics) of the best of the
    candidates per point (before: BEFORE, the shipped configurations)."""
    return metrics.roof_metrics(best_per_point(rows, candidates), run_id)


# --- 3. phases: best against worst; torch-grouped's glue before and after ------------------

def _with_phases(pick: pd.DataFrame, kernels: pd.DataFrame, run_id: str) -> pd.DataFrame:
    ph = phases_of(kernels, pick["point_id"])
    cols = ["model", "sharding", "tokens", "rank", "choice", "median_us"] + (
        ["git_commit"] if "git_commit" in pick else [])
    out = pick.set_index("point_id")[cols].join(ph, how="inner")
    return out.assign(kernel_us=out[list(ph.columns)].sum(axis=1), run=run_id).reset_index()


@takes(run=RUN | None, sharding=TEXT, candidates=PAIRS | None, rows=columns("model", "tokens",
       "median_us", "point_id", "sharding", "choice"))
def phase_best_worst(run, rows, model="deepseek-r1", sharding="TP8", tokens=PHASE_TOKENS,
                     candidates=None) -> pd.DataFrame:
    """Per token count, the best and the worst ok backend/config (candidates; None: all),
    with device time per phase, kernel_us and median_us."""
    run = open_run(run)
    r = _ok(rows[(rows["model"] == model) & (rows["sharding"] == sharding)
                 & rows["tokens"].isin(list(tokens))], candidates).sort_values("median_us")
    pick = pd.concat([r.groupby("tokens").head(1).assign(rank="best"),
                      r.groupby("tokens").tail(1).assign(rank="worst")])
    return _with_phases(pick, run.kernels, run.run_id).fillna(0.0) \
        .sort_values(["tokens", "rank"]).reset_index(drop=True)


GLUE_POINT = dict(model="deepseek-r1", sharding="TP8", tokens=4096, backend="torch-grouped",
                  mode="graph")  # the point glue_before_after puts side by side


def _glue_rows(rows: pd.DataFrame, model, sharding, tokens, backend, mode) -> pd.DataFrame:
    """The point's ok row of `backend` default with the glue a deployment runs (sharding
    and config as measured() sets them)."""
    r = deployed_rows(rows, mode)
    return r[(r["model"] == model) & (r["sharding"] == sharding) & (r["tokens"] == tokens)
             & (r["backend"] == backend) & (r["config"] == DEFAULT)]


def _has_glue_point(run, point: dict) -> bool:
    res = run.results
    if not len(res) or not len(run.kernels):
        return False
    res = res.assign(config=res["config"].fillna(DEFAULT) if "config" in res else DEFAULT,
                     sharding=[sharding_name(t, e) for t, e in zip(res["tp"], res["ep"])])
    r = _glue_rows(res, **point)
    return bool(r["point_id"].isin(run.kernels["point_id"]).any())


@takes(run=RUN)
def glue_after_run(run, given: bool = False, before_run=GLUE_BEFORE_RUN, **point):
    """(the run whose point is glue_before_after's `after`, one line saying which and why),
    always a run on the before run's device (a before and after on two GPUs would be the
    GPUs' difference, not the glue's): `run` where it has the point (GLUE_POINT, with its
    kernels) on that device; else, unless the run was given (a page about that run alone),
    the newest run on that device by analysis.runs' rule that has it; (None, the line)
    when none, when `run` is on another device and given, or when there is no before run."""
    point = {**GLUE_POINT, **point}
    run = open_run(run)
    what = (f"{point['backend']} default at {point['model']} {point['sharding']}, "
            f"{point['tokens']} tokens ({point['mode']}) with its kernels")
    try:
        device = open_run(before_run).device
    except CorruptFile:  # there but unreadable: one line, as every reader says it
        raise
    except UsageError:  # not in this data folder (another device's, say)
        return None, (f"torch-grouped before and after its bf16 glue: left out (no before run "
                      f"{before_run} under {data_dir()})")
    other = "" if run.device == device else f"run {run.run_id} is on {run.device}, not {device}"
    if not other and _has_glue_point(run, point):
        return run, f"after: run {run.run_id} (the run shown)"
    if given:
        return None, (f"torch-grouped before and after its bf16 glue: left out ("
                      + (f"{other}, the device of the before run {before_run})" if other
                         else f"run {run.run_id} has no {what})"))
    r = newest_with(lambda x: x.run_id != before_run and _has_glue_point(x, point), device)
    if r is not None:
        return r, (f"after: run {r.run_id}, the newest run with {what}, on {device} (the "
                   "before run's device; " + (other or f"run {run.run_id} has none") + ")")
    return None, (f"torch-grouped before and after its bf16 glue: no run on {device} (the "
                  f"before run's device) has {what}")


@takes(after_run=RUN, before_run=RUN)
def glue_before_after(after_run, before_run=GLUE_BEFORE_RUN, **point):
    """One point (GLUE_POINT, default config, the deployed glue; keywords override its
    model, sharding, tokens, backend, mode) in two runs: (its phases, rank before/after, as
    phase_best_worst; us per kernel_label before, after, change: largest change first; a
    run without the point leaves its column NaN, never 0)."""
    point = {**GLUE_POINT, **point}
    tabs, kern = [], {}
    for rank, run in (("before", open_run(before_run)), ("after", open_run(after_run))):
        r = _glue_rows(measured(run, point["mode"])[0], **point)
        if r.empty:  # this run has no such point: nothing to put beside the other
            continue
        tabs.append(_with_phases(r.assign(rank=rank), run.kernels, run.run_id))
        k = run.kernels[run.kernels["point_id"].isin(r["point_id"])]
        kern[rank] = k.groupby(["phase", [kernel_label(n) for n in k["kernel"]]])["total_us"].sum()
    if not tabs:
        return pd.DataFrame(), pd.DataFrame(columns=["before", "after", "change"])
    k = pd.concat(kern, axis=1).fillna(0.0).reindex(columns=["before", "after"])
    k = k.assign(change=k["after"] - k["before"]).rename_axis(["phase", "kernel"])
    return (pd.concat(tabs, ignore_index=True).fillna(0.0),
            k.loc[k["change"].abs().sort_values(ascending=False, na_position="last").index].round(1))


@takes(name=STR)
def kernel_label(name: str) -> str:
    """A short kernel name: the function, [the op it runs and its element type]."""
    if "GroupProblemShape" in name:
        return "cutlass grouped GEMM"
    name = name.replace("(anonymous namespace)::", "")
    head = re.split(r"[<(]", re.sub(r"^void ", "", name), maxsplit=1)[0].strip()
    base, rest = head.split("::")[-1], name[name.find(head) + len(head):]
    ops = [a or b for a, b in re.findall(r"\b(\w+?)(?:_kernel_cuda|_kernel_impl|_kernel|Functor)"
                                         r"\b|\b(Reduce\w+?)\b", rest)]
    op = next((o for o in ops if o not in ("gpu", "Binary", "BUnary", "index_elementwise")), "")
    lam = re.search(r"lambda\(([^)]+)\)|(?:Functor|TensorInfo)<([\w:]+)", rest)
    dt = {"c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "long": "int64",
          "int": "int32"}.get((lam[1] or lam[2]).split(",")[-1].strip(), "") if lam else ""
    return f"{base}[{' '.join(x for x in (op, dt) if x)}]" if op or dt else base


# --- 4. the winning configurations beside aiter's shipped ones -----------------------------

@takes(cfg=DICT)
def compact(cfg: dict) -> str:
    """'M16 N32 K256 G1 w4 s4' (BLOCK_SIZE_M/N/K, GROUP_SIZE_M, num_warps, num_stages)."""
    short = {"BLOCK_SIZE_M": "M", "BLOCK_SIZE_N": "N", "BLOCK_SIZE_K": "K", "GROUP_SIZE_M": "G",
             "num_warps": "w", "num_stages": "s"}
    return " ".join(f"{s}{cfg[k]}" for k, s in short.items() if k in cfg)


@takes(root=FOLDER | None)
def winners_table(backend="aiter-triton", device=None, shipped="MI300X", root=None):
    """Per point tuned (the newest winner in the tune runs under root, default data_dir()):
    the winning gemm1/gemm2 configurations, the one aiter ships for its token count
    (pick_config, AMD-only keys stripped), tuned/default us and speedup from the search."""
    from .tuned import newest_of, on_device
    w = newest_of("winners", root, lambda m: m.get("kind") == "tune" and (
        m.get("config") or {}).get("backend") == backend and on_device(device)(m))
    if not len(w):
        return pd.DataFrame()
    w = w.rename(columns={"run_id": "tune_run"})
    try:
        from ..backends.aiter_triton import aiter_moe_configs, pick_config
        ship = [compact(pick_config(aiter_moe_configs(shipped), int(t), strip_amd=True))
                for t in w["tokens"]]
    except Exception as exc:  # noqa: BLE001 (amd-aiter not installed here)
        ship = f"unknown: {type(exc).__name__}"
    out = pd.DataFrame(dict(
        model=w["model"], sharding=[sharding_name(t, e) for t, e in zip(w["tp"], w["ep"])],
        tokens=w["tokens"], tuned_gemm1=[compact(json.loads(c)["gemm1"]) for c in w["config"]],
        tuned_gemm2=[compact(json.loads(c).get("gemm2", {})) for c in w["config"]], shipped=ship,
        tuned_us=w["median_us"].round(1), default_us=w["default_us"].round(1),
        speedup=w["speedup"].round(2), tune_run=w["tune_run"]))
    return out.sort_values(["model", "sharding", "tokens"]).reset_index(drop=True)
