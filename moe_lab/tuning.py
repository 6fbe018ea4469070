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
SIGKILL loses the rows since the last write; they are timed again). The manifest's `left` says which shapes,
stages and token counts are unfinished. The winners are written as config files in the
format the kernel's own project reads (`Backend.config_files`), every key of the shape in
them, with `provenance.json` beside them; `winners.parquet` also holds the search's spread
per point (the best, median and worst candidate of the first rung).

`verify=True` (moe-lab tune --verify): the same search with another candidate order and
twice the survivors and fine steps (SearchPlan.doubled), into its own run folder, the
committed winner (the tuned files under `configs_dir`) timed beside it; every correct
candidate faster than the committed winner by more than VERIFY_MARGIN is reported in
`verify.parquet`. It writes no config files.

The timer is `timer(fn, inputs, *, config, problem, rep_ms) -> moe_lab.timing.Timing`,
by default the sweep's (graph replay on a GPU, `time_fn`); the tests pass stand-ins.
On a GPU, `compile_workers` processes compile the next batch of candidates into Triton's
on-disk cache before they are timed (Precompiler).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import statistics
import time
from pathlib import Path

import pandas as pd

from . import backends
from .core.atomic import atomic_write_json
from .correctness import (check_backend, classify_exception, make_inputs, make_weights,
                          one_line, point_seed, reference)
from .core.environment import capture_environment, device_name, now_iso
from .core.errors import PointTimeout, reraise_if_terminated, terminate_gracefully, time_limit
from .core.problems import Problem
from .progress import progress_bar
from .invocations import begin_invocation, end_invocation
from .points import finish, new_row
from .store import RunStore
from .timing import time_fn

# the token counts a tuned file holds by default: the 18 keys of the published tunings of
# this kernel for the H200, and 8192
TUNE_TOKENS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072,
               4096, 8192)

CANDIDATE_KEY = ("candidate_id",)
WINNER_KEY = ("model", "tp", "ep", "ep_rank", "dtype", "tokens", "backend")
VERIFY_KEY = WINNER_KEY
VERIFY_MARGIN = 1.02  # verify: a candidate this much faster than the committed winner is news
VERIFY_SHOWN = 5  # verify: the correct faster candidates checked and listed per point
FLUSH_ROWS, FLUSH_S = 500, 30.0  # candidates.parquet is rewritten this often, not per row
# a batch compiled ahead may take this long (a worker's start, then per configuration a
# worker compiles; one takes a few seconds): past it compiling ahead is turned off
WARM_S, WARM_PER_CONFIG_S = 60.0, 30.0


@dataclasses.dataclass(frozen=True)
class SearchPlan:
    """How a stage is searched (module doc). `rungs`: each successive-halving rung's share
    of rep_ms (the last is the full timing); `keep`: the share of a key's candidates kept
    from one rung to the next, at least `min_keep`; `fine_rounds`: the most steps of the
    fine pass per key; `order_seed`: None, the space's order, or a seeded shuffle."""
    rungs: tuple = (1 / 16, 1 / 4, 1.0)
    keep: float = 0.25
    min_keep: int = 4
    fine_rounds: int = 4
    order_seed: int | None = None

    def doubled(self, order_seed: int) -> "SearchPlan":
        """The verify search: another order, twice the survivors and the fine steps."""
        return dataclasses.replace(self, keep=min(1.0, 2 * self.keep), min_keep=2 * self.min_keep,
                                   fine_rounds=2 * self.fine_rounds, order_seed=order_seed)

    def describe(self) -> dict:
        return dict(rungs=[float(r) for r in self.rungs], keep=self.keep,
                    min_keep=self.min_keep, fine_rounds=self.fine_rounds,
                    order_seed=self.order_seed)


def candidate_id(prob: Problem, backend: str, stage: str, config: dict,
                 rep_ms: float | None = None) -> str:
    """A row's key: the point, stage and full configuration; `rep_ms` for a timing shorter
    than the run's (a successive-halving rung below the last), None for a full timing."""
    d = dict(prob.key(), backend=backend, stage=stage, config=config)
    if rep_ms is not None:
        d["rep_ms"] = round(float(rep_ms), 6)
    key = json.dumps(d, sort_keys=True, default=str)
    return hashlib.sha1(key.encode()).hexdigest()[:16]


def neighbours(cfg: dict, space: list[dict], keys=None) -> list[dict]:
    """The configurations of `space` that differ from `cfg` in exactly one launch key, one
    of `keys` (None: any but BLOCK_SIZE_M, which sets the alignment)."""
    out = []
    for c in space:
        diff = [k for k in set(c) | set(cfg) if c.get(k) != cfg.get(k)]
        if len(diff) == 1 and (diff[0] in keys if keys else diff[0] != "BLOCK_SIZE_M"):
            out.append(c)
    return out


def verify_sample(tokens, n: int, seed: int = 0) -> list[int]:
    """`n` of the token counts (all when n <= 0 or n >= their number), drawn with `seed`,
    ascending: the points a verify run searches again."""
    tokens = sorted(dict.fromkeys(int(t) for t in tokens))
    if n <= 0 or n >= len(tokens):
        return tokens
    return sorted(random.Random(f"verify:{seed}").sample(tokens, n))


def default_compile_workers(device: str) -> int:
    """Processes compiling ahead (Precompiler): none on a CPU (no Triton there); on a GPU
    machine all cores but two (one times, one for the rest), at most 12."""
    if not str(device).startswith("cuda"):
        return 0
    return max(1, min(12, (os.cpu_count() or 2) - 2))


def _js(cfg) -> str:
    return json.dumps(cfg, sort_keys=True)


def _compile_error(exc: BaseException) -> bool:
    """A failure of the configuration itself (it does not compile, or does not fit), the same
    at every token count: Triton's CompilationError/OutOfResources, or 'out of resource'."""
    names = {type(e).__name__ for e in _chain(exc)}
    return bool(names & {"CompilationError", "OutOfResources", "CompileTimeAssertionFailure",
                         "PTXASError"}) or "out of resource" in str(exc).lower()


def _broken_text(error) -> bool:
    """A row's `error` (one_line: `Type: message`) that rules its configuration out at every
    token count: a compile error (_compile_error), or one that lost the GPU context
    (STICKY_CUDA: not timed again at another key, where it would lose it again)."""
    error = str(error or "")
    return error.split(":")[0] in {"CompilationError", "OutOfResources", "PTXASError",
                                   "CompileTimeAssertionFailure"} \
        or "out of resource" in error.lower() or any(x in error.lower() for x in STICKY_CUDA)


def _chain(exc):
    seen = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


class _BudgetSpent(Exception):
    """This command's budget ran out before the next timing."""


class _ContextLost(Exception):
    """A timing left the GPU's context unusable (an illegal address, a device assert): the
    row that did it is kept as failed and the command stops, so the next one, in a fresh
    process, goes on after it instead of recording every later candidate as failed."""


# CUDA errors after which the process's context is unusable (the rest of its work fails)
STICKY_CUDA = ("illegal memory access", "unspecified launch failure", "device-side assert",
               "misaligned address", "illegal instruction", "an illegal address")


@dataclasses.dataclass
class _Best:
    """A key's incumbent: its full configuration (None: nothing correct ran), time, row and
    the stage that found it."""
    full: dict | None
    us: float
    row: dict | None
    stage: str


class _Shape:
    """One shape's search: its keys' problems, the shared weights, the inputs and references
    made once per key."""

    def __init__(self, tuner: "Tuner", shard: list[Problem]):
        self.tuner = tuner
        self.probs = {p.tokens: p for p in shard}
        self.keys = sorted(self.probs)
        self.first = self.probs[self.keys[0]]
        self.name = shape_name(self.first)
        self.weights = make_weights(self.first, tuner.device, tuner.seed)
        self._inp, self._ref = {}, {}
        self.final_rows: dict[int, dict] = {k: {} for k in self.keys}  # T -> cid -> row
        self.spread: dict[int, list[float]] = {}

    def inp(self, T):
        if T not in self._inp:
            t = self.tuner
            self._inp[T] = make_inputs(self.probs[T], t.device,
                                       point_seed(t.seed, T, t.routing), t.routing)
        return self._inp[T]

    def ref(self, T):
        if T not in self._ref:
            self._ref[T] = reference(self.probs[T], self.weights, self.inp(T))
        return self._ref[T]


def shape_name(prob: Problem) -> str:
    return (f"{prob.model.name} {prob.sharding}"
            + (f" rank{prob.ep_rank}" if prob.ep > 1 else "") + f" {prob.dtype}")


class Tuner:
    def __init__(self, backend: str, device: str, run_dir, configs_dir, *, seed: int = 0,
                 routing: str = "uniform", budget_s: float | None = None, warmup_ms=5.0,
                 rep_ms=20.0, candidate_timeout_s=60.0, progress=True, command="",
                 plan: SearchPlan | None = None, timer=None, compile_workers: int | None = None,
                 verify: bool = False):
        self.backend_name = backends.parse_names(backend)[0]
        self.backend = backends.get(self.backend_name)
        if not self.backend.tunable:
            from .core.errors import UsageError
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
        if compile_workers is None:
            compile_workers = default_compile_workers(device)
        self.compile_workers = compile_workers if str(device).startswith("cuda") else 0
        self.coarse = getattr(self.backend, "coarse_config", None)
        self.fine_keys = getattr(self.backend, "fine_keys", None)

    def _time_fn(self, fn, inp, *, config, problem, rep_ms):
        """The default timer: the sweep's, on the point's own inputs."""
        return time_fn(self.mode, fn, [inp.args()], self.device, warmup_ms=self.warmup_ms,
                       rep_ms=rep_ms)

    # --- the run ----------------------------------------------------------------------
    def run(self, shards: list[list[Problem]]) -> pd.DataFrame:
        """Tune every shard (shape) at its token counts; returns the winners found by this
        call (one row per point). Holds the run folder's lock (moe_lab.runlock)
        throughout; a folder that is unreadable, not a tune run, or tuned with other
        settings (MEANING) is refused before anything is written."""
        from .runlock import run_lock
        self.check()
        with run_lock(self.run_dir, self.command or "moe-lab tune"):
            self._check_folder()
            return self._run(shards)

    # settings that change what a candidate's row means, or which rows a search times
    MEANING = ("backend", "mode", "seed", "routing", "warmup_ms", "rep_ms", "search", "verify")

    def settings(self) -> dict:
        return dict(backend=self.backend_name, mode=self.mode, seed=self.seed,
                    routing=self.routing, warmup_ms=self.warmup_ms, rep_ms=self.rep_ms,
                    search=self.plan.describe(), verify=self.verify)

    def check(self) -> None:
        """UsageError (one line, nothing touched) when `run` would be refused now: the
        folder is another writer's at the moment, unreadable, or tuned otherwise."""
        from .runlock import busy
        who = busy(self.run_dir)
        if who:
            from .core.errors import RunLocked
            raise RunLocked(who)
        self._check_folder()

    def _check_folder(self) -> None:
        from .resume import check_run_files, refuse_other_settings
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
        self.deadline = (t0 + self.budget_s) if self.budget_s else math.inf
        self._pending, self._flushed_at = {}, time.time()
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
        for r in self._rows(sh):
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

    def _stage(self, sh: _Shape, stage: str, incumbent: dict[int, _Best]) -> dict[int, _Best]:
        lead = stage == self.stages[0]
        per_key: dict[int, list[dict]] = {}
        for T in sh.keys:
            if not lead and incumbent[T].full is None:
                continue  # nothing correct ran at this key: nothing to build on
            space = self.backend.config_space(sh.probs[T])[stage]
            if not lead:
                bm = incumbent[T].full[self.stages[0]].get("BLOCK_SIZE_M")
                space = [c for c in space if c.get("BLOCK_SIZE_M", bm) == bm]
            per_key[T] = space

        def full_of(T, c):
            return ({s: dict(c) for s in self.stages} if lead
                    else dict(incumbent[T].full, **{stage: dict(c)}))

        order = self._order(stage, per_key)
        index = {_js(c): i for i, c in enumerate(order)}
        coarse = self.coarse or (lambda c: True)
        admissible = {T: {_js(c) for c in sp} for T, sp in per_key.items()}
        alive = {T: [c for c in order if _js(c) in admissible[T] and coarse(c)]
                 for T in per_key}
        self._info["candidates"][stage] = dict(
            space=len(order), coarse=len({_js(c) for cs in alive.values() for c in cs}),
            per_key={int(T): len(cs) for T, cs in alive.items()})
        R = len(self.plan.rungs)

        def us(T, c, rung=None):
            row = self.done.get(self._cid(sh, T, stage, self._rep(rung), full_of(T, c)))
            return row["median_us"] if row is not None and row["status"] == "ok" else math.inf

        def kept(n: int) -> int:
            return max(self.plan.min_keep, math.ceil(n * self.plan.keep))

        for r in range(R):
            rung = r if r < R - 1 else None
            # a rung that would keep every candidate of a key is not timed there
            keys = [T for T in per_key if alive[T]
                    and (rung is None or len(alive[T]) > kept(len(alive[T])))]
            self._at(sh, stage, f"coarse rung {r + 1}/{R}", keys)
            live = {T: {_js(c) for c in alive[T]} for T in keys}
            self._time_pairs(sh, stage, rung, [(c, T) for c, j in zip(order, index)
                                               for T in keys if j in live[T]],
                             full_of, "coarse")
            for T in keys:
                if lead and T not in sh.spread:  # the search's spread: every coarse candidate
                    sh.spread[T] = sorted(x for x in (us(T, c, rung) for c in alive[T])
                                          if math.isfinite(x))
                if rung is not None:
                    ranked = sorted((us(T, c, rung), index[_js(c)], c) for c in alive[T])
                    ranked = [x for x in ranked if math.isfinite(x[0])]
                    best_n = {_js(c) for _, _, c in ranked[:kept(len(alive[T]))]}
                    alive[T] = [c for c in alive[T] if _js(c) in best_n]

        # fine pass: from each key's fastest, one launch key at a time
        best = {}
        for T in per_key:
            ranked = sorted((us(T, c), index[_js(c)], c) for c in alive[T])
            best[T] = ranked[0][2] if ranked and math.isfinite(ranked[0][0]) else None
        moving = [T for T in per_key if best[T] is not None]
        for rnd in range(self.plan.fine_rounds):
            if not moving:
                break
            self._at(sh, stage, f"fine step {rnd + 1}/{self.plan.fine_rounds}", moving)
            nb = {T: [c for c in neighbours(best[T], per_key[T], self.fine_keys)
                      if _js(full_of(T, c)) not in self._broken] for T in moving}
            pairs = sorted(((c, T) for T in moving for c in nb[T]),
                           key=lambda p: (index[_js(p[0])], p[1]))
            self._time_pairs(sh, stage, None, pairs, full_of, "fine")
            still = []
            for T in moving:
                c = min([best[T]] + nb[T], key=lambda c: (us(T, c), index[_js(c)]))
                if us(T, c) < us(T, best[T]):
                    best[T] = c
                    still.append(T)
            moving = still

        # the winner: the fastest fully timed candidate that beats the incumbent, correct
        out = {}
        for T in sh.keys:
            inc = incumbent[T]
            if T not in per_key:
                out[T] = inc
                continue
            timed = []
            for c in per_key[T]:
                row = self.done.get(self._cid(sh, T, stage, None, full_of(T, c)))
                if row is not None and row["status"] == "ok":
                    timed.append((row["median_us"], index[_js(c)], c, row))
                    sh.final_rows[T][row["candidate_id"]] = row
            out[T] = inc
            for t, _, c, row in sorted(timed, key=lambda x: x[:2]):
                if t >= inc.us:
                    break
                if self._correct(sh, T, row):
                    out[T] = _Best(full_of(T, c), t, self.done[row["candidate_id"]], stage)
                    break
        self._flush()
        return out

    def _order(self, stage: str, per_key: dict[int, list[dict]]) -> list[dict]:
        """Every candidate of the stage once, in the space's order (or a seeded shuffle)."""
        seen: dict[str, dict] = {}
        for T in sorted(per_key):
            for c in per_key[T]:
                seen.setdefault(_js(c), c)
        order = list(seen.values())
        if self.plan.order_seed is not None:
            random.Random(f"{self.plan.order_seed}:{stage}").shuffle(order)
        return order

    def _rep(self, rung: int | None) -> float | None:
        """A rung's rep_ms for the candidate id: None for the full timing."""
        return None if rung is None else self.rep_ms * self.plan.rungs[rung]

    def _cid(self, sh: _Shape, T: int, stage: str, rep: float | None, full: dict) -> str:
        return candidate_id(sh.probs[T], self.backend_name, stage, full, rep)

    # --- timing -----------------------------------------------------------------------
    def _time_pairs(self, sh, stage, rung, pairs, full_of, search_pass) -> None:
        """Time (candidate, key) pairs, grouped by full configuration (one prepare each)."""
        groups: dict[str, tuple] = {}
        for c, T in pairs:
            f = full_of(T, c)
            groups.setdefault(_js(f), (c, f, []))[2].append(T)
        self._time_groups(sh, stage, rung, self.rep_ms if rung is None else self._rep(rung),
                          list(groups.values()), search_pass)

    def _time_groups(self, sh, stage, rung, rep, groups, search_pass) -> None:
        """Each group (candidate, full configuration, keys): prepared once, timed at each of
        its keys not timed yet; the next batch compiled ahead first (Precompiler)."""
        rep_id = None if rung is None else rep
        todo = []
        for g in groups:
            cids = [self._cid(sh, T, stage, rep_id, g[1]) for T in g[2]]
            self._reused.update(c for c in cids if c in self._prior)  # an earlier command's
            if any(c not in self.done for c in cids):
                todo.append(g)
        batch = max(1, 2 * self.compile_workers)
        for i in range(0, len(todo), batch):
            chunk = todo[i:i + batch]
            if self.precompiler is not None:
                self._budget()
                # one per stage configuration: the rest of a full one is an earlier stage's
                # winner, compiled when that stage was searched
                warm = {_js(c): f for c, f, _ in chunk if _js(f) not in self._broken}
                rounds = -(-len(warm) // self.compile_workers)
                limit = WARM_S + WARM_PER_CONFIG_S * rounds
                left = self.deadline - time.time()
                self.precompiler.warm(sh.first, list(warm.values()),
                                      _specialization_reps(sh.keys, sh.first.topk),
                                      timeout_s=min(limit, left), budget_cut=left < limit)
            for cand, full, Ts in chunk:
                fn = None
                for T in Ts:
                    cid = self._cid(sh, T, stage, rep_id, full)
                    if cid in self.done:
                        continue
                    self._budget()
                    if fn is None and _js(full) not in self._broken:
                        try:
                            with time_limit(self.candidate_timeout_s, "candidate"):
                                fn = self.backend.prepare(sh.first, sh.weights, config=full)
                        except Exception as exc:  # noqa: BLE001 (a row, not a crash)
                            reraise_if_terminated(exc)
                            fn = exc
                    self._measure(sh, T, stage, rung, rep, cand, full, fn, cid, search_pass)

    def _budget(self) -> None:
        if time.time() >= self.deadline:
            raise _BudgetSpent

    def _measure(self, sh, T, stage, rung, rep, cand, full, fn, cid, search_pass) -> dict:
        prob = sh.probs[T]
        row = new_row(dict(prob.key(), backend=self.backend_name, mode=self.mode),
                      git_commit=self.git_commit, device=self.device_name, stage=stage,
                      rung=len(self.plan.rungs) - 1 if rung is None else rung,
                      rep_ms=float(rep), search_pass=search_pass, candidate_id=cid,
                      config=json.dumps(cand, sort_keys=True), full_config=_js(full))
        t = None
        key = _js(full)
        if key in self._broken:
            row.update(status="failed", error=f"not timed: {self._broken[key]}")
        elif isinstance(fn, BaseException):
            row.update(status=classify_exception(fn), error=one_line(fn))
            self._broken[key] = f"prepare failed: {one_line(fn)}"
        else:
            try:
                with time_limit(self.candidate_timeout_s, "candidate"):
                    t = self.timer(fn, sh.inp(T), config=full, problem=prob, rep_ms=rep)
            except PointTimeout as exc:
                row.update(status="timeout", error=str(exc))
            except Exception as exc:  # a config that does not compile or fit is a row
                reraise_if_terminated(exc)
                row.update(status=classify_exception(exc), error=one_line(exc))
                if _compile_error(exc):
                    self._broken[key] = f"failed at {T} tokens: {one_line(exc)}"
                if any(s in str(exc).lower() for s in STICKY_CUDA):
                    self._broken[key] = f"lost the GPU context at {T} tokens: {one_line(exc)}"
                    finish(row, problem=prob)
                    self._add(row)
                    self.counts["measured"] += 1
                    raise _ContextLost(f"{sh.name} {stage} at {T} tokens, {_js(full)}: "
                                       f"{one_line(exc)}") from exc
                _recover(self.device)
        finish(row, timing=t if row["status"] == "ok" else None, problem=prob)
        self._add(row)
        self.counts["measured"] += 1
        return row

    def _add(self, row: dict) -> None:
        self.done[row["candidate_id"]] = row
        self._pending[row["candidate_id"]] = row
        if len(self._pending) >= FLUSH_ROWS or time.time() - self._flushed_at >= FLUSH_S:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self.store.append_table("candidates", list(self._pending.values()), key=CANDIDATE_KEY)
            self._pending = {}
        self._flushed_at = time.time()

    def _correct(self, sh: _Shape, T: int, row: dict) -> bool:
        """A would-be winner checked on the key's inputs (once: a row with its error measured
        says what it was); an incorrect one is marked."""
        rel = row.get("max_rel_err")
        if rel is not None and rel == rel:
            return row["status"] == "ok"
        prob = sh.probs[T]
        try:
            fn = self.backend.prepare(prob, sh.weights, config=json.loads(row["full_config"]))
        except Exception as exc:  # noqa: BLE001
            reraise_if_terminated(exc)
            chk = dict(status=classify_exception(exc), error=one_line(exc), max_rel_err=math.inf)
        else:
            chk = check_backend(self.backend, prob, sh.weights, sh.inp(T), sh.ref(T),
                                self.device, fn)
        row = dict(row, max_rel_err=chk["max_rel_err"])
        if chk["status"] != "ok":
            row.update(status="incorrect" if chk["status"] == "incorrect" else chk["status"],
                       error=chk["error"])
        self._add(row)
        return chk["status"] == "ok"

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
        from .configs import load_tuned, nearest
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
                names = self.backend.config_files(prob, self.device_name)
                rows.append(dict(row, verdict=f"no committed file {names[self.stages[0]]}"))
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
        each file's provenance (run, commit, budget, candidates timed)."""
        from .configs import write_table
        folder = self.configs_dir / self.backend_name
        written, shard_of = [], {}
        for _, g in winners.groupby(["model", "tp", "ep", "ep_rank", "dtype"]):
            prob = _problem_of(g.iloc[0])
            tables: dict[str, dict] = {}
            for r in g.itertuples():
                for stage, cfg in json.loads(r.config).items():
                    tables.setdefault(stage, {})[int(r.tokens)] = cfg
            names = self.backend.config_files(prob, self.device_name)
            timed = int(g["candidates_timed"].fillna(0).sum()) \
                if "candidates_timed" in g.columns else None
            for stage, table in tables.items():
                p = write_table(folder / names[stage], table)
                written.append(p)
                shard_of[p.name] = (sorted(table), timed)
        prov = read_provenance(folder)
        man = self.store.read_manifest() if hasattr(self, "store") else {}
        for p in written:
            keys, timed = shard_of[p.name]
            prov[p.name] = dict(run=self.run_dir.name, git_commit=self.git_commit,
                                device=self.device_name, written=now_iso(),
                                mode=self.mode, seed=self.seed, rep_ms=self.rep_ms,
                                budget_s=self.budget_s,
                                wall_s_total=man.get("wall_s_total", man.get("wall_s")),
                                invocations=len(man.get("invocations") or []) or None,
                                candidates_timed=timed, keys=keys,
                                search=self.plan.describe(),
                                note="winners of moe-lab tune; every candidate's time is in "
                                     f"data/runs/{self.run_dir.name}/candidates.parquet")
        atomic_write_json(folder / "provenance.json", prov)
        return written


# --- compiling ahead ----------------------------------------------------------------------

def _specialization_reps(keys, topk: int) -> list[int]:
    """One token count per way Triton specialises the kernel's integer arguments on the
    token count: num_valid_tokens = T * topk is 1, a multiple of 16, or neither (the
    smallest key of each kind). The other arguments (N, K, strides) are the shape's."""
    out = {}
    for T in sorted(keys):
        n = T * topk
        out.setdefault((n == 1, n % 16 == 0), T)
    return sorted(out.values())


class Precompiler:
    """Compiles the next batch of candidates in worker processes before they are timed, so
    the timing process finds them in Triton's on-disk cache instead of compiling each one
    (1-3 s per configuration, the dominant cost of a search on a GPU).

    Each worker (a `python -c` subprocess of this interpreter: nothing of the caller's
    __main__ is run again, and CUDA is never forked) runs the backend's layer with the
    candidate once per specialisation (_specialization_reps) on stand-in weights of one
    expert with the shape's N, K and dtype (_warm_config): the kernels, their constexprs
    and their specialised arguments are the timed ones', so Triton's cache key is theirs.
    Nothing a worker does is measured or kept but the cache, and it runs while the timing
    process waits (no kernel of a worker overlaps a timing). So it can only save time: a
    worker's error is ignored (the timed run meets it again and records it), and a worker
    that dies or a batch that outlasts its timeout turns compiling ahead off for the rest
    of the command (the workers killed; `report()` says why), the search going on
    compiling in place."""

    def __init__(self, workers: int, backend_name: str, device: str):
        self.workers, self.backend_name, self.device = workers, backend_name, device
        self.procs: list = []
        self.off, self.warmed, self.errors, self.wall_s = "", 0, 0, 0.0
        self._seen: set[str] = set()

    def _start(self) -> None:
        import subprocess
        import sys
        root = str(Path(__file__).resolve().parent.parent)  # where this moe_lab is
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        self.procs = [subprocess.Popen(
            [sys.executable, "-c", "from moe_lab.tuning import _worker_loop; _worker_loop()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env) for _ in range(self.workers)]

    def warm(self, prob: Problem, fulls: list[dict], token_reps: list[int],
             timeout_s: float = 600.0, budget_cut: bool = False) -> None:
        """Compile `fulls` (full configurations of `prob`'s shape) ahead; back when all are
        done, or at `timeout_s` (then off, unless `budget_cut`: the command's budget set
        the timeout, and it ends anyway)."""
        fulls = [f for f in fulls if _js(f) not in self._seen]
        if self.off or not fulls or timeout_s <= 0:
            return
        t0 = time.time()
        try:
            if not self.procs:
                self._start()
            self._run([(self.backend_name, prob, f, token_reps, self.device) for f in fulls],
                      t0 + timeout_s)
            self.warmed += len(fulls)
            self._seen.update(_js(f) for f in fulls)
        except Exception as exc:  # noqa: BLE001 (a timeout, a dead worker: compile in place)
            reraise_if_terminated(exc)
            if not (budget_cut and isinstance(exc, TimeoutError)):
                self.off = f"turned off after {self.warmed} configurations: {one_line(exc)}"
            self.close()
        finally:
            self.wall_s += time.time() - t0

    def _run(self, jobs: list[tuple], end: float) -> None:
        """Each job to the next idle worker; back when every one has answered."""
        import collections
        import pickle
        import selectors
        import struct
        jobs = collections.deque(jobs)
        idle, buf = list(self.procs), {p.pid: b"" for p in self.procs}
        busy = 0
        with selectors.DefaultSelector() as sel:
            for p in self.procs:
                sel.register(p.stdout, selectors.EVENT_READ, p)
            while jobs or busy:
                while jobs and idle:
                    p, data = idle.pop(), pickle.dumps(jobs.popleft())
                    p.stdin.write(struct.pack("<Q", len(data)) + data)
                    p.stdin.flush()
                    busy += 1
                left = end - time.time()
                if left <= 0:
                    raise TimeoutError(f"a batch of compiles outlasted its {end:.0f} s deadline")
                for key, _ in sel.select(timeout=left):
                    p = key.data
                    chunk = os.read(p.stdout.fileno(), 1 << 16)
                    if not chunk:
                        raise RuntimeError(f"compile worker {p.pid} died "
                                           f"(exit status {p.poll()})")
                    buf[p.pid] += chunk
                    b = buf[p.pid]
                    if len(b) >= 8 and len(b) >= 8 + struct.unpack("<Q", b[:8])[0]:
                        n = struct.unpack("<Q", b[:8])[0]
                        self.errors += bool(pickle.loads(b[8:8 + n]))
                        buf[p.pid] = b[8 + n:]
                        busy -= 1
                        idle.append(p)

    def close(self) -> None:
        """End the workers this Precompiler started (each by its own handle)."""
        for p in self.procs:
            try:
                p.stdin.close()
            except OSError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except Exception:  # noqa: BLE001 (busy compiling, or stuck: ended)
                p.kill()
                p.wait()
        self.procs = []

    def report(self) -> dict:
        return dict(workers=self.workers, configurations=self.warmed,
                    worker_errors=self.errors, wall_s=round(self.wall_s, 1),
                    off=self.off or None)


def _worker_loop() -> None:
    """A Precompiler worker: length-prefixed pickled jobs (the arguments of _warm_config) on
    stdin, each answered by its result on stdout; everything else the process prints goes
    to stderr (stdout is the answers' alone). Ends when stdin closes."""
    import pickle
    import struct
    import sys
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    while True:
        head = inp.read(8)
        if len(head) < 8:
            return
        job = pickle.loads(inp.read(struct.unpack("<Q", head)[0]))
        data = pickle.dumps(_warm_config(*job))
        out.write(struct.pack("<Q", len(data)) + data)


_STAND_INS: dict = {}


def _warm_config(backend_name: str, prob: Problem, full: dict, token_reps: list[int],
                 device: str = "cuda") -> str:
    """In a Precompiler worker: run the layer with `full` at each token count on stand-in
    weights (one local expert, every pair routed to it), so that its kernels are compiled
    into Triton's on-disk cache. '' when it ran, else the error (ignored by the caller)."""
    try:
        import torch
        be = backends.get(backend_name)
        key = (backend_name, prob.model, prob.dtype, prob.tp, prob.ep, device)
        if key not in _STAND_INS:
            _STAND_INS.clear()
            _STAND_INS[key] = _stand_ins(prob, device, token_reps)
        weights, inputs = _STAND_INS[key]
        fn = be.prepare(prob, weights, config=full)
        for args in inputs:
            fn(*args)
        if str(device).startswith("cuda"):
            torch.cuda.synchronize()
        return ""
    except Exception as exc:  # noqa: BLE001
        return one_line(exc)


def _stand_ins(prob: Problem, device: str, token_reps: list[int]):
    """Weights of one local expert with the shape's N, K and dtype (the kernels' strides
    do not depend on the number of experts), and inputs at each token count that send
    every (token, slot) pair to it."""
    import torch
    g = torch.Generator().manual_seed(0)
    H, inter, dt = prob.hidden, prob.inter, prob.torch_dtype
    w1 = (torch.randn(1, 2 * inter, H, generator=g) * H ** -0.5).to(dt).to(device)
    w2 = (torch.randn(1, H, inter, generator=g) * inter ** -0.5).to(dt).to(device)
    qw = None
    if prob.is_fp8:
        from .core.devices import fp8_format_for
        from .core.quant import quantize_weights
        qw = quantize_weights(w1, w2, prob.dtype, fp8_format_for(device_name(device)))
    emap = None
    if prob.ep > 1:
        emap = torch.full((prob.experts,), -1, dtype=torch.int32)
        emap[0] = 0
        emap = emap.to(device)
    inputs = []
    for T in token_reps:
        x = torch.randn(T, H, generator=g).to(dt).to(device)
        w = torch.full((T, prob.topk), 1.0 / prob.topk, dtype=torch.float32, device=device)
        ids = torch.zeros(T, prob.topk, dtype=torch.int32, device=device)
        inputs.append((x, w, ids))
    return backends.Weights(w1, w2, emap, qw), inputs


def read_provenance(folder: Path) -> dict:
    from .store import read_json
    return read_json(folder / "provenance.json")


def _problem_of(row) -> Problem:
    from .core.problems import make_problem
    return make_problem(row["model"], int(row["tokens"]), row["dtype"], int(row["tp"]),
                        int(row["ep"]), int(row["ep_rank"]))


def _recover(device: str):
    if str(device).startswith("cuda"):
        import torch
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except Exception:
            pass
