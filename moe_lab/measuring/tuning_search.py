"""The search of one stage of `moe-lab tune` (moe_lab.measuring.tuning; its module doc says what the
search does): the plan, the rows' ids, a shape's inputs, and `StageSearch`, the part of the
Tuner that walks a stage (successive halving over the coarse candidates, then one-key steps
from each key's best), times (candidate, key) pairs into rows and checks would-be winners."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random

from .correctness import (classify_exception, make_inputs, make_weights,
                          one_line, point_seed, reference)
from ..core.constants import SEARCH_RUNGS
from ..core.errors import PointTimeout, reraise_if_terminated, time_limit
from ..core.problems import Problem
from .points import Point, check_point, finish, new_row
from .tuning_compile import token_reps, warm_timeout_s

CANDIDATE_KEY = ("candidate_id",)
FLUSH_ROWS, FLUSH_S = 500, 30.0  # candidates.parquet is rewritten this often, not per row


@dataclasses.dataclass(frozen=True)
class SearchPlan:
    """How a stage is searched (module doc). `rungs`: each successive-halving rung's share
    of rep_ms (the last is the full timing); `keep`: the share of a key's candidates kept
    from one rung to the next, at least `min_keep`; `fine_rounds`: the most steps of the
    fine pass per key; `order_seed`: None, the space's order, or a seeded shuffle;
    `near_keys`: the neighbour-key pass, each key's best timed at the keys this many places
    either side of it (0: no such pass)."""
    rungs: tuple = SEARCH_RUNGS
    keep: float = 0.25
    min_keep: int = 4
    fine_rounds: int = 4
    order_seed: int | None = None
    near_keys: int = 1

    def doubled(self, order_seed: int) -> "SearchPlan":
        """The verify search: another order, twice the survivors and the fine steps."""
        return dataclasses.replace(self, keep=min(1.0, 2 * self.keep),
                                   min_keep=2 * self.min_keep, fine_rounds=2 * self.fine_rounds,
                                   order_seed=order_seed)

    def describe(self) -> dict:
        return dict(rungs=[float(r) for r in self.rungs], keep=self.keep,
                    min_keep=self.min_keep, fine_rounds=self.fine_rounds,
                    order_seed=self.order_seed, near_keys=self.near_keys)


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

    def __init__(self, tuner, shard: list[Problem]):
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


class StageSearch:
    """The Tuner's search of one stage and its timing rows (a mixin of moe_lab.measuring.tuning.Tuner,
    whose attributes it uses: backend, plan, done, stages, clock, deadline, ...)."""

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

        # neighbour-key pass: each key's best timed at the keys next to it, where the routed
        # work is often alike (1 and 2 tokens hit one expert each) and the same launch should
        # win; each key's own walk can end elsewhere by a timing's noise. The winner below
        # is then the fastest of them too, so T keeps no launch slower there than 2T's.
        n, near = self.plan.near_keys, {}
        for i, T in enumerate(sh.keys):
            if T not in per_key:
                continue
            for U in sh.keys[max(0, i - n):i + n + 1]:
                c = best.get(U) if U != T else None
                if c is not None and _js(c) in admissible[T] \
                        and _js(full_of(T, c)) not in self._broken:
                    near[_js(c), T] = (c, T)
        near = sorted(near.values(), key=lambda p: (index[_js(p[0])], p[1]))
        if near:
            self._at(sh, stage, "neighbour keys' bests", sorted({T for _, T in near}))
            self._time_pairs(sh, stage, None, near, full_of, "near")

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
                limit = warm_timeout_s(len(warm), self.compile_workers)
                left = self.deadline - self.clock()
                self.precompiler.warm(sh.first, list(warm.values()),
                                      token_reps(self.backend, sh.first, sh.keys),
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
        if self.clock() >= self.deadline:
            raise _BudgetSpent

    def _measure(self, sh, T, stage, rung, rep, cand, full, fn, cid, search_pass) -> dict:
        prob = sh.probs[T]
        row = new_row(dict(prob.key(), backend=self.backend_name, mode=self.mode,
                           routing=self.routing),
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
        if len(self._pending) >= FLUSH_ROWS or self.clock() - self._flushed_at >= FLUSH_S:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self.store.append_table("candidates", list(self._pending.values()), key=CANDIDATE_KEY)
            self._pending = {}
        self._flushed_at = self.clock()

    def _correct(self, sh: _Shape, T: int, row: dict) -> bool:
        """A would-be winner checked on the key's inputs (once: a row with its error measured
        says what it was); an incorrect one is marked."""
        rel = row.get("max_rel_err")
        if rel is not None and rel == rel:
            return row["status"] == "ok"
        c = check_point(Point(sh.probs[T], self.backend, config="candidate",
                              table=json.loads(row["full_config"])),
                        sh.weights, self.device, inputs=sh.inp(T), ref=sh.ref(T))
        # a candidate that never produced an output is marked as far off as can be
        row = dict(row, max_rel_err=c.max_rel_err if c.fn is not None and
                   c.max_rel_err == c.max_rel_err else math.inf)
        if not c.ok:
            row.update(status=c.status, error=c.error)
        self._add(row)
        return c.ok

    # --- what a shape's search gives ------------------------------------------------------

def _recover(device: str):
    if str(device).startswith("cuda"):
        import torch
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except Exception:
            pass
