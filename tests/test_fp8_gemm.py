"""The FP8 GEMM against its speed of light (moe_lab.plots.fp8_gemm) on the committed H200
runs of 2026-12-01: the TFLOP/s are the rows' own flops over their stored GEMM phases, the
torch._scaled_grouped_mm reference sits on the same points, the verdict's arithmetic holds,
and it names the kernel where the FP8 GEMM is what is slow."""
from __future__ import annotations

import pytest

from moe_lab.plots import fp8_gemm as fg
from moe_lab.storage.store import open_run

RUNS = ["h200-align-fp8-block128-tp8ep8-20261201", "h200-align-bf16-base-tp8ep8-20261201",
        "h200-align-sgmm-fp8-channel-tp8ep8-20261201"]


@pytest.fixture(scope="module")
def table():
    return fg.gemm_table(RUNS)


def test_a_row_per_point_with_the_reference_beside_it(table):
    b = table[table["scheme"] == "fp8-block128"]
    assert set(b["model"]) == {"deepseek-r1", "qwen3-235b-a22b"}
    assert set(b["tokens"]) == {1 << i for i in range(14)}
    assert b["sol_tflops"].notna().all() and (b["sol_run"] == RUNS[2]).all()
    assert (b["bf16_run"] == RUNS[1]).all() and (b["fp8_run"] == RUNS[0]).all()


def test_tflops_are_the_rows_flops_over_their_gemm_phases(table):
    run = open_run(RUNS[0])
    r = table[(table["scheme"] == "fp8-block128") & (table["tokens"] == 4096)
              & (table["model"] == "deepseek-r1")].iloc[0]
    row = run.results[(run.results["model"] == "deepseek-r1") & (run.results["tokens"] == 4096)
                      & (run.results["mode"] == "graph") & (run.results["median_us"] == r["fp8_us"])]
    assert len(row) == 1
    ph = run.phases[(run.phases["point_id"] == row["point_id"].iloc[0])
                    & run.phases["phase"].isin(["gemm1", "gemm2"])]
    gemm_us = ph["measured_us"].sum()
    assert r["fp8_gemm_us"] == pytest.approx(gemm_us)
    assert r["fp8_tflops"] == pytest.approx(row["flops"].iloc[0] / gemm_us / 1e6)
    assert r["pct_of_fp8_peak"] == pytest.approx(100 * r["fp8_tflops"] / r["fp8_peak_tflops"])


def test_the_verdict_splits_the_excess_and_names_the_larger(table):
    assert len(table) > 0, "no row to check the verdict of"
    for _, r in table.iterrows():
        need = r["bf16_us"] / r["promise"]
        assert r["excess_us"] == pytest.approx(max(0.0, r["fp8_us"] - need))
        # the two shares add up to the excess (when there is one)
        if r["excess_us"] > 0:
            assert r["gemm_excess_us"] + r["glue_excess_us"] == pytest.approx(r["excess_us"])
            assert r["excess_in"] == ("kernel" if r["gemm_excess_us"] >= r["glue_excess_us"]
                                         else "glue")
        else:
            assert r["excess_in"] == ""


def test_at_prefill_the_fp8_gemm_not_the_glue_holds_block128_back(table):
    # measured: DeepSeek-R1 TP8+EP8, 4096 and 8192 tokens, aiter-triton fp8-block128 GEMMs
    # are slower than bf16's and than torch._scaled_grouped_mm's on the same rows
    d = table[(table["scheme"] == "fp8-block128") & (table["model"] == "deepseek-r1")
              & (table["tokens"] >= 4096)]
    assert len(d) == 2 and (d["excess_in"] == "kernel").all()
    assert (d["sol_tflops"] > d["fp8_tflops"]).all()
    v = fg.verdict(table)
    words = v[(v["scheme"] == "fp8-block128") & (v["model"] == "deepseek-r1")]["verdict"].iloc[0]
    assert "the FP8 GEMM" in words and "torch._scaled_grouped_mm" in words


def test_the_figure_names_every_run_it_draws(table):
    fig = fg.fig_gemm_sol(table, *fg.sources(table))
    text = " ".join(t.get_text() for t in fig.texts).replace("\n", " ")
    for r in RUNS:
        assert r in text
