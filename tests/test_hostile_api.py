"""The notebook API (moe_lab.analysis, as notebooks/*.ipynb call it) against hostile input:
a run id or folder wherever runs are taken, and every bad value a UsageError in one line,
never a traceback from deep inside pandas or an empty answer that looks like a real one."""
from __future__ import annotations

from pathlib import Path

import pytest
from moe_lab.analysis import tuned as rq

from moe_lab.core.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
VLLM_RUN = "h200-vllm-bf16-tp8"  # a committed run with vLLM as shipped and stored phases


@pytest.fixture
def committed(monkeypatch):
    monkeypatch.setenv("MOE_LAB_DATA", str(ROOT / "data" / "runs"))


def _calls():
    from moe_lab.analysis import tuned, vllm_compare
    from moe_lab.analysis import ledger
    return [ledger.of_runs, vllm_compare.compared, vllm_compare.frames,
            tuned.current_pairs, tuned.published_pairs]


@pytest.mark.parametrize("i", range(5))
def test_runs_given_as_ids_are_opened(committed, i):
    """Before: AttributeError ('str' object has no attribute 'path'), where
    runs.ledger_choice and runs.vllm_choice take ids."""
    from moe_lab.storage.store import open_run
    call = _calls()[i]
    by_id = call([VLLM_RUN])
    by_run = call([open_run(VLLM_RUN)])
    for a, b in zip(by_id if isinstance(by_id, tuple) else [by_id],
                    by_run if isinstance(by_run, tuple) else [by_run]):
        if hasattr(a, "equals"):
            assert a.equals(b)
    assert type(call(VLLM_RUN)) is type(by_id)  # one id: that run


@pytest.mark.parametrize("i", range(5))
@pytest.mark.parametrize("runs,says", [
    (["no-such-run"], "no run folder no-such-run"),
    (None, "runs: give a list of runs (Runs, run ids or folders), not None"),
    (5, "runs 5: give a list of runs (Runs, run ids or folders)"),
])
def test_runs_that_cannot_be_opened_are_one_line(committed, i, runs, says):
    with pytest.raises(UsageError) as exc:
        _calls()[i](runs)
    assert says in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("call,says", [
    # before: a table of every required shape "missing" (no file found), as if nothing were tuned
    (lambda tf, tmp: tf.inventory(tmp / "nope"), "inventory: configs_dir {tmp}/nope is not a folder"),
    (lambda tf, tmp: tf.inventory(tmp / "a-file"), "inventory: configs_dir {tmp}/a-file is not a folder"),
    # before: FileNotFoundError / NotADirectoryError from Path.iterdir
    (lambda tf, tmp: tf.search_spread(root=tmp / "nope"),
     "the winners runs: root {tmp}/nope is not a folder"),
    (lambda tf, tmp: tf.verify_points(root=tmp / "a-file"),
     "the verify runs: root {tmp}/a-file is not a folder"),
    # before: an empty Run (no manifest, no rows) that a figure's footer then read as a run
    (lambda tf, tmp: tf.tune_run("no-such-run", root=tmp),
     "tune_run: no run folder 'no-such-run' with a manifest under {tmp}"),
    (lambda tf, tmp: tf.tune_run("", root=tmp), "tune_run: no run folder '' with a manifest under {tmp}"),
])
def test_tuned_files_readers_refuse_a_folder_that_is_not_there(tmp_path, call, says):
    from moe_lab.analysis import tuned as tf
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(UsageError) as exc:
        call(tf, tmp_path)
    assert str(exc.value) == says.format(tmp=tmp_path)


def test_tune_run_of_a_committed_search_is_read(committed):
    from moe_lab.analysis import tuned as tf
    r = tf.tune_run("h200-tune-vllm-qwen3-235b-a22b-tp8-bf16")
    assert r.manifest.get("kind") == "tune"


def test_choose_of_a_question_that_is_not_one_is_one_line():
    """Before: KeyError: 'kernel-time'."""
    from moe_lab.analysis import runs
    with pytest.raises(UsageError) as exc:
        runs.choose("kernel-time")
    assert str(exc.value).startswith("choose: no question 'kernel-time'; one of kernel_time, ")


# --- frames lacking the columns a public function needs ------------------------------------------

def _frame_calls():
    """(the name the one line gives, a call on one frame): every analysis function a notebook
    hands a DataFrame (their frame arguments; the others left to their own values)."""
    import pandas as pd

    from moe_lab import analysis as an
    from moe_lab import claims
    e = pd.DataFrame()
    return [
        ("roofline_tables.best_pct_of_roof", an.roofline_tables.best_pct_of_roof),
        ("roofline_tables.pct_of_roof_table", an.roofline_tables.pct_of_roof_table),
        ("fp8.fp8_vs_bf16", an.fp8.fp8_vs_bf16), ("fp8.targets", an.fp8.targets),
        ("fp8_gemm.verdict", an.fp8_gemm.verdict), ("fp8_gemm.sources", an.fp8_gemm.sources),
        ("devices.floors_against_aiter", an.devices.floors_against_aiter),
        ("devices.summary", an.devices.summary),
        ("tuning.tuned_vs_default", an.tuning.tuned_vs_default),
        ("tuning.tuned_summary", an.tuning.tuned_summary),
        ("tuning.by_tokens", lambda f: an.tuning.by_tokens(f, "default_over_tuned")),
        ("tuning.before_after", an.tuning.before_after),
        ("tuning.target_metrics", lambda f: an.tuning.target_metrics(f, "r")),
        ("tuning.phase_best_worst", lambda f: an.tuning.phase_best_worst(None, f)),
        ("ledger.ledger", lambda f: an.ledger.ledger(f, e)),
        ("ledger.best_points", an.ledger.best_points),
        ("ledger.layer_summary", an.ledger.layer_summary),
        ("metrics.ledger_metrics", lambda f: an.metrics.ledger_metrics(f, f)),
        ("targets.evaluate", an.evaluate), ("targets.summary", an.summary),
        ("tuned.ties_by_run", an.tuned.ties_by_run),
        ("tuned.roof_from", lambda f: an.tuned.roof_from(f, None)),
        ("vllm_compare.best_over_vllm", an.vllm_compare.best_over_vllm),
        ("vllm_compare.by_shape", an.vllm_compare.by_shape),
        ("vllm_compare.newest", an.vllm_compare.newest),
        ("expert_parallel.points", an.expert_parallel.points),
        ("expert_parallel.collective_model", an.expert_parallel.collective_model),
        ("expert_parallel.prediction_target", an.expert_parallel.prediction_target),
        ("expert_parallel.estimate", an.expert_parallel.estimate),
        ("expert_parallel.estimate_vs_measured",
         lambda f: an.expert_parallel.estimate_vs_measured(f, f)),
        ("claims.summary", claims.summary),
        ("tuned.default_and_tuned", an.tuned.default_and_tuned),
        ("tuned.with_two_t", an.tuned.with_two_t),
        ("tuned.two_t_misses", an.tuned.two_t_misses),
        ("tuned.tuning_metrics", an.tuned.tuning_metrics),
        ("tuned.verify_metrics", an.tuned.verify_metrics),
        ("tuned.verify_runs", an.tuned.verify_runs),
        ("tuned.published_metrics", an.tuned.published_metrics),
        ("vllm_compare.fp8_over_bf16", an.vllm_compare.fp8_over_bf16),
        ("vllm_compare.fp8_summary", an.vllm_compare.fp8_summary),
        ("tuning.best_per_point", an.tuning.best_per_point),
        ("tuning.phases_of", lambda f: an.tuning.phases_of(f, ["p"])),
    ]


FRAME_CALLS = dict(_frame_calls())  # built once, at collection: its names are the test ids


def test_each_frame_call_is_named_once():
    assert len(FRAME_CALLS) == len(_frame_calls())  # a name twice: one of them never tested


@pytest.mark.parametrize("name", list(FRAME_CALLS))
def test_a_frame_without_the_columns_is_one_line_naming_them(name):
    """Before: pandas' KeyError of the first column missing, from deep inside the function."""
    import pandas as pd
    with pytest.raises(UsageError) as exc:
        FRAME_CALLS[name](pd.DataFrame({"x": [1.0, 2.0]}))
    line = str(exc.value)
    assert line.startswith(name + ": ") and " lacks the column" in line and "\n" not in line
    assert "(it has: x)" in line


@pytest.mark.parametrize("name", list(FRAME_CALLS))
def test_none_for_a_frame_is_one_line(name):
    """Before: a TypeError or AttributeError from inside ('NoneType' object is not
    subscriptable, has no len(), ...): frames() passed None on unchecked, default or not."""
    with pytest.raises(UsageError) as exc:
        FRAME_CALLS[name](None)
    line = str(exc.value)
    assert line.startswith(name + ": ") and line.endswith(": give a DataFrame, not None"), line
    assert "\n" not in line


def test_a_run_s_rows_short_of_one_column_are_told_which(committed):
    from moe_lab import analysis as an
    from moe_lab.storage.store import open_run
    res = open_run(VLLM_RUN).results
    assert len(an.ledger.best_points(res))  # as they are: answered
    for call, col in ((an.ledger.best_points, "routing"), (an.tuning.tuned_vs_default, "config"),
                      (an.fp8.fp8_vs_bf16, "point_id")):
        with pytest.raises(UsageError, match=rf"lacks the column {col} \(it has: "):
            call(res.assign(run_id=VLLM_RUN).drop(columns=[col]))


def test_frames_without_rows_keep_their_empty_answers():
    import pandas as pd

    from moe_lab import analysis as an
    assert an.fp8.fp8_vs_bf16(pd.DataFrame()).empty
    assert an.evaluate(pd.DataFrame()).empty and an.vllm_compare.newest(pd.DataFrame()).empty
    assert an.devices.floors_against_aiter(pd.DataFrame()).empty  # was: KeyError 'series'
    # a ledger without rows or a point_id column (of_runs' when no run has phases): as before
    assert an.metrics.ledger_metrics(pd.DataFrame(columns=["phase"]), pd.DataFrame(
        columns=["model", "tp", "ep", "ep_rank", "dtype", "backend", "mode", "tokens", "routing",
                 "median_us", "point_id"])).empty
    with pytest.raises(UsageError, match="targets.summary: evaluation lacks the columns target"):
        an.summary(pd.DataFrame())  # no rows, and a KeyError where it answered: the one line


def test_a_dtype_the_run_has_no_rows_of_is_one_line(committed):
    """Notebooks 01 and 03's `dtype` parameter (`report -p dtype fp9`): a dtype the run has
    no rows of showed a page of empty tables; it is refused naming the run's dtypes."""
    from moe_lab.analysis.fp8 import with_dtype
    from moe_lab.storage.store import open_run
    run = open_run(VLLM_RUN)
    assert len(with_dtype(run, "bf16").results) == (run.results["dtype"] == "bf16").sum() > 0
    for bad in ("fp9", "fp8-block128"):  # not a dtype; a dtype this run lacks
        with pytest.raises(UsageError) as e:
            with_dtype(run, bad)
        msg = str(e.value)
        assert "\n" not in msg and repr(bad) in msg and "its dtypes: bf16" in msg, msg


# --- arguments of the wrong type or value (found by an audit of the notebook API) -------------

GRID_RUN = "h200-grid-aiter-triton-deepseek-r1-tp8-bf16"  # a committed sweep, not a search
REQUIRED_FORM = ("give one or more (issue, backend, model, tp, ep, dtype) tuples, e.g. "
                 "tuned.REQUIRED or [(38, 'aiter-triton', 'deepseek-r1', 8, 8, 'bf16')]")
TARGETS_FORM = "give one or more Targets (targets.TARGETS, or [targets.by_name(name), ...])"
POINTS_FORM = ("give a list of (row, ratio, what the ratio is of) triples, as "
               "compare.calibrate makes")


def _stand_in(name):
    """A run as noise.pair_of reads one (tests/test_bites' stand-in)."""
    from types import SimpleNamespace

    import pandas as pd
    return SimpleNamespace(path=Path("/nonexistent") / name, run_id=name, device="cpu",
                           commits=lambda: ["c0ffee1"], manifest={},
                           results=pd.DataFrame(dict(measured_at=["2026-12-01T00:00:00"])))


def _pair():
    from moe_lab.analysis import noise
    row = dict(model="m", tp=1, ep=1, dtype="bf16", backend="torch", tokens=1, mode="eager")
    return noise.pair_of(_stand_in("a"), _stand_in("b"), [(row, 1.01, "sample medians")], {})


@pytest.mark.parametrize("call,says", [
    # before: AttributeError ('NoneType' / 'int' object has no attribute 'path')
    (lambda n: n.check_pair(None, None), "check_pair: a None: give a run (a Run, a run id or a "
     "run folder)"),
    (lambda n: n.check_pair(_stand_in("a"), 5), "check_pair: b 5: give a run (a Run, a run id "
     "or a run folder)"),
    (lambda n: n.pair_of(None, _stand_in("b"), [], {}), "pair_of: a None: give a run"),
    # before: TypeError ('NoneType' object is not iterable), ValueError (not enough values)
    (lambda n: n.pair_of(_stand_in("a"), _stand_in("b"), None, {}),
     f"pair_of: points None: {POINTS_FORM}"),
    (lambda n: n.pair_of(_stand_in("a"), _stand_in("b"), "x", {}),
     f"pair_of: points 'x': {POINTS_FORM}"),
    (lambda n: n.pair_of(_stand_in("a"), _stand_in("b"), [({"mode": "eager"}, 1.0, "x")], {}),
     f"pair_of: a point's row lacks model, tp, ep, backend, tokens: {POINTS_FORM}"),
    (lambda n: n.pair_of(_stand_in("a"), _stand_in("b"), [], None),
     "pair_of: skipped None: give a dict (why -> how many points were passed over), e.g. {}"),
    # before: TypeError (not subscriptable, string indices), KeyError 'device'
    (lambda n: n.add_pair(None), "add_pair: pair None: give an A/A' pair's entry (pair_of's: "
     "a dict with a, b, device, modes)"),
    (lambda n: n.add_pair("x"), "add_pair: pair 'x': give an A/A' pair's entry"),
    (lambda n: n.add_pair({}), "add_pair: pair {}: give an A/A' pair's entry"),
    (lambda n: n.add_pair(_pair(), 5), "add_pair: path=5: give a folder or file path (str or "
     "Path), or None"),
    # before: band(-1) answered (2.718, 0.368), a band upside down; a str a TypeError from math
    (lambda n: n.band(-1), "band: noise -1: give a noise |ln B/A|, a number >= 0, or None for "
     "no band"),
    (lambda n: n.band("x"), "band: noise 'x': give a noise |ln B/A|, a number >= 0"),
    (lambda n: n.band(True), "band: noise True: give a noise |ln B/A|, a number >= 0"),
    (lambda n: n.band_text(-1), "band_text: noise -1: give a noise |ln B/A|, a number >= 0"),
    (lambda n: n.band_text("x"), "band_text: noise 'x': give a noise |ln B/A|, a number >= 0"),
    (lambda n: n.band_text(None), "band_text: noise None: give a noise |ln B/A|, a number >= 0"),
])
def test_noise_arguments_of_the_wrong_kind_are_one_line(call, says):
    from moe_lab.analysis import noise
    with pytest.raises(UsageError) as exc:
        call(noise)
    assert str(exc.value).startswith(says) and "\n" not in str(exc.value), str(exc.value)


def test_noise_answers_what_it_answered():
    import math

    from moe_lab.analysis import noise
    assert len(noise.band(None)) == len(noise.band(float("nan"))) == 2  # (low, high) each
    assert all(math.isnan(x) for x in noise.band(None) + noise.band(float("nan")))  # no band
    assert noise.band(0.01) == (math.exp(-0.01), math.exp(0.01))
    assert noise.band_text(0.01) == "0.990-1.010"
    with pytest.raises(UsageError, match="^band_text: noise nan: give"):  # was 'nan-nan' (audit
        noise.band_text(float("nan"))  # 41: a non-finite noise has no band to print)
    assert _pair()["modes"]["eager"]["points"] == 1


def test_an_a_a_pair_given_as_run_ids_is_opened(committed):
    from moe_lab.analysis import noise
    a, b = noise.check_pair("h200-repeat-a-20261130", "h200-repeat-b-20261130")
    assert (a.run_id, b.run_id) == ("h200-repeat-a-20261130", "h200-repeat-b-20261130")
    with pytest.raises(UsageError, match="^no run folder no-such-run "):
        noise.check_pair("no-such-run", b)


@pytest.mark.parametrize("bad", [None, "x", 5, [1], [], {"a": 1}])
@pytest.mark.parametrize("fn", ["evaluate", "summary"])
def test_targets_that_are_not_targets_are_one_line(fn, bad):
    """Before: TypeError ('NoneType' object is not iterable) for None or 5, and an empty
    table, as if no point were in range, for 'x', [1] or []."""
    import pandas as pd

    from moe_lab.analysis import targets as tg
    with pytest.raises(UsageError) as exc:
        getattr(tg, fn)(pd.DataFrame(), targets=bad)
    assert str(exc.value) == f"targets.{fn}: targets {bad!r}: {TARGETS_FORM}"


def test_one_target_is_taken_as_a_list_of_one():
    import pandas as pd

    from moe_lab.analysis import targets as tg
    t = tg.TARGETS[0]
    m = pd.DataFrame([dict(metric=t.metric, model="m", sharding="TP8", tokens=1, dtype="bf16",
                           backend="b", phase="", value=60.0, floor_us=1.0, median_us=10.0,
                           point_id="p", run_id="r")])
    assert tg.evaluate(m, targets=t).equals(tg.evaluate(m, targets=[t]))
    assert list(tg.evaluate(m, targets=t)["met"]) == [True]


@pytest.mark.parametrize("call,says", [
    # before: ValueError (not enough values to unpack), TypeError (not iterable), or a table
    # of nothing for ()
    (lambda tf: tf.inventory(required="x"), f"inventory: required 'x': {REQUIRED_FORM}"),
    (lambda tf: tf.inventory(device=5), "inventory: device 5: give a device name, e.g. "
     "'NVIDIA H200', or None for every GPU device with data"),
    (lambda tf: tf.inventory(required=()), f"inventory: required (): {REQUIRED_FORM}"),
    (lambda tf: tf.inventory(required=[("a",)]), f"inventory: required holds ('a',): "
     f"{REQUIRED_FORM}"),
    (lambda tf: tf.left("tune", "NVIDIA H200", required="x"),
     f"left: required 'x': {REQUIRED_FORM}"),
    # issue 63: the device is the caller's (was a default, the H200, on any GPU)
    (lambda tf: tf.left("tune", None), "left: device None: give the GPU's name as torch gives "
     "it, e.g. 'NVIDIA H200' (the device scripts pass $GPU_NAME)"),
    # before: TypeError (object of type 'NoneType' has no len())
    (lambda tf: tf.verify_runs(None), "tuned.verify_runs: points: give a DataFrame, not "
     "None"),
    # before: the sweep read as a Run with empty tables, a search's footer naming it
    (lambda tf: tf.tune_run(GRID_RUN), f"tune_run: run_id {GRID_RUN!r} is a sweep run; give a "
     "tune run's id (`moe-lab tune` writes one), or open this one with open_run"),
    # before: an empty table, as if nothing had been searched
    (lambda tf: tf.search_spread(device="nope"), "search_spread: device 'nope': no tuned point "
     "under {data} is of it; give one of NVIDIA H200, or None for any"),
    (lambda tf: tf.search_spread(backend="nope"), "search_spread: backend 'nope': no tuned "
     "point under {data} is of it; give one of aiter-triton, aiter-triton-silu, vllm, or None "
     "for any"),
    (lambda tf: tf.search_spread(device=5), "search_spread: device 5: give a name (a str), or "
     "None for any"),
    # before: vLLM's file named whatever the backend (it was never read), and for device None
    # a file 'device_name=None.json'
    (lambda tf: rq.published_file("nope:deepseek-r1:8:8:bf16", "NVIDIA H200"),
     "published_file: word "
     "'nope:deepseek-r1:8:8:bf16': vLLM publishes no tuning for 'nope'; give a word of "
     "aiter-triton or vllm (the kernel vLLM tunes), e.g. aiter-triton:deepseek-r1:8:8:bf16"),
    (lambda tf: rq.published_file("torch:deepseek-r1:8:8:bf16", "NVIDIA H200"),
     "published_file: word "
     "'torch:deepseek-r1:8:8:bf16': vLLM publishes no tuning for 'torch'; give a word of "
     "aiter-triton or vllm"),
    (lambda tf: rq.published_file("aiter-triton:deepseek-r1:8:8:bf16", device=None),
     "published_file: device None: give a device name, e.g. 'NVIDIA H200'"),
])
def test_tuned_files_arguments_of_the_wrong_kind_are_one_line(committed, call, says):
    from moe_lab.analysis import tuned as tf
    with pytest.raises(UsageError) as exc:
        call(tf)
    line = str(exc.value)
    assert line.startswith(says.format(data=ROOT / "data" / "runs")) and "\n" not in line, line


def test_tuned_files_answers_what_it_answered(committed):
    from moe_lab.analysis import tuned as tf
    assert len(tf.search_spread()) == len(tf.search_spread(device=None)) > 0
    assert len(tf.search_spread(backend="vllm")) > 0
    assert len(tf.inventory(device="NVIDIA H200", required=rq.REQUIRED[:1])) == 1
    # required None: each device's own (the H200's: REQUIRED)
    assert len(tf.inventory(device="NVIDIA H200")) == len(rq.REQUIRED)
    word = "deepseek-r1:8:8:bf16"
    assert rq.published_file("aiter-triton:" + word, "NVIDIA H200") == rq.published_file(
        "vllm:" + word, "NVIDIA H200") == "E=32,N=2048,device_name=NVIDIA_H200.json"


def test_search_spread_of_a_folder_searched_on_another_device(tmp_path):
    """device None: any device's searches (was the H200's alone, a module default: empty
    where only a CPU search ran); a GPU with data in the folder but no search: empty (the
    notebook says no tune run records a spread); a device named that has no data there:
    refused naming the devices that have a search."""
    import json

    import pandas as pd

    from moe_lab.analysis import tuned as tf
    run = tmp_path / "tune-cpu"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps(dict(kind="tune", environment=dict(
        device_name="cpu"))))
    pd.DataFrame([dict(backend="torch", model="m", tp=1, ep=1, ep_rank=0, dtype="bf16",
                       tokens=16, measured_at="2026-12-01T00:00:00", median_us=10.0,
                       default_us=12.0, search_best_us=9.0, search_median_us=11.0,
                       search_worst_us=30.0, search_candidates=4, git_commit="c0ffee1",
                       device="cpu")]).to_parquet(run / "winners.parquet")
    assert list(tf.search_spread(root=tmp_path)["worst_over_best"]) == [30 / 9]
    assert list(tf.search_spread(root=tmp_path, device="cpu")["worst_over_best"]) == [30 / 9]
    (tmp_path / "sweep-h200").mkdir()  # a GPU's run, no search on it
    (tmp_path / "sweep-h200" / "manifest.json").write_text(json.dumps(dict(
        environment=dict(device="cuda", device_name="NVIDIA H200"))))
    assert tf.search_spread(root=tmp_path, device="NVIDIA H200").empty
    with pytest.raises(UsageError) as exc:
        tf.search_spread(root=tmp_path, device="NVIDIA H100")
    assert str(exc.value) == (f"search_spread: device 'NVIDIA H100': no tuned point under "
                              f"{tmp_path} is of it; give one of cpu, or None for any")


@pytest.mark.parametrize("kw,says", [
    # before: [] ('' was read as the current folder, a folder not there as one without runs,
    # a word no row is of as a kind no run has), or a TypeError for 5
    (dict(data_dir_=""), "find_runs: data_dir_='': give a folder of run folders (str or Path), "
     "or None"),
    (dict(data_dir_=5), "find_runs: data_dir_=5: give a folder of run folders"),
    (dict(data_dir_="/nonexistent/moe-lab-runs"), "find_runs: data_dir_ "
     "'/nonexistent/moe-lab-runs': no such folder"),
    (dict(has="grpah"), "find_runs: has 'grpah': give None or a kind of rows: 'ok', 'compile', "
     "'distributed' or a mode name such as 'graph'"),
])
def test_find_runs_refuses_what_it_cannot_look_in(committed, kw, says):
    import moe_lab as ml
    with pytest.raises(UsageError) as exc:
        ml.find_runs(**kw)
    assert str(exc.value).startswith(says) and "\n" not in str(exc.value), str(exc.value)


def test_find_runs_finds_what_it_found(committed):
    import moe_lab as ml
    from moe_lab.storage import store
    ids = [r.run_id for r in ml.find_runs()]
    assert ids == [r.run_id for r in store.find_runs()] and VLLM_RUN in ids
    assert [r.run_id for r in ml.find_runs(str(ROOT / "data" / "runs"), has="compile")] == [
        r.run_id for r in store.find_runs(ROOT / "data" / "runs", has="compile")]
