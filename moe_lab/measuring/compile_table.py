"""The compile table: one row per backend x compile variant x wrapped of a shard.

A compile row sums up its per-point rows (compile time of the first token count, total
recompiles, graph breaks and their reasons, the first error). The per-point rows in
results.parquet are the record: after a kill and a resume, `recount_compile_rows` rebuilds
the counts from them and `merge_compile_rows` folds the two calls' compile rows into one.
"""
from __future__ import annotations

import math
from collections import Counter

import pandas as pd

from ..storage.store import RunStore

COMPILE_KEY = ("model", "tp", "ep", "ep_rank", "dtype", "routing", "backend", "mode", "wrapped")


def rollup_status(statuses: list[str]) -> str:
    """One status for a backend x variant x wrapped from its points' statuses: `ok` when
    every point ran (ok or incorrect), `partial` when some did, else the points' common
    status (e.g. `timeout`) or `failed`."""
    ran = sum(s in ("ok", "incorrect") for s in statuses)
    if ran == len(statuses):
        return "ok"
    if ran:
        return "partial"
    return statuses[0] if len(set(statuses)) == 1 else "failed"


def compile_row(base, backend, variant, wrapped, vrows, brk, brk_error, device) -> dict:
    first = vrows[0]
    errors = [r["error"] for r in vrows if r["status"] not in ("ok",) and r["error"]]
    status = rollup_status([r["status"] for r in vrows])
    return dict(
        {k: base[k] for k in ("model", "tp", "ep", "ep_rank", "dtype", "routing")},
        backend=backend, mode=variant, wrapped=wrapped, device=str(device),
        tokens_first=first["tokens"], compile_s=first["compile_s"],
        compile_s_total=sum(r["compile_s"] for r in vrows if not math.isnan(r["compile_s"])),
        recompiles=sum(r["recompiles"] for r in vrows),
        graphs=brk["graphs"], graph_breaks=brk["graph_breaks"],
        break_reasons="\n".join(f"{r} (x{n})" if n > 1 else r
                                 for r, n in Counter(brk["reasons"]).items()),
        points=len(vrows), points_ok=sum(r["status"] == "ok" for r in vrows),
        status=status, error=(errors[0] if errors else brk_error),
    )


def merge_compile_rows(old: dict, new: dict) -> dict:
    """One compile-table row for a backend x variant x wrapped whose token grid was measured
    in two calls (a resumed sweep: `old` covers the first token counts, `new` the rest).
    Counts add up; every graph the second call compiled, its first token count's included,
    is a recompile of the whole grid; the first compile is the one at the smaller token
    count."""
    def num(r, k):
        v = r.get(k)
        return 0 if v is None or (isinstance(v, float) and math.isnan(v)) else v
    first = old if num(old, "tokens_first") <= num(new, "tokens_first") else new
    out = dict(new)
    out.update(
        tokens_first=first.get("tokens_first"), compile_s=first.get("compile_s"),
        compile_s_total=num(old, "compile_s_total") + num(new, "compile_s_total"),
        recompiles=num(old, "recompiles") + num(new, "recompiles")
        + num(new, "graphs_first_token"),
        graphs_first_token=num(old, "graphs_first_token"),
        points=num(old, "points") + num(new, "points"),
        points_ok=num(old, "points_ok") + num(new, "points_ok"),
        cudagraph_skips=num(old, "cudagraph_skips") + num(new, "cudagraph_skips"),
        cudagraph_skip_reasons="\n".join(dict.fromkeys(
            ln for r in (old, new) for ln in str(r.get("cudagraph_skip_reasons") or "").splitlines()
            if ln)),
        error=old.get("error") or new.get("error") or "",
        merged_calls=num(old, "merged_calls") + 1,
    )
    for k in ("graphs", "graph_breaks", "break_reasons"):
        if out.get(k) is None or (isinstance(out.get(k), float) and math.isnan(out[k])):
            out[k] = old.get(k)
    if out["points_ok"] == out["points"]:
        out["status"] = "ok"
    elif out["points_ok"] == 0 and old.get("status") == new.get("status"):
        out["status"] = new.get("status")
    else:
        out["status"] = "partial" if out["points_ok"] else "failed"
    return out


def recount_compile_rows(crows: list[dict], results) -> list[dict]:
    """The counts of each compile row (points, points_ok, compile_s_total, the first
    token count and its compile time, status) recomputed from the results rows of the
    same backend x variant x wrapped: the per-point rows are the record, and a sweep that
    was killed mid-variant and resumed leaves its in-flight compile row unwritten. Graph
    breaks, reasons and recompiles stay as the compile sweep counted them."""
    if results is None or not len(results) or not crows:
        return crows
    out = []
    for c in crows:
        wrapped = results["wrapped"].fillna(False).astype(bool) if "wrapped" in results \
            else pd.Series(False, index=results.index)
        sel = results[(results["mode"] == c["mode"]) & (results["backend"] == c["backend"])
                      & (wrapped == bool(c.get("wrapped")))]
        for k in ("model", "tp", "ep", "ep_rank", "dtype", "routing"):
            if k in sel.columns and k in c:
                sel = sel[sel[k].astype(str) == str(c[k])]
        if not len(sel):
            out.append(c)
            continue
        sel = sel.sort_values("tokens")
        n_ok = int((sel["status"] == "ok").sum())
        status = rollup_status(list(sel["status"]))
        c = dict(c, points=len(sel), points_ok=n_ok, tokens_first=int(sel["tokens"].iloc[0]),
                 compile_s=float(sel["compile_s"].iloc[0]),
                 compile_s_total=float(pd.to_numeric(sel["compile_s"]).fillna(0).sum()),
                 status=status)
        out.append(c)
    return out


def refresh_compile_table(run_dir) -> int:
    """Recount every compile row of a run folder from its results (see
    recount_compile_rows); returns the number of rows rewritten."""
    store = RunStore(run_dir)
    table = store.load_table("compile")
    if not len(table):
        return 0
    rows = recount_compile_rows(table.to_dict("records"), store.load_results())
    store.append_table("compile", rows, key=COMPILE_KEY)
    return len(rows)


