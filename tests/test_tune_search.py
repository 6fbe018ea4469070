"""The tuner's search (moe_lab.measuring.tuning) and the Triton launch space (backends._triton_configs),
on the CPU with stand-ins: a tunable backend whose every configuration computes the
reference (one planted configuration computes zeros), and a timer whose times are fixed by
the configuration and the token count (a landscape with a known best), so the winners are
known before the search runs. No assertion here depends on a real timing."""
from __future__ import annotations

import hashlib
import io
import itertools
import json
import statistics
import subprocess
import weakref

import pandas as pd
import pytest

from moe_lab import backends
from moe_lab.measuring import tuning, tuning_compile
from moe_lab.backends import _triton_configs as tc
from moe_lab.storage.configs import read_table, write_table
from moe_lab.core.problems import make_problem
from moe_lab.measuring.timing import Timing
from moe_lab.measuring.tuning import TUNE_TOKENS, Tuner

MODEL = "custom:H=32,I=16,E=4,k=2"
GRID = dict(BLOCK_SIZE_M=(16, 32, 64), BLOCK_SIZE_N=(32, 64), BLOCK_SIZE_K=(64, 128),
            GROUP_SIZE_M=(1, 16, 32), num_warps=(4,), num_stages=(2, 3, 4))
DEFAULT = dict(BLOCK_SIZE_M=16, BLOCK_SIZE_N=32, BLOCK_SIZE_K=64, GROUP_SIZE_M=1, num_warps=4,
               num_stages=3)
WRONG = dict(BLOCK_SIZE_M=64, BLOCK_SIZE_N=64, BLOCK_SIZE_K=128, GROUP_SIZE_M=32, num_warps=4,
             num_stages=2)  # computes zeros as gemm1: never a winner
BROKEN = dict(BLOCK_SIZE_M=32, BLOCK_SIZE_N=64, BLOCK_SIZE_K=128, GROUP_SIZE_M=16, num_warps=4,
              num_stages=3)  # "out of resource" at any token count
W = dict(BLOCK_SIZE_M=0.5, BLOCK_SIZE_N=0.3, BLOCK_SIZE_K=0.2, GROUP_SIZE_M=0.15,
         num_warps=0.1, num_stages=0.12)


def best1(T):  # gemm1's optimum: outside the coarse pass (GROUP_SIZE_M 32, num_stages 2)
    return dict(BLOCK_SIZE_M=min(64, tc.block_m_limit(T)), BLOCK_SIZE_N=64, BLOCK_SIZE_K=128,
                GROUP_SIZE_M=32, num_warps=4, num_stages=2)


BEST2 = dict(BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=64, GROUP_SIZE_M=16, num_warps=4,
             num_stages=4)


def _h(*parts) -> float:
    """A fixed number in [0, 1) per argument tuple (seeded by its text)."""
    return int(hashlib.sha1(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:8], 16) / 2 ** 32


def landscape(cfg, best) -> float:
    """1 plus the weight of every launch key that differs from `best`, plus a fixed crumb
    below every step (no ties): separable, so one-key steps reach its minimum."""
    return 1 + sum(W[k] for k in W if cfg[k] != best[k]) + 1e-3 * _h(cfg)


def fake_us(full, T, rep_ms, run_rep_ms) -> float:
    """The layer's time: gemm1's landscape plus half gemm2's (so one configuration for
    both has one best), the default far from both; the shorter rungs a little off (never
    reordering what a step separates)."""
    if full["gemm1"] == DEFAULT and full["gemm2"] == DEFAULT:
        return (10 + T) * 5.0
    t = landscape(full["gemm1"], best1(T)) + 0.5 * landscape(full["gemm2"], BEST2)
    jitter = 0 if rep_ms == run_rep_ms else 2e-4 * _h(full, T, rep_ms)
    return (10 + T) * (t + jitter)


class FakeTimer:
    """Stand-in timer: fixed times, every call counted by (configuration, tokens, rep_ms)."""

    def __init__(self, rep_ms, clock=None, kill_after=None, sticky=None):
        self.rep_ms, self.clock, self.kill_after, self.sticky = rep_ms, clock, kill_after, sticky
        self.calls: dict[tuple, int] = {}

    def __call__(self, fn, inp, *, config, problem, rep_ms):
        if self.kill_after is not None and sum(self.calls.values()) >= self.kill_after:
            raise KeyboardInterrupt  # a timing killed midway: not one that was done
        key = (json.dumps(config, sort_keys=True), problem.tokens, rep_ms)
        self.calls[key] = self.calls.get(key, 0) + 1
        if self.clock is not None:
            self.clock.t += 1.0
        if BROKEN in config.values():
            raise RuntimeError("out of resource: shared memory, Required: 300000")
        if self.sticky is not None and self.sticky in config.values():
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        us = fake_us(config, problem.tokens, rep_ms, self.rep_ms)
        return Timing(us, us * 0.99, us * 1.01, 10, False, "fake")


class FakeTriton(backends.Backend):
    name = "fake-triton"
    description = "stand-in tunable backend for the search's tests"
    tunable = True
    coarse_config = staticmethod(tc.is_coarse)
    fine_keys = tc.FINE_KEYS

    def default_config(self, problem):
        return {"gemm1": dict(DEFAULT), "gemm2": dict(DEFAULT)}

    def config_space(self, problem):
        space = [c for c in (dict(zip(GRID, v)) for v in itertools.product(*GRID.values()))
                 if c["BLOCK_SIZE_M"] <= tc.block_m_limit(problem.tokens)]
        return {"gemm1": space, "gemm2": [dict(c) for c in space]}

    def config_files(self, problem, device_name):
        return tc.file_names(problem.local_experts, problem.inter, device_name, problem.dtype)

    def prepare(self, problem, weights, config=None):
        from moe_lab.measuring.correctness import Inputs, unquantized_reference
        wrong = config is not None and config["gemm1"] == WRONG

        def fn(x, topk_weights, topk_ids):  # the reference, once per input tensor
            held = _OUT.get(id(x))
            if held is None or held[0]() is not x:
                held = _OUT[id(x)] = (weakref.ref(x), unquantized_reference(
                    problem, weights, Inputs(x, topk_weights, topk_ids)).to(x.dtype))
            return held[1] * 0 if wrong else held[1]
        return fn


_OUT: dict = {}


@pytest.fixture(scope="module")
def fake():
    import torch
    backends.names()  # the real ones first, so discovery never runs over the stand-in
    backends.register(FakeTriton)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the references of up to 8192 tokens: no thread contention
    yield "fake-triton"
    torch.set_num_threads(threads)
    backends._REGISTRY.pop("fake-triton", None)


def tuner(root, run="t", keys=(1, 4, 16, 64), **kw):
    kw = dict(dict(rep_ms=8.0, warmup_ms=1.0, progress=False), **kw)
    kw.setdefault("timer", FakeTimer(kw["rep_ms"]))
    t = Tuner("fake-triton", "cpu", root / "runs" / run, root / "configs", **kw)
    return t, [[make_problem(MODEL, T, "fp32", 1, 1) for T in keys]]


def expected(T):
    """The winners by brute force over the space: gemm1 (as both GEMMs' configuration, the
    incorrect one left out), then gemm2 at gemm1's BLOCK_SIZE_M."""
    space = FakeTriton().config_space(make_problem(MODEL, T, "fp32"))["gemm1"]
    us = lambda f: fake_us(f, T, 8.0, 8.0)  # noqa: E731
    w1 = min((c for c in space if c != WRONG and c != BROKEN),
             key=lambda c: us({"gemm1": c, "gemm2": c}))
    first = {"gemm1": w1, "gemm2": w1}
    w2 = min((c for c in space if c["BLOCK_SIZE_M"] == w1["BLOCK_SIZE_M"] and c != BROKEN),
             key=lambda c: us({"gemm1": w1, "gemm2": c}))
    full = {"gemm1": w1, "gemm2": w2}
    return (full, us(full)) if us(full) < us(first) else (first, us(first))


# --- the space -------------------------------------------------------------------------------

SCHEMES = {"bf16": (2, False), "fp8-tensor": (1, False), "fp8-block128": (1, True)}


@pytest.mark.parametrize("dtype", list(SCHEMES))
def test_the_space_has_every_listed_value_and_prunes_only_by_a_stated_limit(dtype):
    elem, block = SCHEMES[dtype]
    space = tc.gemm_space(None, elem_bytes=elem, block_quant=block)
    listed = dict(BLOCK_SIZE_M=(16, 32, 64, 128, 256), BLOCK_SIZE_N=(32, 64, 128, 256),
                  BLOCK_SIZE_K=(64, 128) if block else (64, 128, 256), GROUP_SIZE_M=(1, 16, 32, 64),
                  num_warps=(4, 8), num_stages=(2, 3, 4, 5))
    for k, values in listed.items():
        assert sorted({c[k] for c in space}) == list(values), k
    # the limits, computed here from the kernel's numbers: 227 KB of shared memory per block
    # for num_stages copies of the A and B tiles (1-byte fp8 operands), 255 registers per
    # thread for the fp32 accumulator (two tiles for the block-scaled kernel), K tiles
    # inside one 128-column scale block
    def breaks(c):
        smem = (c["BLOCK_SIZE_M"] + c["BLOCK_SIZE_N"]) * c["BLOCK_SIZE_K"] * elem * c["num_stages"]
        regs = (2 if block else 1) * c["BLOCK_SIZE_M"] * c["BLOCK_SIZE_N"] / (32 * c["num_warps"])
        return smem > 227 * 1024 or regs > 255 or (block and 128 % c["BLOCK_SIZE_K"] != 0)
    keys = {json.dumps(c, sort_keys=True) for c in space}
    grid = [dict(zip(listed, v)) for v in itertools.product(
        *(tc.VALUES[k] for k in listed))]
    assert len(grid) == 5 * 4 * 3 * 4 * 2 * 4
    for c in grid:
        kept = json.dumps(c, sort_keys=True) in keys
        assert kept != breaks(c), c
        assert kept == (tc.limits(c, elem, block) == []), c  # and `limits` names why not
    assert len(space) == len(keys)  # each once
    if dtype == "fp8-tensor":  # 1-byte operands fit tiles that 2-byte ones do not
        assert len(space) > len(tc.gemm_space(None))


@pytest.mark.parametrize("tokens,tallest", [(1, 16), (2, 16), (16, 16), (24, 32), (32, 32),
                                            (48, 64), (64, 64), (96, 128), (128, 128),
                                            (256, 256), (8192, 256)])
def test_block_size_m_is_never_taller_than_the_rows_an_expert_can_have(tokens, tallest):
    """An expert gets at most one row per token: no tile taller than max(16, the next power
    of two >= T) is tried, and every shorter one is."""
    assert tc.block_m_limit(tokens) == max(16, 1 << (tokens - 1).bit_length())
    space = tc.gemm_space(tokens)
    assert {c["BLOCK_SIZE_M"] for c in space} == {m for m in tc.BLOCK_SIZE_M if m <= tallest}
    assert set(map(json.dumps, space)) == {json.dumps(c) for c in tc.gemm_space(None)
                                           if c["BLOCK_SIZE_M"] <= tallest}


def test_the_aiter_backends_search_the_space_of_their_dtype():
    from moe_lab.backends.aiter_triton import AiterTritonBackend
    be = AiterTritonBackend()
    for dtype, (elem, block) in SCHEMES.items():
        prob = make_problem("deepseek-r1", 48, dtype, 8, 1)
        sp = be.config_space(prob)
        assert sp["gemm1"] == sp["gemm2"] == tc.gemm_space(48, elem_bytes=elem, block_quant=block)
    coarse = [c for c in tc.gemm_space(None) if be.coarse_config(c)]
    assert {c["GROUP_SIZE_M"] for c in coarse} == set(tc.COARSE_GROUP_M)
    assert {c["num_stages"] for c in coarse} == set(tc.COARSE_STAGES)
    # the fine pass reaches every value of a fine key from any configuration of the space
    c = coarse[0]
    near = tuning.neighbours(c, tc.gemm_space(None), be.fine_keys)
    assert near and all(n["BLOCK_SIZE_M"] == c["BLOCK_SIZE_M"] for n in near)
    assert {n["GROUP_SIZE_M"] for n in near} | {c["GROUP_SIZE_M"]} == set(tc.GROUP_SIZE_M)
    assert {n["num_stages"] for n in near} | {c["num_stages"]} >= {2, 3, 4, 5} - {
        s for s in (2, 3, 4, 5) if tc.limits(dict(c, num_stages=s))}


def test_the_default_token_grid_is_the_19_keys():
    from moe_lab.cli import build_parser
    from moe_lab.core.problems import parse_tokens
    assert TUNE_TOKENS == (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048,
                           3072, 4096, 8192)
    args = build_parser().parse_args(["tune"])
    assert parse_tokens(args.tokens) == list(TUNE_TOKENS)
    help_ = " ".join(build_parser()._subparsers._group_actions[0].choices["tune"]
                     .format_help().split())
    for flag in ("--budget S", "--compile-workers N", "--verify N"):
        assert flag in help_


# --- the search ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def searched(fake, tmp_path_factory):
    """One uncut search of the 19 keys."""
    root = tmp_path_factory.mktemp("search")
    t, shards = tuner(root, keys=TUNE_TOKENS)
    win = t.run(shards)
    return root, t, win


def test_coarse_then_fine_finds_the_known_best_at_every_key(searched):
    root, t, win = searched
    assert sorted(win["tokens"]) == list(TUNE_TOKENS)
    cand = pd.read_parquet(root / "runs" / "t" / "candidates.parquet")
    for w in win.itertuples():
        full, us = expected(w.tokens)
        assert json.loads(w.config) == full, w.tokens
        assert w.median_us == pytest.approx(us)
        # gemm1's optimum is outside the coarse pass: the fine pass found it
        row = cand[(cand["tokens"] == w.tokens) & (cand["stage"] == "gemm1")
                   & (cand["full_config"] == json.dumps({"gemm1": full["gemm1"],
                                                         "gemm2": full["gemm1"]}, sort_keys=True))]
        assert set(row["search_pass"]) == {"fine"} and not tc.is_coarse(full["gemm1"])
        # one alignment: gemm2 keeps gemm1's BLOCK_SIZE_M, here every gemm2 candidate did
        assert full["gemm2"]["BLOCK_SIZE_M"] == full["gemm1"]["BLOCK_SIZE_M"]
        g2 = cand[(cand["tokens"] == w.tokens) & (cand["stage"] == "gemm2")]
        assert len(g2) and all(json.loads(c)["BLOCK_SIZE_M"] == full["gemm1"]["BLOCK_SIZE_M"]
                               for c in g2["config"])
        assert w.default_us == pytest.approx((10 + w.tokens) * 5.0) and w.speedup > 1
    # every (candidate, key, timing) was timed once
    assert max(t.timer.calls.values()) == 1 and cand["candidate_id"].is_unique
    # a row per timing, and one per key a broken configuration was not timed again at
    assert len(cand) == sum(t.timer.calls.values()) + cand["error"].str.startswith(
        "not timed").sum()
    man = json.loads((root / "runs" / "t" / "manifest.json").read_text())
    assert man["status"] == "complete" and man["left"] == []


def test_successive_halving_times_every_coarse_candidate_briefly_then_fewer_longer(searched):
    root, t, win = searched
    cand = pd.read_parquet(root / "runs" / "t" / "candidates.parquet")
    g1 = cand[(cand["stage"] == "gemm1") & (cand["tokens"] == 64)]
    space = FakeTriton().config_space(make_problem(MODEL, 64, "fp32"))["gemm1"]
    coarse = [c for c in space if tc.is_coarse(c)]
    by_rung = g1.groupby("rung")["candidate_id"].count().to_dict()
    plan = t.plan
    n1 = max(plan.min_keep, -(-len(coarse) * plan.keep // 1))
    assert by_rung[0] == len(coarse) and by_rung[1] == n1  # rung 0 all, rung 1 a share
    assert set(g1[g1["rung"] == 0]["rep_ms"]) == {8.0 * plan.rungs[0]}
    assert set(g1[g1["rung"] == 2]["rep_ms"]) == {8.0}
    # the spread in the winners: best, median, worst of rung 0 (every coarse candidate,
    # with that configuration for both GEMMs; BROKEN fails and is not in it)
    times = sorted(fake_us({"gemm1": c, "gemm2": c}, 64, 8.0 * plan.rungs[0], 8.0)
                   for c in coarse if c != BROKEN)
    w = win.set_index("tokens").loc[64]
    assert w.search_best_us == pytest.approx(times[0])
    assert w.search_worst_us == pytest.approx(times[-1])
    assert w.search_median_us == pytest.approx(statistics.median(times))
    assert w.search_candidates == len(times)
    timed = ~cand["error"].fillna("").str.startswith("not timed")
    assert w.candidates_timed == ((cand["tokens"] == 64) & timed).sum()


def test_a_wrong_or_broken_candidate_is_a_row_never_a_winner(searched):
    root, t, win = searched
    cand = pd.read_parquet(root / "runs" / "t" / "candidates.parquet")
    wrong = cand[cand["full_config"] == json.dumps({"gemm1": WRONG, "gemm2": WRONG},
                                                   sort_keys=True)]
    # WRONG is the fastest at 64+ tokens once the fine pass reaches it: checked, marked
    assert "incorrect" in set(wrong["status"])
    assert len(win) == len(TUNE_TOKENS)  # a winner per key: any() of none is False
    assert not any(json.loads(c)["gemm1"] == WRONG for c in win["config"])
    broken = cand[cand["full_config"] == json.dumps({"gemm1": BROKEN, "gemm2": BROKEN},
                                                    sort_keys=True)]
    assert len(broken) and set(broken["status"]) == {"failed"}
    assert broken["error"].str.contains("out of resource").all()
    # timed (and failed) at one key; the others say so without compiling it again
    tried = [k for k in t.timer.calls if json.loads(k[0]) == {"gemm1": BROKEN, "gemm2": BROKEN}]
    assert len(tried) == 1 and broken["error"].str.startswith("not timed").sum() == len(broken) - 1


def test_the_files_hold_every_key_with_provenance(searched):
    root, t, win = searched
    prob = make_problem(MODEL, 1, "fp32", 1, 1)
    names = FakeTriton().config_files(prob, t.device_name)
    folder = root / "configs" / "fake-triton"
    for stage, name in names.items():
        table = read_table(folder / name)
        assert sorted(table) == list(TUNE_TOKENS)
        for T in TUNE_TOKENS:
            assert table[T] == expected(T)[0][stage]
    prov = json.loads((folder / "provenance.json").read_text())[names["gemm1"]]
    cand = pd.read_parquet(root / "runs" / "t" / "candidates.parquet")
    assert prov["run"] == "t" and prov["git_commit"] == t.git_commit
    timed = (~cand["error"].fillna("").str.startswith("not timed")).sum()
    assert prov["budget_s"] is None and prov["candidates_timed"] == timed
    assert prov["keys"] == list(TUNE_TOKENS) and prov["search"] == t.plan.describe()


def test_a_budget_cut_search_resumes_where_it_stopped_to_the_same_winners(fake, tmp_path):
    """On a clock that moves 1 s per timing, 40 s a command: every command stops at its
    budget, says what is left, and the next one goes on; no timing is done twice, and the
    winners are an uncut search's."""
    class Clock:  # the budget's clock
        t = 0.0

        @classmethod
        def time(cls):
            return cls.t
    keys = (1, 16, 64)
    timer = FakeTimer(8.0, clock=Clock)
    commands, lefts = 0, []
    while True:
        t, shards = tuner(tmp_path, run="cut", keys=keys, budget_s=40.0, timer=timer,
                          clock=Clock.time)
        t.run(shards)
        commands += 1
        man = json.loads((tmp_path / "runs" / "cut" / "manifest.json").read_text())
        if man["status"] == "complete":
            break
        assert man["status"] == "budget spent" and len(man["left"]) == 1
        left = man["left"][0]
        assert left["keys_left"] == list(keys)  # no key has its winner before gemm2 ends
        assert left["stages_left"] == ["gemm1", "gemm2"][["gemm1", "gemm2"].index(
            left["stage"]):] and set(left["step_keys"]) <= set(keys)
        lefts.append((left["stage"], left["step"]))
        assert commands < 50
    assert commands > 3 and lefts[0] == ("gemm1", "coarse rung 1/3")
    assert ("gemm2", "coarse rung 1/3") in lefts and any("fine" in s for _, s in lefts)
    assert max(timer.calls.values()) == 1  # never timed twice
    cut = pd.read_parquet(tmp_path / "runs" / "cut" / "candidates.parquet")
    u, shards = tuner(tmp_path / "u", run="uncut", keys=keys)
    uncut_win = u.run(shards)
    uncut = pd.read_parquet(tmp_path / "u" / "runs" / "uncut" / "candidates.parquet")
    assert set(cut["candidate_id"]) == set(uncut["candidate_id"])
    cut_win = pd.read_parquet(tmp_path / "runs" / "cut" / "winners.parquet")
    a = cut_win.set_index("tokens")[["config", "median_us"]].sort_index()
    b = uncut_win.set_index("tokens")[["config", "median_us"]].sort_index()
    pd.testing.assert_frame_equal(a, b)
    for T in keys:
        assert json.loads(a.loc[T, "config"]) == expected(T)[0]


def test_a_killed_search_resumes_without_timing_a_row_twice(fake, tmp_path):
    timer = FakeTimer(8.0, kill_after=57)
    t, shards = tuner(tmp_path, keys=(4, 64), timer=timer)
    with pytest.raises(KeyboardInterrupt):
        t.run(shards)
    first = pd.read_parquet(tmp_path / "runs" / "t" / "candidates.parquet")
    assert len(first) == 57
    timer.kill_after = None
    t, shards = tuner(tmp_path, keys=(4, 64), timer=timer)
    win = t.run(shards)
    assert max(timer.calls.values()) == 1
    for w in win.itertuples():
        assert json.loads(w.config) == expected(w.tokens)[0]


def test_a_timing_that_loses_the_gpu_context_stops_the_command_and_is_never_retimed(fake,
                                                                                    tmp_path):
    """An illegal memory access leaves a process's CUDA context unusable: its row is kept
    (failed), the command stops saying so, and the next goes on after it; the configuration
    is not timed at another key."""
    sticky = dict(BLOCK_SIZE_M=16, BLOCK_SIZE_N=64, BLOCK_SIZE_K=64, GROUP_SIZE_M=1,
                  num_warps=4, num_stages=4)
    timer = FakeTimer(8.0, sticky=sticky)
    t, shards = tuner(tmp_path, keys=(4, 64), timer=timer)
    assert len(t.run(shards)) == 0 and "illegal memory access" in t.stopped_by
    man = json.loads((tmp_path / "runs" / "t" / "manifest.json").read_text())
    assert man["status"] == "interrupted" and man["stopped_by"] == t.stopped_by
    stops = [t.stopped_by]
    while t.stopped_by:  # as gemm2 beside another gemm1 it loses the context again: once
        t, shards = tuner(tmp_path, keys=(4, 64), timer=timer)
        win = t.run(shards)
        stops.append(t.stopped_by)
        assert len(stops) < 5
    assert len(win) == 2 and all(sticky not in json.loads(c).values() for c in win["config"])
    assert max(timer.calls.values()) == 1  # no row timed twice, the lost ones included
    tried = [k for k in timer.calls if json.loads(k[0]) == {"gemm1": sticky, "gemm2": sticky}]
    assert len(tried) == 1  # the configuration was not tried again at the other key
    cand = pd.read_parquet(tmp_path / "runs" / "t" / "candidates.parquet")
    lost = cand[cand["full_config"] == json.dumps({"gemm1": sticky, "gemm2": sticky},
                                                  sort_keys=True)]
    assert set(lost["status"]) == {"failed"} and lost["error"].str.contains("illegal").all()
    assert len(lost) == 2  # timed at one key, 'not timed' at the other


def test_verify_reports_a_candidate_faster_than_a_committed_winner(fake, tmp_path):
    keys = (4, 64)
    prob = make_problem(MODEL, 4, "fp32", 1, 1)
    t, _ = tuner(tmp_path, keys=keys)
    names = FakeTriton().config_files(prob, t.device_name)
    folder = tmp_path / "configs" / "fake-triton"
    good = {T: expected(T)[0] for T in keys}
    slow = dict(good[64]["gemm1"], BLOCK_SIZE_N=32)  # a committed winner 0.3 steps off
    for stage in ("gemm1", "gemm2"):
        write_table(folder / names[stage], {4: good[4][stage],
                                            64: slow if stage == "gemm1" else good[64][stage]})
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    v, shards = tuner(tmp_path, run="v", keys=keys, verify=True)
    assert v.plan == tuning.SearchPlan().doubled(order_seed=1)
    v.run(shards)
    rep = pd.read_parquet(tmp_path / "runs" / "v" / "verify.parquet").set_index("tokens")
    assert rep.loc[4, "faster"] == 0 and rep.loc[4, "verdict"] == "nothing faster"
    assert rep.loc[4, "committed_us"] == pytest.approx(expected(4)[1])
    assert rep.loc[64, "faster"] >= 1 and "faster than the committed winner" in rep.loc[64, "verdict"]
    assert json.loads(rep.loc[64, "fastest_config"]) == good[64]
    assert rep.loc[64, "committed_over_fastest"] > tuning.VERIFY_MARGIN
    # its own folder; the committed files untouched; its winners are no tune's winners
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert not (tmp_path / "runs" / "v" / "winners.parquet").exists()
    assert tuning.verify_sample(TUNE_TOKENS, 4, 0) == tuning.verify_sample(TUNE_TOKENS, 4, 0)
    assert len(set(tuning.verify_sample(TUNE_TOKENS, 4, 0)) & set(TUNE_TOKENS)) == 4
    assert tuning.verify_sample((8, 1), 0) == [1, 8]


# --- compiling ahead ---------------------------------------------------------------------------

def test_candidates_are_compiled_ahead_in_batches_before_they_are_timed(fake, tmp_path,
                                                                        monkeypatch):
    events = []

    class Spy:
        def __init__(self, workers, backend_name, device):
            self.workers = workers

        def warm(self, prob, fulls, reps, timeout_s, budget_cut=False):
            # a batch of at most twice the workers; k=2: 1 token (2 pairs) and 16 (32 pairs,
            # a multiple of 16) are the two ways Triton specialises these keys
            assert len(fulls) <= 2 * self.workers and reps == [1, 16]
            events.extend(("warm", json.dumps(f, sort_keys=True)) for f in fulls)

        def close(self):
            pass

        def report(self):
            return {}
    monkeypatch.setattr(tuning, "Precompiler", Spy)
    timer = FakeTimer(8.0)

    def timed(fn, inp, *, config, problem, rep_ms):
        events.append(("time", json.dumps(config, sort_keys=True)))
        return timer(fn, inp, config=config, problem=problem, rep_ms=rep_ms)
    t, shards = tuner(tmp_path, keys=(1, 16, 64), timer=timed)
    t.compile_workers = 3  # a GPU's setting, on the CPU
    win = t.run(shards)
    first_time = {}
    for i, (e, c) in enumerate(events):
        if e == "time":
            first_time.setdefault(c, i)
    default = json.dumps(t.backend.default_config(shards[0][0]), sort_keys=True)
    assert set(first_time) - {default}, "no candidate timed: nothing was compiled ahead"
    for c, i in first_time.items():
        if c != default:
            assert ("warm", c) in events[:i], c  # compiled ahead of its first timing
    assert sorted(win["tokens"]) == [1, 16, 64], win  # a winner per key, each checked below
    for w in win.itertuples():  # and the search is the same
        assert json.loads(w.config) == expected(w.tokens)[0]


def test_the_specialisations_a_worker_compiles_and_its_stand_in_weights(fake):
    assert tuning._specialization_reps(TUNE_TOKENS, 8) == [1, 2]
    assert tuning._specialization_reps(TUNE_TOKENS, 1) == [1, 2, 16]
    assert tuning.default_compile_workers("cpu") == 0
    assert tuning.default_compile_workers("cuda") >= 1
    full = {"gemm1": DEFAULT, "gemm2": DEFAULT}
    for ep in (1, 2):  # one expert's weights, every pair routed to it, EP's map included
        prob = make_problem(MODEL, 1, "fp32", 2, ep)
        assert tuning._warm_config("fake-triton", prob, full, [1, 2], "cpu") == ""
    assert tuning._warm_config("no-such-backend", prob, full, [1], "cpu").startswith("UsageError")


def test_the_compile_workers_answer_and_a_dead_one_turns_compiling_ahead_off(fake, tmp_path):
    """The real worker processes, on the CPU: every job answered (here with the error of a
    backend that takes no configuration: counted, never raised); a worker killed, the next
    batch turns compiling ahead off and ends the others, and says why."""
    pc = tuning.Precompiler(1, "torch", "cpu")
    prob = make_problem(MODEL, 1, "fp32", 1, 1)
    try:
        pc.warm(prob, [{"gemm1": dict(DEFAULT, GROUP_SIZE_M=g)} for g in (1, 16)], [1], 120)
        assert pc.report() == dict(workers=1, configurations=2, worker_errors=2,
                                   wall_s=pc.report()["wall_s"], off=None)
        worker = pc.procs[0]
        worker.kill()
        worker.wait()
        pc.warm(prob, [{"gemm1": dict(DEFAULT, GROUP_SIZE_M=32)}], [1], 120)
        assert pc.report()["off"].startswith("turned off after 2 configurations")
        assert pc.procs == []
        pc.warm(prob, [{"gemm1": dict(DEFAULT, GROUP_SIZE_M=64)}], [1], 120)  # off: no-op
        assert pc.report()["configurations"] == 2
    finally:
        pc.close()
    assert Tuner("fake-triton", "cpu", tmp_path / "r", tmp_path / "c",
                 compile_workers=4).compile_workers == 0  # no Triton compiles on a CPU


def test_closing_busy_compile_workers_takes_one_grace_period_not_one_each(monkeypatch):
    """A tune stopped by SIGTERM closes its compile workers in the seconds it has to write
    its manifest: busy workers share one grace period, then are killed (twelve of them
    waited 5 s each outlived the device script's kill)."""
    now = [0.0]
    monkeypatch.setattr(tuning_compile.time, "time", lambda: now[0])

    class Busy:  # a worker mid-compile: never exits by itself
        def __init__(self):
            self.killed, self.stdin = False, io.BytesIO()

        def wait(self, timeout=None):
            if self.killed:
                return -9
            now[0] += timeout or 0.0  # the clock moves by what the wait took
            raise subprocess.TimeoutExpired("worker", timeout)

        def kill(self):
            self.killed = True
    pc = tuning.Precompiler(12, "torch", "cpu")
    pc.procs = [Busy() for _ in range(12)]
    workers = list(pc.procs)
    pc.close(grace_s=5.0)
    assert now[0] == pytest.approx(5.0)  # one grace period for the twelve
    assert all(w.killed for w in workers) and pc.procs == []


def test_a_sweep_compiles_ahead_what_each_point_will_launch(tmp_path, monkeypatch):
    """A sweep's shard (moe_lab.measuring.sweep on a GPU): the launch configuration each
    point of a tunable backend will run (default, tuned, a file), resolved as the point
    resolves it, collected once with the token counts it runs at, and handed to real
    worker processes (on this CPU each worker's run fails: counted, never raised); a
    backend without launch configurations left out."""
    from moe_lab.core.config_files import nearest
    from moe_lab.measuring.correctness import make_weights
    from moe_lab.storage.modes import parse_modes
    from moe_lab.storage import configs as sc
    model = "custom:H=64,I=32,E=8,k=2"
    base = dict(BLOCK_SIZE_N=64, BLOCK_SIZE_K=64, GROUP_SIZE_M=1, num_warps=4, num_stages=3)
    tuned = {m: dict(base, BLOCK_SIZE_M=bm) for m, bm in ((1, 16), (64, 32), (1024, 64))}
    published = {m: dict(base, BLOCK_SIZE_M=bm) for m, bm in ((1, 16), (4096, 128))}
    at = backends.get("aiter-triton")
    for name in at.config_files(make_problem(model, 1, "bf16", 8, 1), "NVIDIA H200").values():
        write_table(tmp_path / "configs" / "aiter-triton" / name, tuned)
    own = at.config_files(make_problem(model, 1, "bf16", 8, 1), "NVIDIA H200")["gemm1"]
    pub = write_table(tmp_path / own, published)  # named for the shape (another's: unsupported)
    monkeypatch.setattr(sc, "configs_dir_for", lambda dev: tmp_path / "configs")
    graph = parse_modes("graph")[0]
    tokens = (1, 2, 16, 64, 2048)
    todo = {}
    for T in tokens:
        p = make_problem(model, T, "bf16", 8, 1)
        todo[(p, "uniform", "aiter-triton")] = [(graph, c, "fused")
                                                for c in ("default", "tuned", str(pub))]
        todo[(p, "uniform", "torch-grouped")] = [(graph, "default", "fused")]
    weights = make_weights(next(iter(todo))[0], "cpu", 0)
    got = tuning_compile.sweep_launches(todo, weights, "NVIDIA H200")
    assert set(got) == {"aiter-triton"}
    runs = {js: ts for js, (_, ts) in got["aiter-triton"].items()}
    want: dict = {}
    for T in tokens:
        for table in (tuned, published):  # the nearest entry, both GEMMs (one file for both)
            c = nearest(table, T)
            want.setdefault(json.dumps({"gemm1": c, "gemm2": c}, sort_keys=True), set()).add(T)
        # aiter's shipped choice at T: what the default point will launch
        fn = at.prepare(make_problem(model, T, "bf16", 8, 1), weights)
        want.setdefault(json.dumps(fn.launch_config(T), sort_keys=True), set()).add(T)
    assert runs == want and len(runs) >= 4
    # the workers: one job per launch configuration, at the specialisations of its tokens
    monkeypatch.setattr(tuning_compile, "device_name", lambda device: "NVIDIA H200")
    (line,) = tuning_compile.compile_sweep_ahead(todo, weights, "cpu", 1)
    assert f"aiter-triton: {len(runs)} launch configurations compiled ahead" in line
    assert tuning_compile.compile_sweep_ahead(todo, weights, "cpu", 0) == []


class _TrapAt4(FakeTimer):
    """At 4 tokens the short rungs time `trap` (the best launch there, as at 1 and 16 tokens)
    far too slow, so 4's own coarse pass drops it; its full timing is the true one."""

    def __init__(self, rep_ms, trap):
        super().__init__(rep_ms)
        self.trap = trap

    def __call__(self, fn, inp, *, config, problem, rep_ms):
        t = super().__call__(fn, inp, config=config, problem=problem, rep_ms=rep_ms)
        if problem.tokens == 4 and rep_ms != self.rep_ms and config["gemm1"] == self.trap:
            return Timing(1e6, 1e6, 1e6, 10, False, "fake")
        return t


@pytest.mark.parametrize("near", [0, 1])
def test_a_key_whose_own_walk_misses_its_neighbours_best_gets_it_from_the_neighbour_pass(
        fake, tmp_path, near):
    """1, 4 and 16 tokens share their best launch (one 16-row tile each); at 4 the short
    rungs lose it (a noisy timing, planted), and with no fine steps 4's own walk ends on a
    slower one. The neighbour-key pass times 1's and 16's best at 4 in full, so 4 wins with
    it; without the pass (near_keys=0) 4 keeps the slower launch."""
    space = FakeTriton().config_space(make_problem(MODEL, 4, "fp32"))["gemm1"]
    coarse = [c for c in space if tc.is_coarse(c) and c not in (WRONG, BROKEN)]
    trap = min(coarse, key=lambda c: fake_us({"gemm1": c, "gemm2": c}, 4, 8.0, 8.0))
    plan = tuning.SearchPlan(fine_rounds=0, near_keys=near)
    t, shards = tuner(tmp_path, keys=(1, 4, 16), plan=plan, timer=_TrapAt4(8.0, trap))
    win = t.run(shards)
    cand = pd.read_parquet(tmp_path / "runs" / "t" / "candidates.parquet")
    won = {w.tokens: json.loads(w.config)["gemm1"] for w in win.itertuples()}
    assert won[1] == won[16] == trap
    assert (won[4] == trap) == bool(near)  # the test fails if the pass is removed
    assert ("near" in set(cand["search_pass"])) == bool(near)
    assert t.plan.describe()["near_keys"] == near


def test_a_search_from_before_the_neighbour_pass_resumes_with_it(fake, tmp_path):
    """A run folder whose manifest's plan has no near_keys (the committed searches cut
    before the pass existed) resumes with the pass and times nothing twice; a folder whose
    plan names another near_keys is refused, as any other plan is."""
    from moe_lab.core.errors import UsageError
    from moe_lab.storage.store import RunStore
    t, shards = tuner(tmp_path, keys=(1, 4, 16), plan=tuning.SearchPlan(near_keys=0))
    t.run(shards)
    store = RunStore(tmp_path / "runs" / "t", create=False)
    m = store.read_manifest()
    del m["config"]["search"]["near_keys"]  # as written before the pass
    store.update_manifest(config=m["config"])
    assert "near_keys" not in store.read_manifest()["config"]["search"]
    before = pd.read_parquet(tmp_path / "runs" / "t" / "candidates.parquet")
    t2, shards = tuner(tmp_path, keys=(1, 4, 16))
    t2.run(shards)
    after = pd.read_parquet(tmp_path / "runs" / "t" / "candidates.parquet")
    assert len(before) > 0  # candidates to resume from (after holds them too)
    assert not after["candidate_id"].duplicated().any()
    assert set(before["candidate_id"]) <= set(after["candidate_id"])
    assert set(after.loc[~after["candidate_id"].isin(before["candidate_id"]),
                         "search_pass"]) <= {"near"}
    with pytest.raises(UsageError, match="the search plan"):
        tuner(tmp_path, keys=(1, 4, 16), plan=tuning.SearchPlan(near_keys=2))[0].run(shards)
