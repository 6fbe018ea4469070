"""Tune: the fastest launch configuration per shape and token count, on the device at hand.

    tune("aiter-triton", shards, device="cuda", run_dir="data/runs/tune-x",
         configs_dir="data/configs/nvidia-h200")

For each shard (model x tp x ep) and token count, the backend's `config_space` is searched
one stage at a time (gemm1, then gemm2 with gemm1's winner in place; coordinate descent),
every candidate timed with the sweep's timer (graph replay on a GPU) on the point's own
inputs. The winner is checked against the reference before it is kept; an incorrect one is
dropped for the next fastest. Every candidate is a row of `candidates.parquet` (a failed
compile or a launch out of shared memory is a row with its error, not a crash), so a killed
search resumes where it stopped. The winners are written as config files in the format the
kernel's own project reads (`Backend.config_files`), with `provenance.json` beside them.
"""
from __future__ import annotations

import hashlib
import json
import math
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

CANDIDATE_KEY = ("candidate_id",)
WINNER_KEY = ("model", "tp", "ep", "ep_rank", "dtype", "tokens", "backend")


def candidate_id(prob: Problem, backend: str, stage: str, config: dict) -> str:
    key = json.dumps(dict(prob.key(), backend=backend, stage=stage, config=config),
                     sort_keys=True, default=str)
    return hashlib.sha1(key.encode()).hexdigest()[:16]


class Tuner:
    def __init__(self, backend: str, device: str, run_dir, configs_dir, *, seed: int = 0,
                 routing: str = "uniform", budget_s: float | None = None, warmup_ms=5.0,
                 rep_ms=20.0, candidate_timeout_s=60.0, progress=True, command=""):
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

    # --- the search -----------------------------------------------------------------
    def run(self, shards: list[list[Problem]]) -> pd.DataFrame:
        """Tune every (shard, token count); returns the winners (one row per point).
        Holds the run folder's lock (moe_lab.runlock) throughout; a folder that is
        unreadable, not a tune run, or tuned with other settings (MEANING) is refused
        before anything is written."""
        from .runlock import run_lock
        self.check()
        with run_lock(self.run_dir, self.command or "moe-lab tune"):
            self._check_folder()
            return self._run(shards)

    # settings that change what a candidate's row means
    MEANING = ("backend", "mode", "seed", "routing", "warmup_ms", "rep_ms")

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
        refuse_other_settings(store, "tune", dict(
            backend=self.backend_name, mode=self.mode, seed=self.seed, routing=self.routing,
            warmup_ms=self.warmup_ms, rep_ms=self.rep_ms), self.MEANING,
            flags=dict(mode="mode (of --device)", warmup_ms="--warmup-ms", rep_ms="--rep-ms"))

    def _run(self, shards: list[list[Problem]]) -> pd.DataFrame:
        store = RunStore(self.run_dir)
        env = capture_environment()
        self.git_commit = env.get("git_commit")
        t0 = time.time()
        invocations = begin_invocation(store, dict(
            run_id=self.run_dir.name, command=self.command, environment=env,
            started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), kind="tune",
            config=dict(backend=self.backend_name, mode=self.mode, seed=self.seed,
                        routing=self.routing, warmup_ms=self.warmup_ms, rep_ms=self.rep_ms,
                        budget_s=self.budget_s, configs_dir=str(self.configs_dir),
                        shards=[[p.describe() for p in s] for s in shards]),
            where=f"tuned on {env.get('device_name')}"), t0)
        old = store.load_table("candidates")
        self.done = {r["candidate_id"]: r for r in old.to_dict("records")} if len(old) else {}
        self.store, self.deadline = store, (t0 + self.budget_s) if self.budget_s else math.inf
        total = sum(len(s) for s in shards)
        self._left, self.cut = total, False  # points still to search; a share ran out
        bar = progress_bar(total, self.progress)
        winners, status, counts = [], "interrupted", {"measured": 0, "skipped": 0}
        try:
            with terminate_gracefully():
                for shard in shards:
                    winners += self._shard(shard, bar, counts)
            status = "complete" if time.time() < self.deadline and not self.cut \
                else "budget spent"
        finally:  # killed or not, every winner found so far reaches the config files
            bar.close()
            end_invocation(store, invocations, t0, status, counts["measured"], counts["skipped"])
            if len(store.load_table("winners")):
                self.write_files(store.load_table("winners"))
        return pd.DataFrame(winners)

    def _shard(self, shard: list[Problem], bar, counts) -> list[dict]:
        weights = make_weights(shard[0], self.device, self.seed)
        out = []
        for prob in shard:
            bar.set_description(f"{prob.model.name} {prob.sharding} T={prob.tokens}")
            now = time.time()
            self._left -= 1
            if now >= self.deadline:
                bar.update(1)
                continue
            # an equal share of what is left: a budget reaches every token count (the large
            # ones cost the most per candidate and came last), a fast point's rest rolls on
            until = now + (self.deadline - now) / (self._left + 1)
            w = self._point(prob, weights, counts, until)
            if w is not None:
                out.append(w)
                self.store.append_table("winners", [w], key=WINNER_KEY)
            bar.update(1)
        return out

    def _point(self, prob: Problem, weights, counts, until: float = math.inf) -> dict | None:
        """The point's search, coordinate descent over its stages; each stage gets an
        equal share of the time left before `until` (gemm2 is never starved by gemm1)."""
        inp = make_inputs(prob, self.device, point_seed(self.seed, prob.tokens, self.routing),
                          self.routing)
        ref = reference(prob, weights, inp)
        default = self.backend.default_config(prob)
        d_row = self._candidate(prob, weights, inp, "default", default, default, counts)
        if d_row["status"] == "ok" and not math.isfinite(d_row.get("max_rel_err") or math.nan):
            # the default can win (no candidate beats it): checked like any winner
            self._correct(prob, weights, inp, ref, default, d_row)
            d_row = self.done[d_row["candidate_id"]]
        best, best_us = dict(default), d_row["median_us"] if d_row["status"] == "ok" else math.inf
        space = self.backend.config_space(prob)
        for i, (stage, options) in enumerate(space.items()):
            rows, now = [], time.time()
            stage_until = now + max(until - now, 0.0) / (len(space) - i)  # inf: no budget
            for cand in options:
                if stage != "gemm1" and "BLOCK_SIZE_M" in cand and "gemm1" in best \
                        and cand["BLOCK_SIZE_M"] != best["gemm1"].get("BLOCK_SIZE_M"):
                    continue  # one alignment: later GEMMs keep gemm1's BLOCK_SIZE_M
                full = dict(best, **{stage: cand})
                timed = candidate_id(prob, self.backend_name, stage, full) in self.done
                if not timed and time.time() >= stage_until:  # a resume reuses what it has
                    self.cut = True
                    break
                rows.append(self._candidate(prob, weights, inp, stage, cand, full, counts))
            for r in sorted((r for r in rows if r["status"] == "ok"), key=lambda r: r["median_us"]):
                if r["median_us"] >= best_us:
                    break
                full = json.loads(r["full_config"])
                if self._correct(prob, weights, inp, ref, full, r):
                    best, best_us = full, r["median_us"]
                    break
        if not math.isfinite(best_us):
            return None
        return dict({k: v for k, v in prob.key().items()}, backend=self.backend_name,
                    sharding=prob.sharding, config=json.dumps(best, sort_keys=True),
                    median_us=best_us, default_us=d_row["median_us"],
                    speedup=d_row["median_us"] / best_us if d_row["status"] == "ok" else math.nan,
                    mode=self.mode, git_commit=self.git_commit, device=self.device_name,
                    measured_at=now_iso())

    def _candidate(self, prob, weights, inp, stage, cand, full, counts) -> dict:
        cid = candidate_id(prob, self.backend_name, stage, full)
        if cid in self.done:
            counts["skipped"] += 1
            return self.done[cid]
        row = new_row(dict(prob.key(), backend=self.backend_name, mode=self.mode,
                           routing=self.routing),
                      git_commit=self.git_commit, device=self.device_name, stage=stage,
                      candidate_id=cid, config=json.dumps(cand, sort_keys=True),
                      full_config=json.dumps(full, sort_keys=True))
        t = None
        try:
            with time_limit(self.candidate_timeout_s, "candidate"):
                fn = self.backend.prepare(prob, weights, config=full)
                t = time_fn(self.mode, fn, [inp.args()], self.device, warmup_ms=self.warmup_ms,
                            rep_ms=self.rep_ms)
        except PointTimeout as exc:
            row.update(status="timeout", error=str(exc))
        except Exception as exc:  # a config that does not compile or fit is a row
            reraise_if_terminated(exc)
            row.update(status=classify_exception(exc), error=one_line(exc))
            _recover(self.device)
        finish(row, timing=t if row["status"] == "ok" else None, problem=prob)
        self.store.append_table("candidates", [row], key=CANDIDATE_KEY)
        self.done[cid] = row
        counts["measured"] += 1
        return row

    def _correct(self, prob, weights, inp, ref, full, row) -> bool:
        """Check a would-be winner on the point's inputs; an incorrect one is marked."""
        fn = self.backend.prepare(prob, weights, config=full)
        chk = check_backend(self.backend, prob, weights, inp, ref, self.device, fn)
        row = dict(row, max_rel_err=chk["max_rel_err"])
        if chk["status"] != "ok":
            row.update(status="incorrect" if chk["status"] == "incorrect" else chk["status"],
                       error=chk["error"])
        self.store.append_table("candidates", [row], key=CANDIDATE_KEY)
        self.done[row["candidate_id"]] = row
        return chk["status"] == "ok"

    # --- the files --------------------------------------------------------------------
    def write_files(self, winners: pd.DataFrame) -> list[Path]:
        """One file per stage and shard: {tokens: config}, every winner tuned so far."""
        from .configs import write_table
        folder = self.configs_dir / self.backend_name
        written = []
        for _, g in winners.groupby(["model", "tp", "ep", "ep_rank", "dtype"]):
            prob = _problem_of(g.iloc[0])
            tables: dict[str, dict] = {}
            for r in g.itertuples():
                for stage, cfg in json.loads(r.config).items():
                    tables.setdefault(stage, {})[int(r.tokens)] = cfg
            names = self.backend.config_files(prob, self.device_name)
            for stage, table in tables.items():
                written.append(write_table(folder / names[stage], table))
        prov = read_provenance(folder)
        for p in written:
            prov[p.name] = dict(run=self.run_dir.name, git_commit=self.git_commit,
                                device=self.device_name, written=now_iso(),
                                mode=self.mode, seed=self.seed,
                                note="winners of moe-lab tune; every candidate's time is in "
                                     f"data/runs/{self.run_dir.name}/candidates.parquet")
        atomic_write_json(folder / "provenance.json", prov)
        return written


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
