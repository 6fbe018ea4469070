"""torch.compile of the MoE layer on the CPU: correctness, graph-break reasons, the custom
op wrapper, recompile counting, and failures as rows."""

import pandas as pd
import pytest
import torch

from moe_lab.measuring import compile as C
from moe_lab.measuring import custom_ops
from moe_lab.measuring.correctness import make_weights
from moe_lab.measuring.compile_table import merge_compile_rows
from moe_lab.measuring.layer import MoELayer
from moe_lab.storage.modes import parse_mode
from moe_lab.core.problems import make_problem

MODEL = "custom:H=64,I=32,E=4,k=2"


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    C.reset_dynamo()
    yield
    C.reset_dynamo()


def bench(tokens, backend, modes, wrapped=True, budget_s=C.COMPILE_BUDGET_S, on_row=None):
    """rows and compile rows of `modes` over `tokens` (one CompileBench, as the sweep does)."""
    b = C.CompileBench(make_problem(MODEL, tokens[0], dtype="fp32"), list(tokens), "cpu")
    rows, crows = [], []
    for m in modes:
        r, c = b.run(backend, parse_mode(m, wrapped=wrapped), budget_s, on_row)
        rows += r
        crows += [c] if c else []
    return rows, crows


def _setup(tokens=8, model=MODEL):
    p = make_problem(model, tokens, dtype="fp32")
    w = make_weights(p, "cpu", 0)
    x, logits = C.layer_inputs(p, "cpu")
    return p, w, x, logits


@pytest.mark.parametrize("wrap", [False, True])
def test_torch_layer_compiles_and_matches_reference(wrap):
    p, w, x, logits = _setup()
    layer = MoELayer(p, "torch", w, wrap=wrap)
    ref = C.layer_reference(p, w, x, logits, None)
    out = torch.compile(layer, dynamic=False)(x, logits)
    assert out.shape == (8, 64) and out.dtype == torch.float32
    assert (out - ref).abs().max() / ref.abs().max() < 2e-3


def test_graph_break_reason_is_the_real_one():
    def breaks(x):
        y = x * 2
        n = y.sum().tolist()  # host sync: Dynamo cannot keep it in the graph
        return y + n

    rep = C.graph_breaks(breaks, torch.randn(8))
    assert rep["graph_breaks"] == 1
    assert "tolist" in rep["reasons"][0]
    assert "test_compile.py" in rep["reasons"][0]  # points at the user's line

    def branches(x):
        if x.sum().item() > 0:  # data-dependent Python control flow
            return x + 1
        return x - 1

    rep = C.graph_breaks(branches, torch.randn(8))
    assert rep["graph_breaks"] == 1 and "item()" in rep["reasons"][0]


def test_torch_backend_breaks_unwrapped_not_wrapped():
    """The reference loop reads expert counts on the host: a real finding, recorded."""
    p, w, x, logits = _setup()
    unwrapped = C.graph_breaks(MoELayer(p, "torch", w, wrap=False), x, logits)
    wrapped = C.graph_breaks(MoELayer(p, "torch", w, wrap=True), x, logits)
    assert unwrapped["graph_breaks"] >= 1
    assert any("torch_ref.py" in r for r in unwrapped["reasons"])
    assert wrapped["graph_breaks"] == 0 and wrapped["graphs"] == 1


def test_custom_op_passes_opcheck():
    p, w, x, logits = _setup()
    from moe_lab.core.routing import route
    tw, ti = route(p.model, logits)
    op = custom_ops.experts_op("torch")
    result = torch.library.opcheck(op, (x, w.w1, w.w2, tw, ti, None, False))
    assert all(v == "SUCCESS" for v in result.values()), result
    assert str(op._qualname) == "moe_lab::torch_experts"


def test_custom_op_expert_map_and_weight_on_input():
    """EP (expert_map) and Llama-4 weight-on-input go through the op unchanged."""
    p = make_problem("custom:H=64,I=32,E=4,k=1,router=llama4", 8, dtype="fp32", tp=2, ep=2,
                     ep_rank=1)
    w = make_weights(p, "cpu", 0)
    x, logits = C.layer_inputs(p, "cpu")
    ref = C.layer_reference(p, w, x, logits, None)
    out = MoELayer(p, "torch", w, wrap=True)(x, logits)
    assert torch.allclose(out, ref, atol=1e-5)
    from moe_lab.core.routing import route
    tw, ti = route(p.model, logits)
    result = torch.library.opcheck(custom_ops.experts_op("torch"),
                                   (x, w.w1, w.w2, tw, ti, w.expert_map, True))
    assert all(v == "SUCCESS" for v in result.values()), result


def test_recompiles_counted_static_vs_dynamic():
    rows, crows = bench((4, 8, 16), "torch", ["compile:default", "compile:default:dynamic"])
    by = {c["mode"]: c for c in crows}
    assert by["compile:default"]["recompiles"] >= 2  # a new graph per token count
    assert by["compile:default:dynamic"]["recompiles"] < by["compile:default"]["recompiles"]
    df = pd.DataFrame(rows)
    assert (df.status == "ok").all(), df[["mode", "tokens", "status", "error"]]
    assert (df.max_rel_err < 2e-3).all()
    assert set(df.columns) >= {"model", "tp", "ep", "ep_rank", "dtype", "backend", "mode",
                               "tokens", "routing", "status", "error", "median_us", "p10_us",
                               "p90_us", "n", "max_rel_err", "compile_s", "graph_breaks",
                               "recompiles", "wrapped"}
    assert (df.compile_s > 0).all() and (df.median_us > 0).all()


def test_failing_compile_is_a_row(monkeypatch):
    def broken_backend(gm, example_inputs):
        raise RuntimeError("backend exploded on purpose")

    real = C.compile_fn
    monkeypatch.setattr(C, "compile_fn", lambda fn, m: real(fn, m) if not m.compiled
                        else torch.compile(fn, backend=broken_backend))
    rows, crows = bench((2, 4), "torch", ["compile:off", "compile:default"])
    df = pd.DataFrame(rows)
    failed = df[df["mode"] == "compile:default"]
    assert (failed.status == "failed").all() and len(failed) == 2
    assert failed.error.str.contains("exploded on purpose").all()
    assert (df["mode"] == "compile:off").sum() == 2  # the two token counts
    assert (df[df["mode"] == "compile:off"].status == "ok").all()  # the loop went on
    # every row, failed or not, says when it was measured (provenance of each point)
    assert pd.to_datetime(df["measured_at"], format="%Y-%m-%dT%H:%M:%S%z").notna().all()
    assert crows[0]["status"] == "failed" and "exploded" in crows[0]["error"]


def test_a_compiled_point_that_fails_the_check_is_incorrect_and_has_no_time(monkeypatch):
    """Correct before fast, for compiled points too: the eager layer passes its check, the
    "compiled" one (a stand-in that doubles the output) fails it at every token count; those
    rows are `incorrect` with their error measured and no time, and the one timing loop
    (points.time_modes) is never asked for them (it was: a time on an incorrect row)."""
    real, timed = C.compile_fn, []

    def wrong(fn, m):
        return real(fn, m) if not m.compiled else (lambda x, logits: 2 * fn(x, logits))
    monkeypatch.setattr(C, "compile_fn", wrong)
    real_loop = C.time_modes
    monkeypatch.setattr(C, "time_modes", lambda c, modes, *a, **kw:
                        timed.append([m.name for m in modes]) or real_loop(c, modes, *a, **kw))
    rows, crows = bench((2, 4), "torch", ["compile:default", "compile:off"])
    df = pd.DataFrame(rows)
    bad, good = df[df["mode"] == "compile:default"], df[df["mode"] == "compile:off"]
    assert list(bad.status) == ["incorrect"] * 2, bad[["status", "error"]]
    assert bad.error.str.contains("max_rel_err").all() and (bad.max_rel_err > 0.5).all()
    assert bad.median_us.isna().all() and bad.p10_us.isna().all() and bad.p90_us.isna().all()
    assert not any(r.get("samples_us") for r in rows if r["mode"] == "compile:default")
    assert (good.status == "ok").all() and (good.median_us > 0).all()
    assert timed == [["compile:off"]] * 2  # timed: the correct token counts only
    assert crows[0]["points_ok"] == 0


def test_compile_budget_stops_a_compile_that_runs_past_it(monkeypatch):
    """The budget is a hard limit: a compile still running when it runs out is stopped
    (through Dynamo, which wraps the error) and it and the remaining token counts become
    `timeout` rows; the next variant still runs."""
    import time as _time

    def slow_backend(gm, example_inputs):
        _time.sleep(30)  # a compile that would take far longer than the budget
        return gm

    real = C.compile_fn
    monkeypatch.setattr(C, "compile_fn", lambda fn, m: real(fn, m) if not m.compiled
                        else torch.compile(fn, backend=slow_backend))
    # no wall-clock verdict (a busy machine stretches every step): a compile the budget did
    # not stop would finish its 30 s sleep and give `ok` rows, which the statuses rule out
    rows, crows = bench((2, 4, 8), "torch", ["compile:default", "compile:off"], budget_s=1.5)
    df = pd.DataFrame(rows)
    timed_out = df[df["mode"] == "compile:default"]
    assert list(timed_out.status) == ["timeout"] * 3, timed_out[["status", "error"]]
    assert "budget" in timed_out.error.iloc[0] and "compile stopped" in timed_out.error.iloc[0]
    assert timed_out.error.iloc[1:].str.contains("used up").all()
    assert (df["mode"] == "compile:off").sum() == 3  # the three token counts
    assert (df[df["mode"] == "compile:off"].status == "ok").all()
    assert crows[0]["status"] == "timeout" and crows[0]["points_ok"] == 0


def test_merge_compile_rows_adds_counts():
    old = dict(tokens_first=1, compile_s=2.0, compile_s_total=5.0, recompiles=3,
               graphs_first_token=1, points=4, points_ok=4, status="ok", error="",
               cudagraph_skips=0, cudagraph_skip_reasons="", graphs=1, graph_breaks=0,
               break_reasons="")
    new = dict(old, tokens_first=64, compile_s=1.0, compile_s_total=2.0, recompiles=1,
               graphs_first_token=1, points=2, points_ok=1, status="partial", error="boom")
    m = merge_compile_rows(old, new)
    assert (m["tokens_first"], m["compile_s"]) == (1, 2.0)
    assert m["compile_s_total"] == 7.0 and m["points"] == 6 and m["points_ok"] == 5
    assert m["recompiles"] == 3 + 1 + 1 and m["status"] == "partial" and m["error"] == "boom"
    assert m["merged_calls"] == 1


def test_unavailable_backend_is_rows_not_exception():
    rows, crows = bench((2, 4), "aiter", ["compile:default"], wrapped=False)
    rows2, _ = bench((2, 4), "aiter", ["compile:default"], wrapped=True)
    rows += rows2
    assert len(rows) == 4  # wrapped x unwrapped x 2 token counts
    assert {r["status"] for r in rows} <= {"unavailable", "unsupported"}
    assert all(r["error"] for r in rows) and crows == []


def test_compile_fn_leaves_the_baseline_uncompiled():
    f = lambda x: x  # noqa: E731
    assert C.compile_fn(f, parse_mode("compile:off")) is f
    assert C.compile_fn(f, parse_mode("compile:default:dynamic")) is not f


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


@gpu
@pytest.mark.parametrize("backend", ["torch", "torch-grouped", "aiter-triton"])
def test_custom_op_passes_opcheck_on_gpu(backend):
    """The wrappers that make the GPU backends opaque to Dynamo, checked where they run:
    schema, fake (meta) implementation, and Dynamo/AOT tracing, in bf16 on the GPU."""
    from moe_lab import backends
    from moe_lab.core.routing import route
    if not backends.get(backend).available()[0]:
        pytest.skip(f"{backend} is not available here")
    p = make_problem("custom:H=256,I=128,E=8,k=2", 16, dtype="bf16")
    w = make_weights(p, "cuda", 0)
    x, logits = C.layer_inputs(p, "cuda")
    tw, ti = route(p.model, logits)
    result = torch.library.opcheck(custom_ops.experts_op(backend),
                                   (x, w.w1, w.w2, tw, ti, None, False))
    assert all(v == "SUCCESS" for v in result.values()), result


def test_sigterm_inside_a_compile_stops_the_sweep_not_a_failed_row(monkeypatch):
    """SIGTERM (`timeout`, a scheduler) that lands while Dynamo compiles must stop the
    sweep: Dynamo wraps what its backend raised, and caught as an ordinary error it
    became a `failed` row and the sweep went on compiling past its deadline."""
    import os
    import signal

    from moe_lab.core.errors import Terminated, terminate_gracefully

    def backend_hit_by_sigterm(gm, example_inputs):
        os.kill(os.getpid(), signal.SIGTERM)  # the handler raises here, mid-compile
        return gm

    real = C.compile_fn
    monkeypatch.setattr(C, "compile_fn", lambda fn, m: real(fn, m) if not m.compiled
                        else torch.compile(fn, backend=backend_hit_by_sigterm))
    landed = []
    with pytest.raises(Terminated):
        with terminate_gracefully():
            bench((2, 4), "torch", ["compile:off", "compile:default"], on_row=landed.append)
    assert [r["mode"] for r in landed] == ["compile:off"] * 2  # measured before: kept
    assert all(r["status"] == "ok" for r in landed)  # and no `failed` row for the kill
    # the handler is gone: a later SIGTERM-free sweep is not taken for a terminated one
    rows, _ = bench((2,), "torch", ["compile:off"])
    assert rows[0]["status"] == "ok"
