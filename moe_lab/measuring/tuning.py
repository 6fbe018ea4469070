"""Tune: the fastest launch configuration per shape and token count, on the device at hand.

    Tuner("aiter-triton", "cuda", "data/runs/tune-x", "data/configs/nvidia-h200",
          budget_s=540).run([[make_problem("deepseek-r1", T, "fp8-block128", 8, 1)
                              for T in TUNE_TOKENS]])

A shard is one shape (model x tp x ep x dtype) at several token counts, the keys of its
config files (TUNE_TOKENS by default). A launch configuration does not depend on the token
count, so per shape every candidate is prepared once (the weights are shared) and timed at
every key it is a candidate for (the backend's `config_space` of that key's problem).

Per shape: the backend's default is timed at every key; then the stages one after the
other (gemm1, then gemm2; coordinate descent):

* the first stage's candidate is every GEMM's configuration (vLLM's tuning of this kernel:
  one configuration per layer; it keeps one alignment and does not depend on the key);
  a later stage searches its own GEMM's configuration with the earlier stages' winner of
  that key in place, at that winner's BLOCK_SIZE_M (one alignment);
* coarse pass, successive halving (SearchPlan.rungs): every coarse candidate (the
  backend's `coarse_config`; all of them where it has none) is timed briefly at every
  key, the fastest share (`keep`) of each key goes on to be timed longer, ..., the last
  rung with the run's full timing (`rep_ms`);
* fine pass: from each key's fastest, its neighbours (one launch key changed: the
  backend's `fine_keys`, by default all but BLOCK_SIZE_M) are timed in full, and the walk
  moves to the fastest while one is faster (at most `fine_rounds` steps);
* neighbour-key pass: each key's best is timed in full at the keys next to it (`near_keys`
  places either side), so a key where the routed work is alike (1 and 2 tokens hitting one
  expert each) does not keep a launch that is slower there than its neighbour's;
* the fastest fully timed candidate of the key that beats the incumbent (the default, then
  the earlier stage's winner) is checked against the reference before it is kept; an
  incorrect one is marked and the next fastest tried.

Every timing is a row of `candidates.parquet`, keyed by its candidate_id (the point, the
stage, the full configuration and, below the last rung, the rung's timing). A failed
compile or a launch out of shared memory is a row with its error (the same configuration's
other keys then get rows saying so, not timed again); a row once written is never timed
again, and every decision is made from the rows' times, so a search that was killed, or
stopped by its budget (`budget_s`, this command's seconds), resumes where it stopped and
reaches the winners it would have reached uncut. Rows reach the file every FLUSH_ROWS rows
or FLUSH_S seconds and whenever a command ends, by its budget, Ctrl-C or SIGTERM (only a
SIGKILL loses the rows since the last write; they are timed again). The manifest's `left`
says which shapes, stages and token counts are unfinished. A timing that loses the GPU's
context (an illegal address) is kept as a failed row and stops the command; the next one
goes on after it. The winners are written as config files in the format the kernel's own
project reads (`Backend.config_files`), every key of the shape in them, with
`provenance.json` beside them; `winners.parquet` also holds the search's spread per point
(the best, median and worst candidate of the first rung).

The stage search and its rows are moe_lab.measuring.tuning_search (StageSearch, a base of Tuner);
compiling ahead is moe_lab.measuring.tuning_compile; the tuned files (and the refusal of
one that holds token counts another run tuned and this one does not, before the search) are
moe_lab.measuring.tuning_files.

`verify=True` (moe-lab tune --verify): the same search with another candidate order and
twice the survivors and fine steps (SearchPlan.doubled), into its own run folder, the
committed winner (the tuned files under `configs_dir`) timed beside it; every correct
candidate faster than the committed winner by more than VERIFY_MARGIN is reported in
`verify.parquet`. It writes no config files.

The timer is `timer(fn, inputs, *, config, problem, rep_ms) -> moe_lab.measuring.timing.Timing`,
by default the sweep's (graph replay on a GPU, `time_fn`); the tests pass stand-ins.
On a GPU, `compile_workers` processes compile the next batch of candidates into Triton's
on-disk cache before they are timed (Precompiler).
"""
from __future__ import annotations

import json
import math
import random
import statistics
import time
from pathlib import Path

import pandas as pd

from .. import backends
from ..core.environment import capture_environment, device_name, now_iso
from ..core.errors import terminate_gracefully
from ..core.problems import Problem
from ..storage.invocations import begin_invocation, end_invocation
from . import tuning_files
from .progress import progress_bar
from .tuning_files import _problem_of, read_provenance  # noqa: F401 (tests, callers)
from ..storage.store import RunStore
from .timing import time_fn
from .tuning_compile import (Precompiler, _specialization_reps, _warm_config,  # noqa: F401
                             compile_workers_for, default_compile_workers)
from .tuning_search import (CANDIDATE_KEY, FLUSH_ROWS, FLUSH_S, SearchPlan,  # noqa: F401
                            StageSearch, _Best, _broken_text, _BudgetSpent, _ContextLost, _js,
                            _Shape, candidate_id, neighbours, shape_name)

# the token counts a tuned file holds by default (core.constants: the CLI's --help reads it)
from ..core.constants import TUNE_REP_MS, TUNE_TOKENS, TUNE_WARMUP_MS, VERIFY_MARGIN  # noqa: E402

WINNER_KEY = ("model", "tp", "ep", "ep_rank", "dtype", "tokens", "backend")
VERIFY_KEY = WINNER_KEY
VERIFY_SHOWN = 5  # verify: the correct faster candidates checked and listed per point


def verify_sample(tokens, n: int, seed: int = 0) -> list[int]:
    """`n` of the token counts (all when n <= 0 or n >= their number), drawn with `seed`,
    ascending: the points a verify run searches again."""
    tokens = sorted(dict.fromkeys(int(t) for t in tokens))
    if n <= 0 or n >= len(tokens):
        return tokens
    return sorted(random.Random(f"verify:{seed}").sample(tokens, n))


class Tuner(StageSearch):
    """The search of every shape of a run (module doc); the stage search is StageSearch's."""

    def __init__(self, backend: str, device: str, run_dir, configs_dir, *, seed: int = 0,
                 routing: str = "uniform", budget_s: float | None = None,
                 warmup_ms=TUNE_WARMUP_MS, rep_ms=TUNE_REP_MS, candidate_timeout_s=60.0, progress=True, command="",
                 plan: SearchPlan | None = None, timer=None, compile_workers: int | None = None,
                 verify: bool = False, clock=None, budget_from: float | None = None):
        self.budget_from = budget_from  # when the budget started (clock's time; None: run())
        self.backend_name = backends.parse_names(backend)[0]
        self.backend = backends.get(self.backend_name)
        if not self.backend.tunable:
            from ..core.errors import UsageError
            raise UsageError(f"backend {backend!r} has no tunable configurations; tunable: "
                             + ", ".join(n for n in backends.names() if backends.backend_class(n).tunable))
        self.device, self.seed, self.routing = device, seed, routing
        self.run_dir, self.configs_dir = Path(run_dir), Path(configs_dir)
        self.budget_s, self.warmup_ms, self.rep_ms = budget_s, warmup_ms, rep_ms
        self.candidate_timeout_s, self.progress, self.command = candidate_timeout_s, progress, command
        self.mode = "graph" if str(device).startswith("cuda") else "eager"
        self.device_name = device_name(device)
        self.verify = verify
        self.plan = plan or (SearchPlan().doubled(order_seed=seed + 1) if verify else SearchPlan())
        self.timer = timer or self._time_fn
        self.clock = clock or time.time  # the budget's (tests: one that moves per timing)
        self.compile_workers = compile_workers_for(device, compile_workers)
        self.coarse = getattr(self.backend, "coarse_config", None)
        self.fine_keys = getattr(self.backend, "fine_keys", None)

    def _time_fn(self, fn, inp, *, config, problem, rep_ms):
        """The default timer: the sweep's, on the point's own inputs."""
        return time_fn(self.mode, fn, [inp.args()], self.device, warmup_ms=self.warmup_ms,
                       rep_ms=rep_ms)

    # --- the run ----------------------------------------------------------------------
    def run(self, shards: list[list[Problem]]) -> pd.DataFrame:
        """Tune every shard (shape) at its token counts; returns the winners found by this
        call (one row per point). Holds the run folder's lock (moe_lab.storage.runlock)
        throughout; a folder that is unreadable, not a tune run, or tuned with other
        settings (MEANING) is refused before anything is written."""
        from ..storage.runlock import run_lock
        self.check(shards)
        made = not self.run_dir.exists()
        try:
            with run_lock(self.run_dir, self.command or "moe-lab tune"):
                self._check_folder()
                return self._run(shards)
        except BaseException:  # a refusal (a full disk at the manifest...): no empty folder
            if made and self.run_dir.is_dir() and all(
                    p.name.startswith(".") and p.name.endswith(".tmp")
                    for p in self.run_dir.iterdir()):
                import shutil
                shutil.rmtree(self.run_dir, ignore_errors=True)  # its own, holding nothing
            raise

    # settings that change what a candidate's row means, or which rows a search times
    MEANING = ("backend", "mode", "seed", "routing", "warmup_ms", "rep_ms", "search", "verify")

    def settings(self) -> dict:
        return dict(backend=self.backend_name, mode=self.mode, seed=self.seed,
                    routing=self.routing, warmup_ms=self.warmup_ms, rep_ms=self.rep_ms,
                    search=self.plan.describe(), verify=self.verify)

    def check(self, shards=None) -> None:
        """UsageError (one line, nothing touched) when `run` would be refused now: the
        folder is another writer's at the moment, unreadable, or tuned otherwise; the
        configs folder cannot take the winners, holds a file of a shard with token counts
        another run tuned and this one does not (tuning_files), or (--verify) lacks a
        shard's file."""
        from ..core.validate import not_inside_run
        from ..storage.configs import check_configs_dir
        from ..storage.runlock import busy
        not_inside_run(self.run_dir)  # --data-dir a run's folder (or in one)
        who = busy(self.run_dir)
        if who:
            from ..core.errors import RunLocked
            raise RunLocked(who)
        self._check_folder()
        check_configs_dir(self.configs_dir, self.backend_name,
                          shards if self.verify else None, self.device_name, self.run_dir,
                          writes=None if self.verify else shards or [])
        if shards and not self.verify:  # a tuned file whose other run's keys it would drop
            tuning_files.refuse_dropping(self, shards)

    def _check_folder(self) -> None:
        from ..storage.resume import check_run_files, refuse_other_settings
        store = RunStore(self.run_dir, create=False)
        if not store.dir.exists():
            return
        check_run_files(store, {"candidates.parquet": ("candidate_id",)})
        refuse_other_settings(store, "tune", self.settings(), self.MEANING,
                              flags=dict(mode="mode (of --device)", warmup_ms="--warmup-ms",
                                         rep_ms="--rep-ms", search="the search plan",
                                         verify="--verify"))

    def _run(self, shards: list[list[Problem]]) -> pd.DataFrame:
        store = RunStore(self.run_dir)
        env = capture_environment()
        self.git_commit = env.get("git_commit")
        t0 = time.time()
        invocations = begin_invocation(store, dict(
            run_id=self.run_dir.name, command=self.command, environment=env,
            started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), kind="tune",
            config=dict(self.settings(), budget_s=self.budget_s,
                        configs_dir=str(self.configs_dir),
                        compile_workers=self.compile_workers,
                        shards=[[p.describe() for p in s] for s in shards]),
            where=f"tuned on {env.get('device_name')}"), t0)
        old = store.load_table("candidates")
        self.done = {r["candidate_id"]: r for r in old.to_dict("records")} if len(old) else {}
        self.store, self.t0 = store, t0
        start = self.clock() if self.budget_from is None else self.budget_from
        self.deadline = (start + self.budget_s) if self.budget_s else math.inf
        self._pending, self._flushed_at = {}, self.clock()
        self.counts = {"measured": 0, "skipped": 0}
        self._prior, self._reused = set(self.done), set()
        self._left = [dict(shape=shape_name(s[0]), stage="not started", step="",
                           keys_left=sorted(p.tokens for p in s)) for s in shards]
        self.stages: list[str] = []
        self._shapes_info: list[dict] = []
        self.precompiler = Precompiler(self.compile_workers, self.backend_name, self.device) \
            if self.compile_workers > 0 else None
        self.bar = progress_bar(sum(len(s) for s in shards), self.progress)
        winners, status, self.stopped_by = [], "interrupted", None
        try:
            with terminate_gracefully():
                for shard in shards:
                    try:
                        winners += self._shape(shard)
                    except _BudgetSpent:
                        break
                    except _ContextLost as exc:
                        self.stopped_by = f"the GPU context was lost: {exc}"
                        break
            status = ("complete" if not self._left else "interrupted" if self.stopped_by
                      else "budget spent")
        finally:  # killed or not, every row timed and every winner found reach the files
            self.bar.close()
            if self.precompiler is not None:
                self.precompiler.close()
            self._flush()
            self.counts["skipped"] = len(self._reused)
            end_invocation(store, invocations, t0, status, self.counts["measured"],
                           self.counts["skipped"])
            extra = dict(left=self._left, shapes=self._shapes_info, stopped_by=self.stopped_by)
            if self.precompiler is not None:
                extra["precompile"] = self.precompiler.report()
            store.update_manifest(**extra)
            if not self.verify and len(store.load_table("winners")):
                self.write_files(store.load_table("winners"))
        return pd.DataFrame(winners)

    # --- one shape --------------------------------------------------------------------
    def _shape(self, shard: list[Problem]) -> list[dict]:
        self.stages = list(self.backend.config_space(shard[0]))
        sh = _Shape(self, shard)
        # full configuration -> why it cannot run, at any key (from earlier commands too)
        self._broken = {r["full_config"]: f"failed at {int(r['tokens'])} tokens: {r['error']}"
                        for r in self._rows(sh)
                        if r.get("status") == "failed" and _broken_text(r.get("error"))}
        self._info = dict(shape=sh.name, keys=sh.keys, candidates={})
        self._shapes_info.append(self._info)
        self._at(sh, "default", "", sh.keys)
        defaults = self._defaults(sh)
        best = dict(defaults)
        for stage in self.stages:
            best = self._stage(sh, stage, best)
        self._flush()
        timed = {}
        for r in self._rows(sh):  # the timings (a broken configuration's other keys: none)
            if not str(r.get("error") or "").startswith("not timed"):
                timed[int(r["tokens"])] = timed.get(int(r["tokens"]), 0) + 1
        out = []
        for T in sh.keys:
            w = self._winner_row(sh, T, best[T], defaults[T], timed.get(T, 0))
            if w is not None:
                out.append(w)
            self.bar.update(1)
        if self.verify:  # a verify run's winners are not winners: its report says them
            self._verify(sh, best)
        else:
            self.store.append_table("winners", out, key=WINNER_KEY)
        self._flush()
        self._info["rows"] = sum(timed.values())
        self._left = [x for x in self._left if x["shape"] != sh.name]
        return out

    def _at(self, sh: _Shape, stage: str, step: str, keys) -> None:
        """Where the search is: the manifest's `left` entry of this shape (every key is
        left until the shape's last stage ends; `step_keys`: those the step works on, the
        stages from `stage` on still to do), the bar."""
        for x in self._left:
            if x["shape"] == sh.name:
                x.update(stage=stage, step=step, step_keys=sorted(int(k) for k in keys),
                         stages_left=self.stages[self.stages.index(stage):]
                         if stage in self.stages else list(self.stages))
        self.bar.set_description(f"{sh.name} {stage} {step}".strip())

    def _defaults(self, sh: _Shape) -> dict[int, _Best]:
        groups: dict[str, tuple] = {}
        for T in sh.keys:
            d = self.backend.default_config(sh.probs[T])
            groups.setdefault(_js(d), (d, d, []))[2].append(T)
        self._time_groups(sh, "default", None, self.rep_ms, list(groups.values()), "default")
        out = {}
        for d, _, Ts in groups.values():
            for T in Ts:
                row = self.done[self._cid(sh, T, "default", None, d)]
                if row["status"] == "ok" and self._correct(sh, T, row):
                    row = self.done[row["candidate_id"]]
                    out[T] = _Best(d, row["median_us"], row, "default")
                else:
                    out[T] = _Best(None, math.inf, self.done[row["candidate_id"]], "default")
        return out

    # --- what a shape's search gives ------------------------------------------------------
    def _rows(self, sh: _Shape) -> list[dict]:
        """This shape's rows in candidates.parquet (every key, stage and rung)."""
        p = sh.first
        return [r for r in self.done.values()
                if r.get("model") == p.model.name and int(r.get("tp")) == p.tp
                and int(r.get("ep")) == p.ep and int(r.get("ep_rank")) == p.ep_rank
                and r.get("dtype") == p.dtype and r.get("backend") == self.backend_name]

    def _winner_row(self, sh: _Shape, T: int, w: _Best, d: _Best, timed: int) -> dict | None:
        if w.full is None:
            return None
        prob = sh.probs[T]
        d_us = d.row["median_us"] if d.row is not None and d.row["status"] == "ok" else math.nan
        spread = sh.spread.get(T) or []
        return dict(prob.key(), backend=self.backend_name, sharding=prob.sharding,
                    config=_js(w.full), median_us=w.us, default_us=d_us,
                    speedup=d_us / w.us if d_us == d_us else math.nan, won_at=w.stage,
                    search_best_us=spread[0] if spread else math.nan,
                    search_median_us=statistics.median(spread) if spread else math.nan,
                    search_worst_us=spread[-1] if spread else math.nan,
                    search_candidates=len(spread), candidates_timed=timed,
                    mode=self.mode, git_commit=self.git_commit, device=self.device_name,
                    measured_at=now_iso())

    def _verify(self, sh: _Shape, best: dict[int, _Best]) -> None:
        """Time the committed winner of every key beside this search's candidates, and
        report the correct candidates faster than it by more than VERIFY_MARGIN (checked
        fastest first, at most VERIFY_SHOWN of them; `timed_faster` counts them all)."""
        from ..storage.configs import load_tuned, nearest, tuned_file_paths
        committed = load_tuned(self.backend_name, sh.first, self.device_name, self.configs_dir)
        self._at(sh, "verify", "committed winners", sh.keys)
        rows = []
        for T in sh.keys:
            prob = sh.probs[T]
            row = dict({k: prob.key()[k] for k in WINNER_KEY if k != "backend"},
                       backend=self.backend_name, sharding=prob.sharding, mode=self.mode,
                       search_best_config=_js(best[T].full) if best[T].full else None,
                       search_best_us=best[T].us if best[T].full else math.nan,
                       git_commit=self.git_commit, device=self.device_name,
                       measured_at=now_iso(), faster=0, timed_faster=0)
            if committed is None:
                p = tuned_file_paths(self.backend_name, prob, self.device_name, self.configs_dir)
                rows.append(dict(row, verdict=f"no committed file {p[self.stages[0]].name}"))
                continue
            full = {s: nearest(tbl, T) for s, tbl in committed.items()}
            row["committed_config"] = _js(full)
            self._time_groups(sh, "committed", None, self.rep_ms, [(full, full, [T])],
                              "committed")
            c_row = self.done[self._cid(sh, T, "committed", None, full)]
            if c_row["status"] != "ok":
                rows.append(dict(row, verdict=f"committed winner {c_row['status']}: "
                                              f"{c_row['error']}"))
                continue
            c_us = row["committed_us"] = c_row["median_us"]
            timed = sorted((r for r in sh.final_rows[T].values()
                            if r["median_us"] * VERIFY_MARGIN < c_us),
                           key=lambda r: r["median_us"])
            faster = []
            for r in timed:
                if len(faster) == VERIFY_SHOWN:
                    break
                if self._correct(sh, T, r):
                    faster.append(self.done[r["candidate_id"]])
            rows.append(dict(
                row, faster=len(faster), timed_faster=len(timed),
                fastest_config=faster[0]["full_config"] if faster else None,
                fastest_us=faster[0]["median_us"] if faster else math.nan,
                committed_over_fastest=c_us / faster[0]["median_us"] if faster else math.nan,
                faster_configs=json.dumps([[json.loads(r["full_config"]), r["median_us"]]
                                           for r in faster]),
                verdict=(f"faster than the committed winner by more than "
                         f"{100 * (VERIFY_MARGIN - 1):.0f}%: {len(faster)}"
                         + ("+" if len(timed) > len(faster) and len(faster) == VERIFY_SHOWN
                            else "")) if faster else "nothing faster"))
        self.store.append_table("verify", rows, key=VERIFY_KEY)
        self._flush()

    # --- the files --------------------------------------------------------------------
    def write_files(self, winners: pd.DataFrame) -> list[Path]:
        """One file per stage and shard: {tokens: config}, every winner tuned so far, and
        each file's provenance (run, commit, budget, candidates timed); a file that would
        drop another run's keys refused (moe_lab.measuring.tuning_files)."""
        return tuning_files.write_files(self, winners)
