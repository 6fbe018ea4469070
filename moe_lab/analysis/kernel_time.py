"""Kernel time, for notebooks/01_kernel_time.ipynb: time per call against tokens, the
device time per phase, launch overhead (eager - graph), and whether the profiler sees the
whole graph time.

Every function takes a run (a moe_lab.storage.store.Run, or what open_run accepts). Tables are
DataFrames; figures are matplotlib Figures with one legend and the provenance footer of
the rows they draw (moe_lab.plots.style)."""
from __future__ import annotations
import pandas as pd
from ..storage import rows as row_schema
from ..core.problems import sharding_name
from ..storage.store import open_run
from ..storage.rows import ok_rows
# profiler kernel sum / graph time accepted as complete: the range check_kernel_coverage
# warns by (the rows' vocabulary), re-exported for the notebook
from ..storage.vocabulary import COVERAGE_RANGE, PHASES
from ..storage.checked import MODE, RUN, TEXT, WHOLES, frame, takes


PHASE_TOKENS = (1, 64, 1024, 8192)


SPEEDUP_TOKENS = (1, 16, 64, 256, 1024, 4096, 8192)


@takes(rows=frame("status", "median_us", "tp", "ep"))
def ok_times(rows: pd.DataFrame) -> pd.DataFrame:
    """Only correct, timed points (status ok and a median), with a `sharding` column and
    `spread` ((p90 - p10) / median) and `noisy` (flagged, or spread above the limit)."""
    r = ok_rows(rows).copy()
    r["sharding"] = [sharding_name(t, e) for t, e in zip(r["tp"], r["ep"])]
    return r.assign(spread=row_schema.spread(r), noisy=row_schema.noisy(r))


@takes(run=RUN, prefer=MODE)
def default_mode(run, prefer: str = "graph") -> str:
    """`prefer` when the run has ok rows in it, else eager (a CPU run has no graph rows)."""
    run = open_run(run)
    return prefer if run.has(prefer) else "eager"


@takes(run=RUN)
def status_table(run) -> pd.DataFrame:
    """Counts of each status per backend and mode, with the distinct reasons."""
    res = open_run(run).results
    g = res.groupby(["backend", "mode", "status"], dropna=False)
    out = g.size().rename("points").reset_index()
    out["reason"] = g["error"].agg(  # an empty error is NaN or "": no reason
        lambda s: "; ".join(sorted({x for x in s if isinstance(x, str) and x}))[:160]).values
    return out


@takes(run=RUN, mode=MODE | None, base=TEXT, tokens=WHOLES)
def speedup_table(run, mode: str | None = None, base: str = "torch-grouped",
                  tokens=SPEEDUP_TOKENS) -> pd.DataFrame | None:
    """Time of each backend, configuration and glue over `base`'s (its default
    configuration) at the same point (<1: faster than base), in `mode` (default graph,
    eager for a run without graph rows): a column per (backend, config, glue), never a
    mean over configurations. None when the run has no `base` point at these token counts
    in that mode: a table labelled as ratios holds ratios or is not shown."""
    run = open_run(run)
    mode = mode or default_mode(run)
    r = ok_times(run.results)
    r = r[(r["mode"] == mode) & r["tokens"].isin(tokens)]
    r = r.assign(**{k: r[k].fillna(row_schema.ID_DEFAULTS[k]) if k in r
                    else row_schema.ID_DEFAULTS[k] for k in ("config", "glue")})
    idx = ["model", "sharding"] + [k for k in ("dtype", "routing") if k in r and r[k].nunique() > 1]
    cols = ["backend", "config", "glue"]
    ref = r[(r["backend"] == base) & (r["config"] == "default")]
    if ref.empty or r.duplicated(idx + ["tokens"] + cols).any():  # one time per cell, or none
        return None
    piv = r.pivot(index=idx + ["tokens"], columns=cols, values="median_us")
    over = ref.set_index(idx + ["tokens"])["median_us"]
    return piv.div(over.reindex(piv.index), axis=0).round(2)


@takes(run=RUN, mode=MODE | None, base=TEXT)
def speedup_note(run, mode: str | None = None, base: str = "torch-grouped") -> str:
    """Why speedup_table shows no table (one line)."""
    run = open_run(run)
    mode = mode or default_mode(run)
    r = ok_times(run.results)
    has = ((r["backend"] == base) & (r["mode"] == mode) & r["tokens"].isin(SPEEDUP_TOKENS)).any()
    why = (f"has no {base} point at {', '.join(map(str, SPEEDUP_TOKENS))} tokens in {mode} mode"
           if not has else "has two points of one backend, configuration and glue per cell")
    return f"relative to {base}: not shown (run {run.run_id} {why}; a table of ratios holds ratios only)"


@takes(run=RUN, tokens=WHOLES, mode=MODE | None)
def phase_table(run, tokens=PHASE_TOKENS, mode: str | None = None) -> pd.DataFrame:
    """Device time per phase (us per call) at the chosen token counts, one row per point
    (point_id kept, so a figure can name the rows it draws). mode: default graph, eager
    for a run without graph rows."""
    run = open_run(run)
    mode = mode or default_mode(run)
    r = ok_times(run.results)
    r = r[r["tokens"].isin(list(tokens)) & (r["mode"] == mode)]
    k = run.kernels[run.kernels["point_id"].isin(r["point_id"])]
    piv = k.pivot_table(index="point_id", columns="phase", values="total_us", aggfunc="sum",
                        fill_value=0.0)
    cols = [p for p in PHASES if p in piv.columns]
    # config: a default and a tuned point of one backend and token count are two rows
    r = r.assign(config=r["config"].fillna("default") if "config" in r else "default")
    out = r.set_index("point_id")[["model", "sharding", "backend", "config", "mode", "tokens",
                                    "median_us"]].join(piv[cols], how="inner")
    out["kernel_us"] = out[cols].sum(axis=1)
    return out.reset_index().sort_values(["model", "sharding", "tokens", "backend", "config"]) \
        .reset_index(drop=True)


@takes(run=RUN)
def launch_overhead(run) -> pd.DataFrame:
    """eager - graph per point: what launching from Python costs (us and share of eager);
    point_id_eager / point_id_graph name the two rows."""
    r = ok_times(open_run(run).results)
    key = ["model", "sharding", "backend", "tokens", "routing"]
    key += [k for k in ("config", "glue") if k in r]  # a default and a tuned point: two rows
    r = r.assign(**{k: r[k].fillna(row_schema.ID_DEFAULTS[k]) for k in key[5:]})
    cols = ["median_us", "p10_us", "p90_us", "point_id", "noisy"]
    e = r[r["mode"] == "eager"].set_index(key)[cols]
    g = r[r["mode"] == "graph"].set_index(key)[cols]
    j = e.join(g, lsuffix="_eager", rsuffix="_graph", how="inner")
    j["overhead_us"] = j["median_us_eager"] - j["median_us_graph"]
    j["overhead_pct_of_eager"] = 100 * j["overhead_us"] / j["median_us_eager"]
    # eager may not be faster than graph beyond the two timers' spread
    noise = (j["p90_us_eager"] - j["p10_us_eager"]) + (j["p90_us_graph"] - j["p10_us_graph"])
    j["eager_below_graph_beyond_noise"] = j["overhead_us"] < -noise
    j["noisy"] = j["noisy_eager"] | j["noisy_graph"]  # either time of the difference
    return j.reset_index()


@takes(run=RUN)
def coverage_table(run) -> pd.DataFrame:
    """Graph points: profiler kernel time / graph time, in COVERAGE_RANGE or warned."""
    r = ok_times(open_run(run).results)
    g = r[r["mode"] == "graph"].copy()
    g["kernel_over_graph"] = g["kernel_us"] / g["median_us"]
    g["in_range"] = g["kernel_over_graph"].between(*COVERAGE_RANGE)
    g["warned"] = g["warning"].fillna("").str.contains("kernels sum to")
    return g[["model", "sharding", "backend", "tokens", "median_us", "kernel_us",
              "kernel_over_graph", "in_range", "warned", "warning"]].reset_index(drop=True)


@takes(run=RUN)
def coverage_summary(run) -> str:
    """One line: how many graph points have a kernel sum within COVERAGE_RANGE of the
    graph time, and how many outside it carry no warning."""
    cov = coverage_table(run)
    n, k = len(cov), int(cov["in_range"].sum())
    lo, hi = COVERAGE_RANGE
    if not n:
        return f"graph points with kernel sum within [{lo}, {hi}] of graph time: 0 of 0 (no graph point)"
    unwarned = int((~cov["in_range"] & ~cov["warned"]).sum())
    return (f"graph points with kernel sum within [{lo}, {hi}] of graph time: {k} of {n} "
            f"({k / n:.1%}); outside and unwarned: {unwarned}")
