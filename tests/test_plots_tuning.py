"""moe_lab.plots.tuning on small hand-built tables: the best backend is the lowest median
among ok rows of the candidates only, incorrect and unsupported rows are never chosen or
drawn (nor named in a footer), the newest tuned run, and the winners table (the targets:
tests/test_targets.py)."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from moe_lab.core.devices import Ceilings
from moe_lab.core.errors import UsageError
from moe_lab.plots import tuning as tu
from moe_lab.storage.store import Run, RunStore

CEIL = Ceilings("test GPU", 700.0, None, 4.0, "measured")


def row(tokens=16, backend="aiter-triton", config="default", median_us=100.0, status="ok",
        model="deepseek-r1", sharding="TP8", commit="c0ffee1", **kw):
    tp, ep = 8, 8 if sharding.endswith("EP8") else 1
    r = dict(model=model, sharding=sharding, tp=tp, ep=ep, ep_rank=0, dtype="bf16",
             routing="uniform", tokens=tokens, backend=backend, config=config, mode="graph",
             status=status, error="" if status == "ok" else f"{status}: why",
             median_us=median_us, choice=f"{backend} {config}", git_commit=commit,
             device="test GPU", pct_of_roof=50.0, pct_of_gemm_peak=10.0, dense_gemm_us=10.0,
             pairs=tokens * 8, experts_hit=min(tokens * 8, 256))
    r.update(kw)
    r["point_id"] = kw.get("point_id") or "-".join(
        str(r[k]) for k in ("model", "sharding", "tokens", "backend", "config"))
    return r


def frame(*rows) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


def run_of(rows: pd.DataFrame, kernels=None) -> Run:
    """A Run held in memory (open_run passes a Run through)."""
    return Run(Path("/nonexistent/r"), {}, rows, kernels if kernels is not None else
               pd.DataFrame(columns=["point_id", "kernel", "phase", "calls", "total_us"]))


def footer_of(fig) -> str:
    return fig.texts[-1].get_text().replace("\n", " ")


# --- the best backend -----------------------------------------------------------------------

def test_the_best_is_the_lowest_median_among_ok_rows_of_the_candidates_only():
    rows = frame(row(64, "torch-grouped", median_us=300.0),
                 row(64, "aiter-triton", median_us=250.0),
                 row(64, "aiter-triton", "tuned", median_us=90.0, status="incorrect"),
                 row(64, "aiter-triton", "tuned", median_us=80.0, status="unsupported",
                     point_id="u"),
                 row(64, "aiter-triton-silu", median_us=10.0),  # not a candidate
                 row(64, "aiter-triton", "tuned", median_us=np.nan, point_id="nan"))
    best = tu.best_per_point(rows)
    assert len(best) == 1 and best.iloc[0]["choice"] == "aiter-triton default"
    assert best.iloc[0]["median_us"] == 250.0
    assert tu.best_per_point(rows, None).iloc[0]["backend"] == "aiter-triton-silu"
    assert tu.best_per_point(rows, [("torch-grouped", "default")]).iloc[0]["median_us"] == 300.0


def test_before_and_after_per_point_with_the_gain():
    rows = frame(row(1, "torch-grouped", median_us=100.0, pct_of_roof=20.0),
                 row(1, "aiter-triton", median_us=120.0),
                 row(1, "aiter-triton", "tuned", median_us=50.0, pct_of_roof=40.0),
                 row(2, "torch-grouped", median_us=100.0),
                 row(2, "aiter-triton", "tuned", median_us=500.0))
    ba = tu.before_after(rows).set_index("tokens")
    assert ba.loc[1, "before_choice"] == "torch-grouped default"
    assert ba.loc[1, "after_choice"] == "aiter-triton tuned" and ba.loc[1, "gain"] == 2.0
    assert (ba.loc[1, "before_pct_of_roof"], ba.loc[1, "after_pct_of_roof"]) == (20.0, 40.0)
    assert ba.loc[1, "after_over_dense"] == 5.0
    # a slower tuned row does not make the point worse: the best can only improve
    assert ba.loc[2, "after_choice"] == "torch-grouped default" and ba.loc[2, "gain"] == 1.0


def test_the_roof_figure_never_draws_or_names_incorrect_rows():
    rows = frame(row(16, "torch-grouped", median_us=200.0, commit="aaaaaaa"),
                 row(16, "aiter-triton", "tuned", median_us=100.0, commit="bbbbbbb"),
                 row(16, "aiter-triton", "default", median_us=50.0, status="incorrect",
                     commit="ddddddd"),
                 row(32, "torch-grouped", median_us=300.0, commit="aaaaaaa"))
    run = run_of(rows)
    ba = tu.before_after(rows)
    text = footer_of(tu.fig_best_pct_of_roof(run, ba))
    assert "commits aaaaaaa, bbbbbbb" in text and "ddddddd" not in text
    assert set(ba["after_choice"]) == {"aiter-triton tuned", "torch-grouped default"}


# --- tuned over default -------------------------------------------------------------------

def test_tuned_over_default_lists_the_missing_and_draws_only_the_ratios():
    rows = frame(row(1, median_us=200.0), row(1, config="tuned", median_us=100.0, commit="bbbbbbb"),
                 row(2, median_us=100.0), row(2, config="tuned", median_us=125.0, commit="bbbbbbb"),
                 row(4, median_us=100.0),
                 row(4, config="tuned", median_us=np.nan, status="unsupported",
                     commit="eeeeeee"),
                 row(8, "torch-grouped", median_us=10.0))  # no tuned rows: not compared
    t = tu.tuned_vs_default(rows).set_index("tokens")
    assert list(t.index) == [1, 2, 4]
    assert t.loc[1, "default_over_tuned"] == 2.0 and t.loc[2, "default_over_tuned"] == 0.8
    assert np.isnan(t.loc[4, "default_over_tuned"]) and t.loc[4, "tuned_status"] == "unsupported"
    text = tu.tuned_summary(t.reset_index())
    assert "tuned faster than default at 1 of 2 points" in text
    assert "max 2.00x (aiter-triton deepseek-r1 TP8, 1 tokens)" in text
    assert "min 0.80x" in text and "tuned missing (not drawn) at 1 points" in text
    assert "tokens 4: unsupported: unsupported: why" in text
    fig = tu.fig_tuned_over_default(run_of(rows), t.reset_index())
    lines = [ln for ax in fig.axes for ln in ax.get_lines() if not ln.get_label().startswith("_")]
    assert [list(ln.get_xdata()) for ln in lines] == [[1, 2]]  # the unsupported 4 is not drawn
    assert "eeeeeee" not in footer_of(fig) and "commits bbbbbbb, c0ffee1" in footer_of(fig)
    r = tu.by_tokens(t.reset_index(), "default_over_tuned", ("backend", "model", "sharding"))
    assert list(r.columns) == [1, 2, 4] and np.isnan(r.iloc[0][4])


# --- where the time goes ----------------------------------------------------------------------

def kernels(point_id, **phases):
    return [dict(point_id=point_id, kernel=f"k_{p}", phase=p, calls=1.0, total_us=us)
            for p, us in phases.items()]


def test_best_and_worst_phases_skip_incorrect_rows():
    rows = frame(row(64, "torch-grouped", median_us=300.0, point_id="tg"),
                 row(64, "aiter-triton", median_us=200.0, point_id="at"),
                 row(64, "aiter-triton", "tuned", median_us=900.0, status="incorrect",
                     point_id="bad"),
                 row(64, "aiter-triton", "tuned", median_us=100.0, point_id="tu"),
                 row(64, "torch-grouped", median_us=50.0, sharding="TP8+EP8", point_id="ep"))
    k = pd.DataFrame(kernels("tg", gemm1=200.0, combine=90.0) + kernels("at", gemm1=190.0)
                     + kernels("tu", gemm1=90.0, act=5.0) + kernels("bad", gemm1=1.0))
    t = tu.phase_best_worst(run_of(rows, k), rows, tokens=(64,))
    assert list(t["rank"]) == ["best", "worst"] and list(t["point_id"]) == ["tu", "tg"]
    assert list(t["kernel_us"]) == [95.0, 290.0] and t.loc[0, "combine"] == 0.0
    fig = tu.fig_phase_bars(run_of(rows, k), t)
    assert "commit c0ffee1" in footer_of(fig) and len(fig.legends) == 1


def test_kernel_labels_name_the_op_and_its_element_type():
    names = {  # kernel names as the H200 profiles recorded them (shortened)
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<"
        "at::native::(anonymous namespace)::where_kernel_impl(at::TensorIterator&)::"
        "{lambda()#1}::operator()() const::{lambda()#11}::operator()() const::"
        "{lambda(bool, float, float)#1}>(int)": "elementwise_kernel[where fp32]",
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<"
        "at::native::BinaryFunctor<float, float, float, "
        "at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&)>(int)":
            "elementwise_kernel[Mul fp32]",
        "void at::native::indexFuncLargeIndex<float, long, unsigned int, 2, 2, -2, true, "
        "at::native::(anonymous namespace)::ReduceAdd>("
        "at::cuda::detail::TensorInfo<float, unsigned int>)": "indexFuncLargeIndex[ReduceAdd fp32]",
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::"
        "TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::"
        "{lambda(float)#1}, std::array<char*, 2ul>, 4>(int)":
            "unrolled_elementwise_kernel[direct_copy fp32]",
        "_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9xINS_4gemm6kernel"
        "13GemmUniversalINS5_17GroupProblemShapeIN4cute5tupleIJiiiEEEEE": "cutlass grouped GEMM",
        "Memcpy DtoD (Device -> Device)": "Memcpy DtoD",
    }
    for name, label in names.items():
        assert tu.kernel_label(name) == label, name


# --- which run; the winners -------------------------------------------------------------------

def write_run(root, name, started, rows):
    store = RunStore(root / name)
    store.write_manifest(dict(run_id=name, started=started))
    store.append([{k: v for k, v in r.items() if k not in ("choice", "sharding")} for r in rows])


def test_the_default_run_is_the_newest_with_ok_tuned_rows(tmp_path, monkeypatch):
    monkeypatch.setenv("MOE_LAB_DATA", str(tmp_path))
    with pytest.raises(UsageError, match="no run under"):
        tu.open_tuned_run(None)
    write_run(tmp_path, "old-tuned", "2026-01-01T00:00:00", [row(1), row(1, config="tuned")])
    write_run(tmp_path, "newer-unsupported", "2026-02-01T00:00:00",
              [row(1), row(1, config="tuned", status="unsupported", median_us=np.nan)])
    write_run(tmp_path, "newest-default", "2026-03-01T00:00:00", [row(1)])
    assert tu.open_tuned_run(None).run_id == "old-tuned"
    with pytest.raises(UsageError, match="run newest-default has no ok rows"):
        tu.open_tuned_run("newest-default")
    assert tu.open_tuned_run("old-tuned").run_id == "old-tuned"


def write_tune(root, name, backend, started, winners):
    (root / name).mkdir()
    (root / name / "manifest.json").write_text(json.dumps(dict(
        kind="tune", started=started, config=dict(backend=backend),
        environment=dict(device_name="test GPU"))))
    pd.DataFrame(winners).to_parquet(root / name / "winners.parquet")


def winner(tokens, bm, measured_at, median_us=10.0):
    cfg = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=32, BLOCK_SIZE_K=128, GROUP_SIZE_M=1, num_warps=4,
               num_stages=3)
    return dict(model="deepseek-r1", tp=8, ep=1, ep_rank=0, dtype="bf16", tokens=tokens,
                backend="aiter-triton",
                config=json.dumps(dict(gemm1=cfg, gemm2=dict(cfg, num_stages=4))),
                median_us=median_us, default_us=2 * median_us, speedup=2.0, measured_at=measured_at)


def test_winners_table_keeps_the_newest_winner_and_sets_the_shipped_config_beside_it(tmp_path):
    write_tune(tmp_path, "tune-a", "aiter-triton", "1", [winner(1, 16, "2026-01-01"),
                                                        winner(4096, 64, "2026-01-01")])
    write_tune(tmp_path, "tune-b", "aiter-triton", "2", [winner(4096, 128, "2026-02-01", 5.0)])
    write_tune(tmp_path, "tune-silu", "aiter-triton-silu", "3", [winner(1, 32, "2026-03-01")])
    (tmp_path / "a-sweep").mkdir()  # no winners: not a tune run
    w = tu.winners_table(root=tmp_path, device="test GPU").set_index("tokens")
    assert list(w.index) == [1, 4096] and w.loc[4096, "tune_run"] == "tune-b"
    assert w.loc[4096, "tuned_gemm1"] == "M128 N32 K128 G1 w4 s3"
    assert w.loc[4096, "tuned_gemm2"] == "M128 N32 K128 G1 w4 s4" and w.loc[4096, "tuned_us"] == 5.0
    assert w.loc[1, "sharding"] == "TP8" and w.loc[1, "tune_run"] == "tune-a"
    from moe_lab.backends.aiter_triton import aiter_moe_configs, aiter_root, pick_config
    if aiter_root() is None:  # amd-aiter not installed: the column says so
        assert w.loc[4096, "shipped"].startswith("unknown")
    else:  # aiter's large_M and small_M configurations, AMD-only keys stripped
        assert w.loc[4096, "shipped"] == tu.compact(
            pick_config(aiter_moe_configs("MI300X"), 4096, strip_amd=True))
        assert w.loc[1, "shipped"] == "M64 N64 K64 G4 w8 s2"
    assert tu.winners_table(root=tmp_path, device="another GPU").empty
