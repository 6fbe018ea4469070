"""Expert parallelism with torch.distributed on the CPU (gloo), real processes, tiny shapes:
every variant's combined output is the single-process reference; a rank that raises or
dies gives rows with the reason on every rank, without a hang, and the sweep goes on; the
N=8 code path runs; a part of another sweep is refused by merge; --gpus without GPUs is
one line."""
import os
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest
import torch

from conftest import ROOT, cli_processes
from moe_lab.cli import main
from moe_lab.measuring.correctness import make_inputs, reference, rel_err
from moe_lab.distributed import shards
from moe_lab.storage.vocabulary import VARIANTS
from moe_lab.distributed.launch import free_port
from moe_lab.core.problems import parse_model

MODEL = "custom:H=32,I=16,E=8,k=2"
ENV = dict(os.environ, PYTHONPATH=ROOT)

LAYERS = textwrap.dedent("""
    import datetime, os, sys, torch, torch.distributed as dist
    from moe_lab import backends
    from moe_lab.measuring.correctness import make_inputs
    from moe_lab.distributed import layers, shards
    from moe_lab.distributed.control import open_store
    from moe_lab.core.problems import parse_model
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", store=open_store(rank, world, 30), rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=30))
    model, out = parse_model(sys.argv[1]), {}
    full = shards.full_weights(model, torch.float32, "cpu", 5)
    for tokens, routing in [(1, "uniform"), (16, "hot:0.9"), (16, "zipf:1.2")]:
        inp = make_inputs(shards.full_problem(model, tokens, "fp32"), "cpu", 100 + tokens,
                          routing, ensure_local=False)
        for variant in ("tp-allreduce", "ep-allreduce", "ep-alltoall"):
            for name in ("torch", "torch-grouped"):
                prob = shards.rank_problem(model, tokens, "fp32", variant, world, rank)
                bprob = layers.k1_problem(prob) if variant == "ep-alltoall" else prob
                w = shards.rank_weights(variant, prob, full, world, rank, "cpu")
                lay = layers.build(variant, prob, backends.get(name).prepare(bprob, w), inp,
                                   world, rank)
                out[(tokens, routing, variant, name)] = (lay.rows, lay.layer(), lay.pairs)
        # the comparison can fail: rank r holding the other rank's experts
        other = shards.rank_problem(model, tokens, "fp32", "ep-allreduce", world, 1 - rank)
        w = shards.rank_weights("ep-allreduce", other, full, world, 1 - rank, "cpu")
        prob = shards.rank_problem(model, tokens, "fp32", "ep-allreduce", world, rank)
        from moe_lab.backends import Weights
        w = Weights(w.w1, w.w2, prob.expert_map())
        lay = layers.build("ep-allreduce", prob, backends.get("torch").prepare(prob, w), inp, world, rank)
        out[(tokens, routing, "wrong-shard", "torch")] = (lay.rows, lay.layer(), lay.pairs)
    torch.save(out, sys.argv[2] + "." + str(rank))
    dist.destroy_process_group()
""")


def ranks(script, args, n=2, timeout=120):
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-c", script, *args], cwd=ROOT, env=dict(
        ENV, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), WORLD_SIZE=str(n),
        LOCAL_RANK=str(r))) for r in range(n)]
    assert [p.wait(timeout=timeout) for p in procs] == [0] * n


def sweep_argv(tmp_path, *extra, run_id="r", nproc=2) -> list:
    return ["sweep", "--nproc", str(nproc), "--models", MODEL, "--dtype", "fp32", "--backends",
            "torch", "--data-dir", str(tmp_path), "--run-id", run_id, "--dist-reps", "3",
            "--rep-ms", "2", "--warmup-ms", "1", "--device", "cpu", *extra]


def rows(tmp_path, run_id="r"):
    path = tmp_path / run_id / "results.parquet"
    return pd.read_parquet(path) if path.exists() else None


def sweep(tmp_path, *extra, run_id="r", nproc=2, env=None, timeout=240):
    cmd = [sys.executable, "-m", "moe_lab", *sweep_argv(tmp_path, *extra, run_id=run_id,
                                                        nproc=nproc)]
    t0 = time.time()
    p = subprocess.run(cmd, cwd=ROOT, env=dict(ENV, **(env or {})), capture_output=True,
                       text=True, timeout=timeout)
    return p, rows(tmp_path, run_id), time.time() - t0


# The sweeps with a fault injected (MOE_LAB_DIST_FAULT): a rank that raises in its check, one
# that raises inside the timed collectives, one that dies.
FAULTY = {"check": (("--tokens", "1,4,8"), "1:check:4"),
          "time": (("--tokens", "2,4", "--parallel", "ep-allreduce", "--dist-timeout", "3"),
                   "1:time:2"),
          "exit": (("--tokens", "2,4", "--parallel", "ep-allreduce", "--dist-timeout", "2"),
                   "1:exit:2")}


@pytest.fixture(scope="module")
def faulty(tmp_path_factory) -> dict:
    """Each FAULTY sweep as its own `python -m moe_lab sweep --nproc 2` process (its ranks
    spawned by it as always), the three forked from one process that imported moe_lab once
    (conftest.cli_processes); name -> (CompletedProcess, its rows or None, its data folder).
    A hang is the timeout (TimeoutExpired), not a wall-clock verdict."""
    dirs = {k: tmp_path_factory.mktemp(f"dist-{k}") for k in FAULTY}
    procs = cli_processes([(sweep_argv(dirs[k], *extra), ROOT, {"MOE_LAB_DIST_FAULT": fault})
                           for k, (extra, fault) in FAULTY.items()], timeout=720)
    return {k: (p, rows(dirs[k]), dirs[k]) for k, p in zip(FAULTY, procs)}


def test_every_variant_combined_equals_the_single_process_reference(tmp_path):
    ranks(LAYERS, [MODEL, str(tmp_path / "out")])
    outs = [torch.load(tmp_path / f"out.{r}") for r in range(2)]
    model = parse_model(MODEL)
    full = shards.full_weights(model, torch.float64, "cpu", 5)
    for key in outs[0]:
        tokens, routing, variant, _ = key
        fprob = shards.full_problem(model, tokens, "fp32")
        inp = make_inputs(fprob, "cpu", 100 + tokens, routing, ensure_local=False)
        inp.x = inp.x.double()
        ref = reference(fprob, full, inp)
        (rows0, y0, p0), (rows1, y1, p1) = outs[0][key], outs[1][key]
        if variant == "ep-alltoall":  # each rank holds its own tokens' output
            assert sorted(rows0.tolist() + rows1.tolist()) == list(range(tokens))
            y = torch.zeros(tokens, model.hidden, dtype=torch.float64)
            y[rows0], y[rows1] = y0.double(), y1.double()
        else:
            assert torch.equal(y0, y1)  # every rank ends with the whole, summed output
            y = y0
        err = rel_err(y, ref)
        if variant == "wrong-shard":
            assert err > 0.1, key
        else:
            assert err < 1e-5, (key, err)
        if variant.startswith("ep"):  # EP ranks split the routed pairs between them
            assert p0 + p1 == tokens * model.topk
    assert len(outs[0]) == 3 * 7


def test_a_rank_that_raises_gives_rows_with_the_reason_on_every_rank_and_the_sweep_goes_on(faulty):
    # rank 1 raises in the check of the 4-token points: every rank's row says so, the
    # 1- and 8-token points are measured; every (point, rank) is one row
    p, res, tmp_path = faulty["check"]
    assert p.returncode == 0, p.stderr[-2000:]
    assert len(res) == 3 * 3 * 2 and res["point_id"].is_unique
    assert set(res["world_size"]) == {2} and set(res["rank"]) == {0, 1}
    assert set(res["parallel"]) == set(VARIANTS)
    bad = res[res["tokens"] == 4]
    assert len(bad) == len(VARIANTS) * 2  # the 4-token point of each variant, on both ranks
    assert (bad["status"] == "failed").all()
    assert bad["error"].str.contains("rank 1: RuntimeError: injected fault on rank 1 in check").all()
    good = res[res["tokens"] != 4]
    assert len(good) == 2 * len(bad)  # the 1- and 8-token points
    assert (good["status"] == "ok").all() and (good["max_rel_err"] < 2e-3).all()
    assert (good["median_us"] > 0).all() and (good["expert_us"] > 0).all()
    assert (good["predicted_us"] > 0).all() and (good["collective_us"] > 0).all()
    # the prediction on every rank's row of a point: the slowest rank's expert time plus the
    # slowest rank's collective, from the rows' own per-rank columns (not a mean over ranks)
    for _, pt in good.groupby(["tokens", "routing", "parallel", "mode"]):
        want = pt["expert_sync_us"].max() + pt["collective_us"].max()
        assert len(pt) == 2 and (pt["predicted_us"] - want).abs().max() <= 1e-9 * want, pt
    # ranks differ in pairs under EP, not under TP
    tp = good[good["parallel"] == "tp-allreduce"]
    assert len(tp) == 2 * 2  # two token counts, two ranks
    assert (tp.groupby(["tokens"])["pairs"].nunique() == 1).all()
    ep = good[good["parallel"] == "ep-allreduce"].groupby("tokens")["pairs"].sum()
    assert ep.to_dict() == {1: 2, 8: 16}
    # rerunning resumes: nothing left to measure for the ok points
    p2, res2, _ = sweep(tmp_path, "--tokens", "1,4,8")
    assert p2.returncode == 0
    assert sorted(res2.loc[res2["tokens"] != 4, "measured_at"]) == sorted(good["measured_at"])


def test_a_rank_that_raises_inside_the_timed_collectives_does_not_hang(faulty):
    # rank 1 raises before the barrier-synchronised loops: rank 0 waits in a collective
    # until the timeout (3 s), both report, and the next point runs on a fresh group
    p, res, _ = faulty["time"]
    assert p.returncode == 0, p.stderr[-2000:]
    bad = res[res["tokens"] == 2]
    assert (bad["status"] == "failed").all() and len(bad) == 2
    assert bad["error"].str.contains("rank 1: RuntimeError: injected fault").all()
    assert bad["error"].str.contains("rank 0: ").all()  # its collective timed out
    assert (res["tokens"] == 4).sum() == 2  # the next point, on both ranks
    assert (res.loc[res["tokens"] == 4, "status"] == "ok").all()
    # a hang is the subprocess's timeout (TimeoutExpired), not a wall-clock verdict


def test_a_rank_that_dies_is_named_on_every_row_and_the_sweep_ends_without_a_hang(faulty):
    p, res, _ = faulty["exit"]
    assert p.returncode != 0  # a hang would be the subprocess's timeout
    assert len(res) == 2 and (res["status"] == "failed").all()
    assert res["error"].str.contains("rank 1 did not report").all()


def test_eight_ranks_started_by_torchrun(tmp_path):
    """Issue 18's layout at tiny size: 8 gloo processes, E=8 (one expert per EP rank),
    started the standard way (torchrun; its ranks, so no --nproc)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "8", "-m",
           "moe_lab", "sweep", "--models", MODEL, "--dtype", "fp32", "--backends", "torch", "--data-dir", str(tmp_path), "--run-id",
           "r", "--dist-reps", "3", "--rep-ms", "2", "--warmup-ms", "1", "--device", "cpu",
           "--tokens", "8"]
    p = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    res = pd.read_parquet(tmp_path / "r" / "results.parquet")
    assert len(res) == 3 * 8 and set(res["rank"]) == set(range(8))
    assert (res["status"] == "ok").all() and (res["max_rel_err"] < 2e-3).all()
    ep = res[res["parallel"] == "ep-allreduce"]
    assert ep["pairs"].sum() == 8 * 2 and (ep["local_experts"] == 1).all()


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    base = ["sweep", "--models", MODEL, "--dtype", "fp32", "--backends", "torch",
            "--data-dir", str(tmp_path)]
    assert main(base + ["--nproc", "2", "--parallel", "tp-magic"]) == 2
    assert main(base + ["--nproc", "3"]) == 2  # E=8 does not split over 3 ranks
    assert main(base + ["--gpus", "all"]) == 2  # no GPU here
    assert main(base + ["--nproc", "2", "--dtype", "fp8-tensor"]) == 2  # not sharded yet
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and "fp8" in err[3] and all(e.startswith("moe-lab: error:") for e in err)
    assert "tp-magic" in err[0] and "no GPU is visible" in err[2]
    assert not list(tmp_path.iterdir())


def test_merge_refuses_a_part_of_another_sweep(tmp_path, capsys):
    base = ["sweep", "--models", MODEL, "--tp", "1", "--tokens", "1,2", "--backends", "torch",
            "--dtype", "fp32", "--device", "cpu", "--no-progress", "--rep-ms", "2",
            "--warmup-ms", "1", "--no-profile", "--data-dir", str(tmp_path)]
    assert main(base + ["--shard", "0/2", "--run-id", "a0"]) == 0
    assert main(base + ["--shard", "1/2", "--run-id", "a1", "--seed", "1"]) == 0
    capsys.readouterr()
    assert main(["merge", str(tmp_path / "m"), str(tmp_path / "a0"), str(tmp_path / "a1")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "another sweep" in err[0] and "seed" in err[0]
    assert not (tmp_path / "m" / "results.parquet").exists()


def test_gpus_runs_one_part_per_gpu_and_merges_them_into_the_whole_sweep(tmp_path, monkeypatch):
    """--gpus N on a host with N GPUs: the parts run as N processes (CUDA_VISIBLE_DEVICES=i,
    --shard i/N) and merge into one run with every point once. There is no GPU here, so the
    GPU count is the one thing faked; the parts are real sweeps (on the CPU)."""
    import json
    from moe_lab.analysis import expert_parallel as analysis
    from moe_lab.distributed import launch
    from moe_lab.storage.store import find_runs
    monkeypatch.setattr(launch, "gpu_count", lambda text: 2)
    base = ["sweep", "--models", MODEL, "--tp", "1", "--tokens", "1,2,4", "--backends",
            "torch,torch-grouped", "--dtype", "fp32", "--device", "cpu", "--no-progress",
            "--rep-ms", "2", "--warmup-ms", "1", "--no-profile", "--data-dir", str(tmp_path)]
    assert main(base + ["--run-id", "one"]) == 0
    assert main(base + ["--gpus", "2", "--run-id", "spread"]) == 0
    one = pd.read_parquet(tmp_path / "one" / "results.parquet")
    spread = pd.read_parquet(tmp_path / "spread" / "results.parquet")
    assert len(one) == 6 and spread["point_id"].is_unique
    assert set(spread["point_id"]) == set(one["point_id"]) and (spread["status"] == "ok").all()
    parts = [pd.read_parquet(tmp_path / ".parts" / "spread" / f"part-{i}-of-2" / "results.parquet")
             for i in range(2)]
    assert all(len(p) for p in parts) and sum(map(len, parts)) == 6
    m = json.loads((tmp_path / "spread" / "manifest.json").read_text())
    assert m["spread"]["gpus"] == 2 and m["spread"]["part_exit_codes"] == [0, 0]
    assert sorted(r.run_id for r in find_runs(tmp_path)) == ["one", "spread"]  # parts hidden
    t = analysis.spread_target(m, json.loads((tmp_path / "one" / "manifest.json").read_text()))
    assert t["ratio"] > 0 and t["gpus"] == 2
    # the same command again resumes the parts (nothing re-measured) and merges again
    assert main(base + ["--gpus", "2", "--run-id", "spread"]) == 0
    again = pd.read_parquet(tmp_path / "spread" / "results.parquet")
    assert sorted(again["measured_at"]) == sorted(spread["measured_at"])


def test_a_collective_time_that_does_not_grow_with_bytes_gives_no_bandwidth():
    """The collective model reads a bandwidth only where the time grows with the bytes: a
    CPU run's flat or falling times gave 1e9 GB/s (a clamp's artefact) in notebook 06."""
    import numpy as np
    import pandas as pd
    from moe_lab.analysis.expert_parallel import collective_model

    def pts(us):
        return pd.DataFrame(dict(parallel="ep-allreduce", mode="eager", world_size=2,
                                 sent_bytes=[1e3, 1e4, 1e5], collective_us=us))
    grows = collective_model(pts([11.0, 20.0, 110.0])).iloc[0]
    assert grows["fit"] == "latency + bytes / bandwidth"
    assert grows["gb_per_s"] == pytest.approx(1e-3 / np.polyfit([1e3, 1e4, 1e5], [11, 20, 110], 1)[0])
    flat = collective_model(pts([30.0, 25.0, 20.0])).iloc[0]
    assert np.isnan(flat["gb_per_s"]) and flat["fit"].startswith("latency only")
    assert flat["latency_us"] == pytest.approx(25.0)  # the constant nearest the times


class _Rank:
    """A rank as the launcher's _died sees it: its exit code (None: running), its note."""

    def __init__(self, code, note):
        self.code, self.note = code, str(note)

    def poll(self):
        return self.code


def test_a_rank_that_noted_its_sigterm_is_blamed_while_it_closes_its_run(tmp_path):
    """worker.note_signal writes a rank's note at its SIGTERM, before it closes a
    connection: the launcher blames that rank from the note while it is still closing its
    run (seconds, on a busy machine), not a peer that died meanwhile of its going (a
    SIGABRT here), and keeps the verdict once the notes are gone. A rank the launcher
    stopped itself is never blamed for its note."""
    from moe_lab.distributed.launch import _died
    note = tmp_path / "rank0.signal"
    note.write_text("SIGTERM")
    ranks = [_Rank(None, note), _Rank(-6, tmp_path / "rank1.signal")]
    assert _died(ranks) == (0, "SIGTERM")
    note.unlink()
    ranks[0].code = -9  # then killed after the grace period: still its SIGTERM
    assert _died(ranks) == (0, "SIGTERM")
    note.write_text("SIGTERM")
    stopped = _Rank(None, note)
    stopped.stopped_here = True
    assert _died([stopped, _Rank(None, tmp_path / "none")]) is None
    assert _died([_Rank(None, tmp_path / "none"), _Rank(-9, tmp_path / "none")]) == (1, "SIGKILL")
    assert _died([_Rank(143, tmp_path / "none")]) == (0, "SIGTERM")  # its handler, no note


def test_the_relay_shows_no_line_read_after_the_launcher_last_looked(capfdbinary):
    """A peer's view of a rank's death (its backtrace) is read after that death began, so
    after the launcher's look that saw it; lines read before the look and HOLD_S old are
    shown, a line read after it never, however old (was: any line HOLD_S old, so a peer's
    backtrace came out while a signalled rank took more than HOLD_S to exit)."""
    from moe_lab.distributed.launch import HOLD_S, _Relay
    relay = _Relay()
    looked = time.monotonic() - 10 * HOLD_S
    relay.lines.extend([(looked - 1, b"before the look\n"), (looked + 1, b"after the look\n")])
    relay.show(before=looked)
    assert capfdbinary.readouterr().err == b"before the look\n"
    relay.close(drop=True)
    assert capfdbinary.readouterr().err == b""
