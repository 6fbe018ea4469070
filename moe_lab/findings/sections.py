"""The sections of docs/findings.md (moe_lab.findings): each a function from the runs
(store.find_runs(), newest first) to markdown lines, its numbers computed from the rows,
each statement with the runs it reads, their dates and commits. The words around the
numbers say what a table is; they state no number themselves.

A device's section takes `(runs, device)`: the runs measured on that device (Run.device)
and its name, which its headings end with; what it looks up besides (the run a question
chooses, the tune runs) is of that device only. device None: every device's, no name in
the headings (a section read outside the findings). A section with no data: no lines."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..analysis import ledger as lg
from ..core.environment import code_state
from ..analysis.runs import choose, runs_with_phases
from ..core.constants import TUNE_TOKENS
from ..core.errors import UsageError
from ..core.problems import sharding_name
from ..storage.rows import ok_rows
from ..analysis import (expert_parallel as dist, fp8_gemm, metrics, targets as tg,
                        tuned as tf, tuning as tu, vllm_compare as vc)
from ..analysis.metrics import span  # noqa: F401 - the findings' modules take it from here


# --- formatting ----------------------------------------------------------------------------

def md_table(df: pd.DataFrame) -> list[str]:
    """A markdown table of a frame (every cell as text, '|' escaped)."""
    if not len(df):
        return ["(none)"]
    cells = [[str(c) for c in df.columns]] + [
        ["" if (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is None
         else str(v).replace("|", "\\|") for v in row] for row in df.itertuples(index=False)]
    out = ["| " + " | ".join(cells[0]) + " |", "|" + "---|" * len(cells[0])]
    return out + ["| " + " | ".join(r) + " |" for r in cells[1:]]


def head(title: str, device: str | None = None, level: int = 2) -> str:
    """A section's heading: '## title: device' (None: the title alone)."""
    return f"{'#' * level} {title}" + (f": {device}" if device else "")


def date(run) -> str:
    return str(run.manifest.get("started") or "")[:10] or "no start recorded"


def provenance(runs, rows: pd.DataFrame | None = None) -> str:
    """'Runs: `a` (date), `b` (date) · commits x, y': the runs a statement reads, the
    dates they started and the commits of the rows it reads (rows with a run_id: those
    of each run; None: every row of the runs)."""
    runs = list(runs)
    commits = set()
    for r in runs:
        sel = None
        if rows is not None and "run_id" in rows:
            sel = r.results[r.results["point_id"].isin(
                rows.loc[rows["run_id"] == r.run_id, "point_id"])]
        commits |= set(r.commits(sel)) if len(r.results) else {
            str(i.get("git_commit", ""))[:7] for i in r.manifest.get("invocations") or []
            if i.get("git_commit")} or set(r.commits())
    if not runs:  # was "Runs:  · commits unknown"
        return "Runs: none yet on this device"
    names = ", ".join(f"`{r.run_id}` ({date(r)})" for r in runs)
    return f"Runs: {names} · commits {', '.join(sorted(commits)) or 'unknown'}"


def runs_line(runs, what: str = "") -> str:
    """'Runs: `a` (date), ... · commits ...' of whole runs, with what they are for."""
    return provenance(runs) + (f" ({what})" if what else "")


def _sharding(df: pd.DataFrame) -> list[str]:
    return [sharding_name(t, e) for t, e in zip(df["tp"], df["ep"])]


# --- the runs -------------------------------------------------------------------------------

def runs_section(runs) -> list[str]:
    rows = []
    for r in runs:
        res = r.results
        m = r.manifest
        env = m.get("environment") or {}
        rows.append(dict(run=f"`{r.run_id}`", kind=m.get("kind") or "sweep", device=r.device,
                         started=date(r), finished=str(m.get("finished") or "")[:10],
                         status=str(m.get("status") or ""), rows=len(res),
                         ok=int((res["status"] == "ok").sum()) if len(res) else 0,
                         commits=", ".join(r.commits()), code=code_state(env),
                         versions=" ".join(f"{k} {env[k]}" for k in ("torch", "triton", "aiter")
                                           if env.get(k))))
    dated = [r for r in runs if r.manifest.get("started")]
    span = (f", from `{dated[-1].run_id}` ({date(dated[-1])}) to `{dated[0].run_id}` "
            f"({date(dated[0])})") if dated else ""  # none dated: a folder of tune runs only
    codes = pd.Series([x["code"] for x in rows], dtype=object).value_counts()
    return ["## The runs", "",
            f"Runs: all {len(runs)} folders{span} · commits of each below", "",
            "Every run folder, newest first: its kind, device, dates, status, rows (ok), the "
            "commits that measured them, whether the code that ran was its commit's (`code`: "
            "the manifest's source_digest against the commit's files; runs measured before "
            "the digest was recorded: git's word, or `not recorded`) and the libraries its "
            "manifest names. Code: " + ", ".join(f"{k} {v}" for k, v in codes.items()) + ".",
            "", *md_table(pd.DataFrame(rows))]


# --- the targets ------------------------------------------------------------------------------

def chosen(pick):
    """pick(): the run(s) a section reads, or None where the data has none (the choice's
    UsageError). Only the choice is caught: what is read from the runs chosen raises, so a
    corrupt or short file stops the findings in one line instead of its section vanishing."""
    try:
        return pick()
    except UsageError:
        return None


def target_inputs(runs, device: str | None = None):
    """(evaluation, sources): every target evaluated on the data of `device` that answers it
    (`runs`: its runs; None: every device's, each question's run chosen by the rule), and
    per group of targets the runs it read (for the provenance lines)."""
    on = "on this device" if device else "on the newest one's device"
    frames, leds, src = [], [], {}
    tuned = chosen(lambda: tu.open_tuned_run(device=device))
    if tuned is not None:
        rows, _ = tu.measured(tuned)
        frames.append(tu.target_metrics(rows, tuned.run_id))
        leds.append(lg.ledger(tuned.results, tuned.kernels, tuned.phases)
                    .assign(run_id=tuned.run_id))
        best = tu.best_per_point(rows).assign(run_id=tuned.run_id)
        src["the roof targets (the run with the most points both tuned and default, its "
            "best candidate per point)"] = ([tuned], best)
    lruns = chosen(lambda: runs_with_phases(None, device))
    if lruns:
        lres, led = lg.of_runs(lruns)
        best = lg.best_points(lres)
        frames.append(tg.readings(lambda r: pd.concat(  # with vLLM's kernels and without
            [metrics.ledger_metrics(led, r), metrics.fp8_roof_metrics(r)], ignore_index=True),
            lres))
        leds.append(led)
        src[f"the glue, GEMM-share and FP8 targets (every run with stored phases {on}, the "
            "newest measurement of each point, its best backend)"] = (
            [r for r in lruns if r.run_id in set(best["run_id"])], best)
        gemm = fp8_gemm.gemm_table(lruns)
        frames.append(metrics.promise_metrics(gemm))
    frames += _file_targets(runs, device, src)
    d = chosen(lambda: choose("distributed", device=device).run)
    if d is not None:
        pts = dist.points(d.results).assign(run_id=d.run_id)
        frames.append(metrics.prediction_metrics(pts))
        src["the expert-parallel prediction target (the newest run with distributed rows)"] = (
            [d], None)
    frames = [f for f in frames if len(f)]  # a data folder without a target's runs: none
    ev = tg.evaluate(pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(),
                     pd.concat(leds, ignore_index=True) if leds else None)
    return ev, src


def _file_targets(runs, device, src: dict) -> list:
    """The metric frames of the targets on tuned files (tuning, published tunings, verify)
    and on vLLM as shipped, of `runs` (and `device`'s verify and vLLM runs), each group's
    runs and rows put in `src`."""
    frames = []
    pairs, _ = tf.current_pairs(runs)
    if len(pairs):
        frames.append(tf.tuning_metrics(pairs))
        src["the tuning targets (per point the newest run with default and tuned rows, "
            "the tuned row measured after its committed file was written)"] = (
            [r for r in runs if r.run_id in set(pairs["run_id"])], pairs)
    pub = tf.published_pairs(runs)
    if len(pub):
        frames.append(tf.published_metrics(pub))
        src["the published-tuning target (runs that timed a published file beside the tuned "
            "one)"] = ([r for r in runs if r.run_id in set(pub["run_id"])], pub)
    ver = tf.verify_points(device=device)
    if len(ver):
        frames.append(tf.verify_metrics(ver))
        src["the verify target (the `tune --verify` runs, the newest of each point)"] = (
            tf.verify_runs(ver), None)
    vruns = vc.vllm_runs(device=device)
    tables = vc.readings(vruns)[1] if vruns else {}
    vt = tables.get(tg.WITH_PEERS, pd.DataFrame())
    if len(vt):
        frames.append(vc.readings_metrics(tables))
        src["the vLLM targets (the runs with vLLM as shipped, the newest measurement of each "
            "point, within its run)"] = ([r for r in vruns if r.run_id in set(vt["run_id"])],
                                         vt.assign(point_id=vt["vllm_point_id"]))
    return frames


def targets_section(runs, device: str | None = None) -> list[str]:
    """Every target with data on `device` (target_inputs): the summary, per dtype and
    model, and every miss; no lines where no target has data."""
    ev, src = target_inputs(runs, device)
    if not src:
        return []
    lines = []
    for what, (rs, rows) in src.items():
        lines += [provenance(rs, rows) + f" ({what})", ""]
    out = [head("Targets", device), "", *lines,
           "Every target of `moe_lab.analysis.targets` with data, evaluated by its one "
           "function on the best point (graph mode): points, met, missed, the worst miss in "
           "the target's unit and in microseconds to take off the layer, where it is and the "
           "phase that holds it back (the ledger's phase with the most time above its floor; "
           "`gaps`: graph time no kernel covers). A target without a row has no data yet. "
           "A target whose candidates hold vLLM's kernels (as shipped, or running moe-lab's "
           "tuned files) has two readings side by side (`reading`): "
           f"`{tg.WITH_PEERS}` counts them among the layers, `{tg.OWN_KERNELS}` reads the "
           "workbook's own kernels alone.", ""]
    s = tg.summary(ev).drop(columns=["met_before"])
    out += md_table(s.assign(median=s["median"].map("{:.2f}".format)))
    per = []
    for (t, dt, rd), g in ev.groupby(["target", "dtype", "reading"], sort=False):
        by_model = t.startswith("fp8")
        for key, h in (g.groupby("model", sort=True) if by_model else [("all", g)]):
            per.append(dict(target=t, reading=rd, dtype=dt, model=key,
                            met=f"{int(h['met'].sum())} of {len(h)}"))
    out += ["", head("Targets per dtype (and model, for the FP8 targets)", device), "", *lines,
            *md_table(pd.DataFrame(per))]
    miss = ev[~ev["met"].astype(bool)].copy()
    miss["tokens"] = miss["tokens"].map(lambda t: "" if pd.isna(t) else f"{int(t)}")
    miss = miss.sort_values(["target", "reading", "by_us", "by"],
                            ascending=[True, False, False, False],  # with vLLM first
                            kind="stable")
    cols = ["target", "reading", "model", "sharding", "tokens", "dtype", "backend", "phase",
            "value", "limit", "by", "by_us", "held_back_by", "run_id"]
    show = miss[cols].assign(value=miss["value"].map("{:.3g}".format),
                             limit=miss["limit"].map("{:.3g}".format),
                             by=miss["by"].map("{:.3g}".format),
                             by_us=miss["by_us"].map(lambda v: "" if pd.isna(v) else f"{v:.1f}"))
    out += ["", head("Every target miss", device), "", *lines,
            "Each miss: the point, its value and limit, by how much (in the target's unit, and "
            "in microseconds), the phase that holds it back and the run it comes from.", "",
            *md_table(show)]
    return out


# --- tuning ---------------------------------------------------------------------------------

def _keys(v) -> str:
    v = sorted({int(x) for x in v})
    return ", ".join(map(str, v)) if v else "none"


def _stages(backend: str, model, tp, ep, dtype) -> int:
    """How many configurations the backend's search sets per shape (aiter-triton: one per
    GEMM; vllm: one for both); 2 for a backend this install does not know."""
    from .. import backends
    from ..core.problems import make_problem
    try:
        return len(backends.get(backend).config_space(
            make_problem(str(model), 1, str(dtype), int(tp), int(ep))))
    except Exception:  # noqa: BLE001 - a backend or model no longer here: both stages shown
        return 2


def _search_times(full: dict) -> list[str]:
    """How long a whole search of one shape takes: per backend, the wall time of the runs
    that searched one shape at every key of TUNE_TOKENS to the end (every key in every
    stage), none of their invocations killed (a killed one left no wall time)."""
    if not full:
        return []
    said = "; ".join(
        f"{b}: {w[0]:.0f} s (1 search)" if len(w) == 1 else
        f"{b}: {min(w):.0f}-{max(w):.0f} s, median {pd.Series(w).median():.0f} s ({len(w)} searches)"
        for b, w in sorted(full.items()))
    return ["How long a complete search of one shape takes (one GPU, every candidate compiled "
            f"and timed at the {len(TUNE_TOKENS)} token keys, every stage; the runs below that "
            f"searched one shape to the end, their wall time over all invocations, none killed): {said}.", ""]


def tune_section(runs, device: str | None = None) -> list[str]:
    """Per tune run on `device` and shape: the token keys the search set out to cover (each
    has its default timed), those with gemm1 and gemm2 candidates timed, the candidates,
    the winners' speedup over the default in the search, and the manifest's wall time."""
    from ..analysis.tuned import tune_table
    rows, used, full = [], [], {}
    for r in tf.tune_runs(device):
        m = r.manifest
        c = tune_table(r.path, "candidates")[1]  # read (and checked) by tune_runs
        w = tune_table(r.path, "winners")
        if w is None:  # unreadable: the run passed over, said once
            continue
        used.append(r)
        w = w[1] if w[1] is not None else pd.DataFrame()
        inv = m.get("invocations") or []
        wall = float(m.get("wall_s_total") or m.get("wall_s") or 0)
        timed = bool(inv) and all(i.get("wall_s") is not None for i in inv)  # none killed
        shapes = c.groupby(["model", "tp", "ep", "dtype"])
        for (model, tp, ep, dt), g in shapes:
            ok = g[g["status"] == "ok"]
            keys = set(g.loc[g["stage"] == "default", "tokens"]) or set(g["tokens"])
            g1, g2 = set(ok.loc[ok["stage"] == "gemm1", "tokens"]), set(
                ok.loc[ok["stage"] == "gemm2", "tokens"])
            ws = w[(w["model"] == model) & (w["tp"] == tp) & (w["ep"] == ep)
                   & (w["dtype"] == dt)] if len(w) else w
            left = [x for x in (m.get("left") or []) if str(x.get("shape", "")).startswith(
                f"{model} {sharding_name(tp, ep)} ")]
            backend = (m.get("config") or {}).get("backend", "")
            stages = _stages(backend, model, tp, ep, dt)
            rows.append(dict(
                run=f"`{r.run_id}`", backend=backend,
                shape=f"{model} {sharding_name(tp, ep)} {dt}", keys=_keys(keys),
                gemm1_not_searched=_keys(keys - g1),
                gemm2_not_searched=_keys(keys - g2) if stages > 1
                else "(one configuration for both GEMMs)",
                candidates=f"{len(ok)} of {len(g)}",
                winner_speedup=span(ws["speedup"]) + "x" if len(ws) else "no winner",
                run_wall_s=f"{wall:.0f}",
                invocations=len(inv),
                dates=", ".join(sorted({str(i.get("started", ""))[:10] for i in inv})) or date(r),
                commits=", ".join(sorted({str(i.get("git_commit", ""))[:7] for i in inv})),
                status=str(m.get("status") or "") + (
                    "; left: " + "; ".join(f"{x.get('stage')} keys {_keys(x.get('keys_left', []))}"
                                          for x in left) if left else "")))
            searched = not keys - g1 and (stages == 1 or not keys - g2)
            if timed and shapes.ngroups == 1 and m.get("status") == "complete" \
                    and keys == set(TUNE_TOKENS) and searched:
                full.setdefault(backend, []).append(wall)
    if not used:
        return []
    return [head("Tuning searches", device), "", runs_line(used), "", *_search_times(full),
            "Per `moe-lab tune` run and shape: the token keys the search set out to cover, the "
            "keys whose gemm1 or gemm2 stage has no candidate timed (those keep the default "
            "configuration for that stage; vLLM's kernel takes one configuration for both "
            "GEMMs, searched as gemm1), candidates timed ok of all, the winners' speedup "
            "over the default configuration as the search timed them, the run's wall time "
            "over all its invocations (the manifest's, not a script's allotment), and the "
            "manifest's status (with what it says is left of that shape).", "", *md_table(pd.DataFrame(rows))]


def tuned_section(runs, device: str | None = None) -> list[str]:
    """Per sweep run (of `runs`: the device's), backend, dtype, model and sharding with both
    configurations ok in graph: points, default/tuned over them."""
    from ..analysis.tuned import default_and_tuned
    rows, used = [], []
    for r in runs:
        res = r.results
        if r.manifest.get("kind") in ("tune", "import") or "config" not in res:
            continue
        j = default_and_tuned(res)
        if j.empty:
            continue
        used.append(r)
        j["ratio"] = j["median_us_d"] / j["median_us_t"]
        j["sharding"] = _sharding(j)
        for (b, dt, mo, sh), h in j.groupby(["backend", "dtype", "model", "sharding"]):
            rows.append(dict(run=f"`{r.run_id}` ({date(r)})", backend=b, dtype=dt, model=mo,
                             sharding=sh, points=len(h), tokens=span(h["tokens"], "{:.0f}"),
                             default_over_tuned=span(h["ratio"]) + "x",
                             tuned_faster=f"{int((h['ratio'] > 1).sum())} of {len(h)}",
                             commits=", ".join(r.commits(res[res["point_id"].isin(
                                 pd.concat([h["point_id_d"], h["point_id_t"]]))]))))
    if not used:
        return []
    return [head("Tuned against default", device), "", runs_line(used), "",
            "Per sweep run, backend, dtype, model and sharding: the points with both "
            "configurations ok in graph mode (the glue a deployment runs), the token range, "
            "default / tuned over them (above 1: tuned faster).", "", *md_table(pd.DataFrame(rows))]


def glue_section(runs, device: str | None = None) -> list[str]:
    """Per run (of `runs`: the device's) with rows of the fused glue and another variant
    (naive: PyTorch's; aiter: aiter's own kernels): other / fused per (backend, config,
    dtype, model, sharding), over the token counts both measured."""
    rows, used = [], []
    key = ["model", "tp", "ep", "ep_rank", "dtype", "routing", "tokens", "backend", "config"]
    for r in runs:
        res = r.results
        if "glue" not in res or "fused" not in set(res["glue"].dropna()):
            continue
        g = ok_rows(res[res["mode"] == "graph"])
        found = False
        for other in ("naive", "aiter"):
            j = g[g["glue"] == "fused"].merge(g[g["glue"] == other], on=key,
                                              suffixes=("_f", "_o"))
            if j.empty:
                continue
            found = True
            j["ratio"] = j["median_us_o"] / j["median_us_f"]
            j["sharding"] = _sharding(j)
            for (b, cfg, dt, mo, sh), h in j.groupby(["backend", "config", "dtype", "model",
                                                      "sharding"]):
                big = h[h["tokens"] == h["tokens"].max()]
                rows.append(dict(run=f"`{r.run_id}` ({date(r)})", glue=f"{other} / fused",
                                 backend=b, config=cfg, dtype=dt, model=mo, sharding=sh,
                                 tokens=_keys(h["tokens"]), ratio=span(h["ratio"]) + "x",
                                 at_most_tokens=f"{span(big['ratio'])}x at "
                                                f"{int(big['tokens'].iloc[0])}",
                                 commits=", ".join(r.commits())))
        if found:
            used.append(r)
    if not used:
        return []
    return [head("What fused glue buys", device), "", runs_line(used), "",
            "Per run that measured the glue a deployment runs (`fused`: one kernel per step, "
            "ours or aiter's, whichever is faster) beside another variant: the same point "
            "with PyTorch's glue (`naive`) or with aiter's own glue kernels wherever aiter "
            "ships one (`aiter`), over the fused, graph mode (above 1: fused faster).", "",
            *md_table(pd.DataFrame(rows))]
