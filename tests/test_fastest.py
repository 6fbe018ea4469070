"""The fastest path per point (moe_lab.analysis.fastest, issue 64) on the committed vLLM
comparison runs: the fastest is the lowest correct, timed row of the point in its run,
never an incorrect or failed one, never a row of another run or of the naive glue; its %
of peak reads the peak of its own dtype; the findings state what the table holds."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from moe_lab.analysis import fastest as fa, vllm_compare as vc
from moe_lab.core.devices import ceilings_for


@pytest.fixture(scope="module")
def res():
    runs = vc.vllm_runs(device="NVIDIA H200")
    if not runs:
        pytest.skip("no committed H200 vLLM comparison runs")
    return vc.compared(runs)[0]


def test_the_fastest_is_the_lowest_ok_row_of_the_point_in_its_run(res):
    t = fa.fastest(res)
    assert len(t) and (t["paths"] >= 2).all()
    ok = res[(res["status"] == "ok") & (res["glue"].fillna("").isin(["", "fused"]))]
    for r in t.sample(20, random_state=0).itertuples(index=False):
        g = ok[(ok["run_id"] == r.run_id) & (ok["model"] == r.model) & (ok["dtype"] == r.dtype)
               & (ok["tokens"] == r.tokens) & (ok["mode"] == r.mode)
               & ((ok["ep"] > 1) == ("EP" in r.sharding))]
        assert r.fastest_us == pytest.approx(g["median_us"].min())
        v = g[(g["backend"] == "vllm") & (g["config"].fillna("default") == "default")]
        assert r.over_vllm == pytest.approx(r.fastest_us / v["median_us"].iloc[0])


def test_an_incorrect_faster_row_or_another_runs_row_is_never_the_fastest(res):
    base = fa.fastest(res)
    row = res[(res["status"] == "ok") & (res["backend"] == "vllm")].iloc[[0]].copy()
    bad = row.assign(status="incorrect", median_us=0.001, backend="torch-grouped")
    other = row.assign(run_id="another-run", median_us=0.002)
    t = fa.fastest(pd.concat([res, bad], ignore_index=True))
    assert t["fastest_us"].min() == base["fastest_us"].min()
    t2 = fa.fastest(pd.concat([res, other], ignore_index=True))
    mine = t2[t2["run_id"] == "another-run"]
    assert len(mine) == 1 and mine["paths"].iloc[0] == 1  # compared within its own run only
    assert (t2[t2["run_id"] != "another-run"]["fastest_us"].values ==
            base["fastest_us"].values).all()


def test_pct_of_peak_reads_the_peak_of_the_rows_own_dtype(res):
    t = fa.newest(fa.fastest(res))
    c = ceilings_for("NVIDIA H200")
    for dtype, peak in (("bf16", c.tflops_bf16), ("fp8-block128", c.tflops_fp8)):
        r = t[t["dtype"] == dtype].iloc[-1]
        src = res[(res["run_id"] == r.run_id) & (res["dtype"] == dtype)
                  & (res["tokens"] == r.tokens) & (res["median_us"] == r.fastest_us)].iloc[0]
        want = 100 * src["flops"] / src["median_us"] / 1e6 / peak
        assert r.pct_of_peak == pytest.approx(want)


def test_by_shape_counts_every_newest_point_once(res):
    t = fa.fastest(res)
    s = fa.by_shape(t)
    now = fa.newest(t)
    assert s["points"].sum() == len(now)
    assert len(now) == len(now.drop_duplicates(["model", "sharding", "dtype", "mode", "tokens"]))
    for r in s.itertuples(index=False):
        counts = [int(x.rsplit("(", 1)[1].rstrip(")")) for x in r.fastest.split(", ")]
        assert sum(counts) == r.points
    assert np.isfinite(s["median_pct_of_peak_prefill"]).all()


def test_empty_and_wrong_frames_are_refused_or_empty():
    assert fa.fastest(pd.DataFrame(columns=["model", "tp", "ep", "dtype", "backend", "mode",
                                            "tokens", "status", "median_us", "flops",
                                            "device"])).empty
    from moe_lab.core.errors import UsageError
    with pytest.raises(UsageError):
        fa.fastest(pd.DataFrame({"x": [1]}))


def test_the_vllm_comparison_has_both_readings_and_a_deployed_base(res):
    """Issue 66/64: the own layers with vLLM's kernel on moe-lab's files and without it
    (OWN_ONLY) are two tables of one rule; with `vllm-deployed` rows the same rule runs
    against vLLM as deployed (here its rows are vLLM's own rows relabelled: the same times
    give the same ratios)."""
    with_v = vc.best_over_vllm(res)
    alone = vc.best_over_vllm(res, own=vc.OWN_ONLY)
    assert not alone["best"].str.startswith("vllm ").any()
    assert with_v["best"].str.startswith("vllm tuned").any()
    j = with_v.merge(alone, on=["run_id", "model", "tp", "ep", "dtype", "mode", "tokens"],
                     suffixes=("", "_alone"))
    assert (j["ratio"] <= j["ratio_alone"] + 1e-12).all()  # more candidates: never slower
    dep = res.assign(backend=np.where((res["backend"] == "vllm")
                                      & (res["config"].fillna("default") == "default"),
                                      "vllm-deployed", res["backend"]))
    t = vc.best_over_vllm(dep, base=vc.DEPLOYED, own=vc.OWN_ONLY)
    assert len(t) == len(alone) and np.allclose(t["ratio"].values, alone["ratio"].values)
