"""moe-lab tune on the CPU, with a tunable CPU backend whose configurations really cost
different amounts (tests/data/plugin/torch_chunked.py), and the config files it writes."""
import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import plugin_backend  # noqa: E402

from moe_lab import backends
from moe_lab.cli import main
from moe_lab.storage.configs import nearest, read_table, write_table
from moe_lab.core.problems import make_problem
from moe_lab.storage.configs import config_for, load_tuned
from moe_lab.measuring.tuning import Tuner

ROOT = Path(__file__).resolve().parent.parent
MODEL = "custom:H=64,I=32,E=4,k=2"


@pytest.fixture(scope="module")
def chunked():
    """Register the test backend the way discovery would (module in moe_lab.backends)."""
    for _ in plugin_backend("torch_chunked.py", "torch-chunked"):
        yield "torch-chunked"


def _tune(tmp_path, tokens=(16, 64), budget=None, run="t"):
    shards = [[make_problem(MODEL, t, "fp32", 1, 1) for t in tokens]]
    tuner = Tuner("torch-chunked", "cpu", tmp_path / "runs" / run, tmp_path / "configs",
                  budget_s=budget, rep_ms=10, warmup_ms=2, progress=False)
    return tuner, tuner.run(shards)


def test_config_file_round_trips_in_the_upstream_format(tmp_path):
    table = {64: dict(BLOCK_SIZE_M=64, BLOCK_SIZE_N=128, BLOCK_SIZE_K=64, GROUP_SIZE_M=8,
                      num_warps=4, num_stages=3),
             1: dict(BLOCK_SIZE_M=16, BLOCK_SIZE_N=64, BLOCK_SIZE_K=128, GROUP_SIZE_M=1,
                     num_warps=4, num_stages=4)}
    p = write_table(tmp_path / "E=256,N=256,device_name=NVIDIA_H200.json", table)
    raw = json.loads(p.read_text())
    assert list(raw) == ["1", "64"]  # string token counts, ascending, as vLLM writes them
    assert raw["64"]["BLOCK_SIZE_N"] == 128 and read_table(p) == table
    assert nearest(table, 20) == table[1] and nearest(table, 40) == table[64]
    assert nearest(table, 1000) == table[64]
    (tmp_path / "bad.json").write_text('{"x": {"BLOCK_SIZE_M": 16}}')
    with pytest.raises(ValueError, match="bad.json.*token count"):
        read_table(tmp_path / "bad.json")
    (tmp_path / "bad2.json").write_text('{"4": {"BLOCK_SIZE_M": 0}}')
    with pytest.raises(ValueError, match="BLOCK_SIZE_M"):
        read_table(tmp_path / "bad2.json")


def test_the_search_picks_the_fastest_real_timing_and_checks_it(tmp_path, chunked):
    tuner, win = _tune(tmp_path)
    cand = pd.read_parquet(tmp_path / "runs" / "t" / "candidates.parquet")
    assert len(win) == 2
    for w in win.itertuples():
        mine = cand[(cand["tokens"] == w.tokens) & (cand["status"] == "ok")
                    & (cand["rep_ms"] == tuner.rep_ms)]
        # coordinate descent keeps the fastest configuration it timed in full: the winner's
        # time is the least of every ok candidate of the point timed with the run's rep_ms
        # (the default's included; the shorter successive-halving rungs only choose what is
        # timed in full), and the winner is that candidate's full configuration
        fastest = mine.loc[mine["median_us"].idxmin()]
        assert w.median_us == fastest["median_us"]
        assert json.loads(w.config) == json.loads(fastest["full_config"])
        assert w.median_us <= w.default_us
        assert mine["max_rel_err"].notna().any()  # the winner was checked
        # the speedup is the recorded default over the recorded winner (never below 1: the
        # default is one of the candidates), and the winner is a configuration of the space
        # that ran (never the CHUNK=128 that fails). No assertion on which CHUNK is faster:
        # that depends on the machine and how busy it is (a timing assertion is a flake)
        assert w.speedup == pytest.approx(w.default_us / w.median_us) and w.speedup >= 1
        space = backends.get("torch-chunked").config_space(make_problem(MODEL, w.tokens, "fp32"))
        default = backends.get("torch-chunked").default_config(make_problem(MODEL, w.tokens, "fp32"))
        for stage, cfg in json.loads(w.config).items():
            assert cfg in space[stage] + [default[stage]] and cfg["CHUNK"] <= 64
    # candidates that fail (CHUNK=128 'out of resource') are rows with their error
    failed = cand[cand["status"] == "failed"]
    assert len(failed) >= 2 and failed["error"].str.contains("out of resource").all()
    assert {"git_commit", "device", "measured_at"} <= set(cand.columns)


def test_the_winners_are_written_and_read_back_for_sweeps(tmp_path, chunked):
    tuner, win = _tune(tmp_path)
    folder = tmp_path / "configs" / "torch-chunked"
    prob = make_problem(MODEL, 16, "fp32", 1, 1)
    names = backends.get("torch-chunked").config_files(prob, tuner.device_name)
    t1 = read_table(folder / names["gemm1"])
    assert sorted(t1) == [16, 64]
    assert t1[64] == json.loads(win[win["tokens"] == 64]["config"].iloc[0])["gemm1"]
    prov = json.loads((folder / "provenance.json").read_text())
    assert prov[names["gemm1"]]["run"] == "t" and prov[names["gemm1"]]["device"].startswith("cpu")
    assert load_tuned("torch-chunked", prob, tuner.device_name, tmp_path / "configs")["gemm2"]


def test_a_killed_search_resumes_without_re_timing(tmp_path, chunked):
    from moe_lab.measuring.timing import time_cpu
    calls = []

    def killed_after_four(fn, inp, *, config, problem, rep_ms):  # Ctrl-C after four timings
        if len(calls) == 4:
            raise KeyboardInterrupt
        calls.append(1)
        return time_cpu(fn, [inp.args()], warmup_ms=2, rep_ms=rep_ms)
    shards = [[make_problem(MODEL, t, "fp32", 1, 1) for t in (16, 64)]]
    with pytest.raises(KeyboardInterrupt):
        Tuner("torch-chunked", "cpu", tmp_path / "runs" / "t", tmp_path / "configs", rep_ms=10,
              warmup_ms=2, progress=False, timer=killed_after_four).run(shards)
    first = pd.read_parquet(tmp_path / "runs" / "t" / "candidates.parquet")
    assert len(first) == 4  # the rows timed before the kill were written on the way out
    man = json.loads((tmp_path / "runs" / "t" / "manifest.json").read_text())
    assert man["status"] == "interrupted"
    tuner, win = _tune(tmp_path)
    after = pd.read_parquet(tmp_path / "runs" / "t" / "candidates.parquet")
    assert after["candidate_id"].is_unique and len(win) == 2
    kept = after.set_index("candidate_id").loc[first["candidate_id"], "measured_at"]
    assert list(kept) == list(first["measured_at"])  # timed once, kept
    man = json.loads((tmp_path / "runs" / "t" / "manifest.json").read_text())
    assert man["invocations"][-1]["points_skipped"] >= len(first)
    assert man["status"] == "complete" and man["left"] == []


def test_the_budget_stops_the_search_and_says_so(tmp_path, chunked):
    tuner, win = _tune(tmp_path, budget=1e-3)
    man = json.loads((tmp_path / "runs" / "t" / "manifest.json").read_text())
    assert man["status"] == "budget spent" and len(win) == 0
    # what is left: the one shape, at every token count, from its default's timing on
    assert [(x["stage"], x["keys_left"]) for x in man["left"]] == [("default", [16, 64])]


def test_the_budget_counts_from_the_commands_start(tmp_path, chunked):
    """A budget of 100 s that started 100 s ago (the command's imports and set-up: vLLM's
    import alone is seconds) is spent before the first timing; one that started now is not."""
    import time
    shards = [[make_problem(MODEL, 16, "fp32", 1, 1)]]
    late = Tuner("torch-chunked", "cpu", tmp_path / "runs" / "late", tmp_path / "configs",
                 budget_s=100, rep_ms=5, warmup_ms=1, progress=False,
                 budget_from=time.time() - 100)
    assert len(late.run(shards)) == 0
    man = json.loads((tmp_path / "runs" / "late" / "manifest.json").read_text())
    assert man["status"] == "budget spent"
    now = Tuner("torch-chunked", "cpu", tmp_path / "runs" / "now", tmp_path / "configs",
                budget_s=100, rep_ms=5, warmup_ms=1, progress=False, budget_from=time.time())
    assert len(now.run(shards)) == 1


def test_sweep_default_and_tuned_are_separate_points(tmp_path, chunked, monkeypatch, capsys):
    monkeypatch.setenv("MOE_LAB_DATA", str(tmp_path / "runs"))
    base = ["sweep", "--models", MODEL, "--tp", "1", "--tokens", "16,64", "--dtype", "fp32",
            "--device", "cpu", "--backends", "torch,torch-chunked", "--no-progress",
            "--rep-ms", "5", "--warmup-ms", "1", "--data-dir", str(tmp_path / "runs")]
    # no tuned file yet: the tuned points say so, they are never silently default
    assert main(base + ["--config", "default,tuned", "--run-id", "s0"]) == 0
    r0 = pd.read_parquet(tmp_path / "runs" / "s0" / "results.parquet")
    tuned0 = r0[r0["config"] == "tuned"]
    assert len(tuned0) == 2 and set(tuned0["status"]) == {"unsupported"}
    assert tuned0["error"].str.contains("moe-lab tune").all()
    assert set(r0[r0["backend"] == "torch"]["config"]) == {"default"}  # not tunable: once
    dev = tmp_path / "runs"
    from moe_lab.storage.configs import configs_dir_for  # where `tuned` looks: the data dir's ../configs
    from moe_lab.core.environment import device_name
    t = Tuner("torch-chunked", "cpu", dev / "tune", configs_dir_for(device_name("cpu")),
              rep_ms=5, warmup_ms=1, progress=False)
    t.run([[make_problem(MODEL, n, "fp32", 1, 1) for n in (16, 64)]])
    given = []  # the configuration each prepare of the tunable backend is handed
    cls = type(backends.get("torch-chunked"))
    real = cls.prepare

    def spy(self, problem, weights, config=None):
        given.append(config)
        return real(self, problem, weights, config=config)
    monkeypatch.setattr(cls, "prepare", spy)
    assert main(base + ["--config", "default,tuned", "--run-id", "s1"]) == 0
    r = pd.read_parquet(tmp_path / "runs" / "s1" / "results.parquet")
    mine = r[r["backend"] == "torch-chunked"].set_index(["tokens", "config"])
    assert set(mine["status"]) == {"ok"} and len(mine) == 4 and r["point_id"].is_unique
    assert (mine["median_us"] > 0).all()
    # the tuned points ran the tuned files, the default points the backend's own choice
    # (which one is faster is the machine's business: no timing assertion here)
    tuned = load_tuned("torch-chunked", make_problem(MODEL, 16, "fp32", 1, 1),
                       device_name("cpu"), configs_dir_for(device_name("cpu")))
    assert tuned is not None and None in given
    assert [c for c in given if c is not None] and \
        all(c == tuned for c in given if c is not None)


@pytest.mark.parametrize("value,msg", [("/nope/x.json", "neither default, tuned nor"),
                                       ("BAD", "neither default")])
def test_a_bad_config_path_exits_2_with_one_line(tmp_path, capsys, value, msg):
    argv = ["sweep", "--models", MODEL, "--tp", "1", "--tokens", "2", "--device", "cpu",
            "--dtype", "fp32", "--backends", "torch", "--data-dir", str(tmp_path),
            "--config", value]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and msg in err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(argv[:-1] + [str(bad)]) == 2
    assert "bad.json" in capsys.readouterr().err
    assert main(["check", "--model", MODEL, "--tp", "1", "--config", str(bad)]) == 2


def test_tune_refuses_a_backend_without_configurations(tmp_path, capsys):
    assert main(["tune", "--backend", "torch", "--models", MODEL, "--tp", "1", "--ep", "1",
                 "--tokens", "2", "--device", "cpu", "--data-dir", str(tmp_path)]) == 2
    assert "no tunable configurations" in capsys.readouterr().err


def test_config_for_default_is_the_backends_own(chunked):
    prob = make_problem(MODEL, 4, "fp32", 1, 1)
    assert config_for("torch-chunked", "default", prob, "cpu") == (None, "")
    assert config_for("torch", "tuned", prob, "cpu") == (None, "")  # not tunable: its own


def test_glue_before_after_never_reads_a_missing_point_as_zero():
    """A run without the torch-grouped point leaves the `after` column NaN: filled with 0.0
    it said every kernel of the old glue went to 0 (notebook 05's default run has no
    torch-grouped rows)."""
    from moe_lab.analysis import tuning as tn
    glue, kern = tn.glue_before_after("h200-vllm-vtuned-bf16-tp8")
    assert list(glue["rank"]) == ["before"]
    assert len(kern) and kern["after"].isna().all() and kern["change"].isna().all()
    after, why = tn.glue_after_run("h200-vllm-vtuned-bf16-tp8", given=True)
    assert after is None and "left out" in why


def test_a_vllm_file_with_its_triton_version_key_reads_as_vllm_reads_it(tmp_path):
    """vLLM's tuner writes a 'triton_version' key beside the token counts (its shipped
    E=32,N=2048 fp8 block file has one) and its loader pops it. Before, read_table refused
    the file ('key triton_version is not a token count'), and the H200 sweep of DeepSeek-R1
    TP8+EP8 fp8-block128 against the published file stopped, exit 2."""
    from moe_lab.core.config_files import read_table
    cfg = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
           "num_warps": 4, "num_stages": 3}
    p = tmp_path / "E=32,N=2048,device_name=NVIDIA_H200.json"
    p.write_text(json.dumps({"triton_version": "3.4.0", "1": cfg, "64": cfg}))
    assert read_table(p) == {1: cfg, 64: cfg}
