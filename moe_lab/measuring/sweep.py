"""The sweep: a grid of points and the loop that measures them into a run folder.

    grid = Grid(models=["qwen3-30b-a3b"], tokens=[1, 16], backends=["torch"], modes=[Mode("eager")])
    Sweep(grid, device="cpu", run_dir="data/runs/x").run()

For every (problem, routing, backend) the backend is first checked against the reference
on the point's inputs; only a passing backend is timed. Each timed point gets a profiler
pass (per-kernel device time, phases). Every point, whatever happens to it, becomes one
row, written as soon as it is measured; rerunning the same sweep resumes, skipping points
already recorded. A point's inputs are a pure function of its key and the run's seed
(moe_lab.measuring.correctness), so a rerun times the very same inputs.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

import torch

from .. import backends as registry
from .compile import COMPILE_BUDGET_S, CompileBench
from .compile_table import COMPILE_KEY, merge_compile_rows, recount_compile_rows
from .correctness import (THRESHOLDS, classify_exception, make_inputs,
                          make_weights, one_line, point_seed, quant_facts, reference)
from ..core.constants import POINT_TIMEOUT_S, SWEEP_REP_MS, SWEEP_WARMUP_MS
from ..core.environment import capture_environment, device_name
from ..core.errors import (Terminated, UsageError, disk_full,
                          reraise_if_terminated, terminate_gracefully, time_limit)
from ..storage.modes import Mode
from ..core.problems import Problem, make_problem
from .progress import native_log_filter, progress_bar
from ..cost.roofline import local_counts
from ..storage.invocations import begin_invocation, end_invocation
from .points import IDENTITY, finish, new_row
from . import points
from ..storage import resume
from ..storage.store import RunStore, point_id


@dataclass
class Grid:
    """models x tp x ep x tokens x routings x backends x modes."""
    models: list[str]
    tokens: list[int]
    backends: list[str]
    modes: list[Mode]
    tps: list[int] = field(default_factory=lambda: [8])
    eps: list[int] = field(default_factory=lambda: [1])
    ep_rank: int = 0
    routings: list[str] = field(default_factory=lambda: ["uniform"])
    dtype: str = "bf16"
    configs: list[str] = field(default_factory=lambda: ["default"])  # default, tuned, a file
    glues: list[str] = field(default_factory=lambda: ["fused"])  # fused, naive (moe_lab.glue)

    def __post_init__(self):  # each value once: a value given twice (the API's lists, the
        # CLI's parsers say the same) measured one point twice and counted it twice
        for name in ("models", "tokens", "backends", "modes", "tps", "eps", "routings",
                     "configs", "glues"):
            setattr(self, name, list(dict.fromkeys(getattr(self, name))))

    def shards(self) -> list[list[Problem]]:
        """One list of problems (the token grid) per model x tp x ep."""
        if self.dtype.startswith("fp8") and any(m.kind == "compile" for m in self.modes):
            raise UsageError(f"dtype {self.dtype}: compile modes measure the bf16 layer only; "
                             "use eager and graph")
        return [[make_problem(m, t, self.dtype, tp, ep, self.ep_rank if ep > 1 else 0)
                 for t in self.tokens]
                for m in self.models for tp in self.tps for ep in self.eps]

    def modes_of(self, backend: str) -> list[Mode]:
        """The modes a backend is measured in: compile modes twice (traced and through the
        custom op) for a backend that declares `compile_both_ways`."""
        both = registry.backend_class(backend).compile_both_ways
        out = []
        for m in self.modes:
            out.append(m)
            if m.kind == "compile" and both:
                out.append(m.with_wrapped(True))
        return out

    def configs_of(self, backend: str, mode: Mode) -> list[str]:
        """Configurations a backend is measured with: every one asked for when it is
        tunable (eager and graph modes), else its own ("default")."""
        if registry.backend_class(backend).tunable and mode.kind != "compile":
            return self.configs
        return ["default"]

    def glues_of(self, backend: str, mode: Mode) -> list[str]:
        """Glue variants a backend is measured with: those asked for that it offers
        (eager and graph modes); "" for a backend with no glue choice."""
        offered = getattr(registry.backend_class(backend), "glues", ())
        if not offered or mode.kind == "compile":
            return [""]
        return [g for g in self.glues if g in offered] or [offered[0]]

    def points_of(self, backend: str) -> list[tuple[Mode, str, str]]:
        return [(m, c, g) for m in self.modes_of(backend) for c in self.configs_of(backend, m)
                for g in self.glues_of(backend, m)]

    def config(self) -> dict:
        return dict(models=self.models, tp=self.tps, ep=self.eps, ep_rank=self.ep_rank,
                    tokens=self.tokens, backends=self.backends,
                    modes=[m.name for m in self.modes], routing=self.routings, dtype=self.dtype,
                    configs=self.configs, glues=self.glues)


def row_id(prob: Problem, routing: str, backend: str, mode: Mode, config: str = "default",
           glue: str = "") -> str:
    return point_id(dict(prob.key(), backend=backend, mode=mode.name, wrapped=mode.wrapped,
                         routing=routing, config=config, glue=glue))


class Sweep:
    def __init__(self, grid: Grid, device: str, run_dir, *, seed: int = 0, profile=True,
                 traces: int = 0, warmup_ms=SWEEP_WARMUP_MS, rep_ms=SWEEP_REP_MS,
                 compile_budget_s=None, point_timeout_s=POINT_TIMEOUT_S, progress=True, command=None, set_aside_corrupt=False,
                 part: tuple[int, int] | None = None, compile_workers: int | None = None):
        self.grid, self.device, self.seed = grid, device, seed
        self.profile, self.traces_left = profile, traces
        self.warmup_ms, self.rep_ms, self.point_timeout_s = warmup_ms, rep_ms, point_timeout_s
        self.budget = {"*": COMPILE_BUDGET_S, **(compile_budget_s or {})}
        self.progress = progress
        self.command = command or " ".join(sys.argv)
        self.run_dir, self.set_aside_corrupt = str(run_dir), set_aside_corrupt
        self.part = part  # (i, n): this sweep measures part i of n (a deterministic split)
        from .tuning_compile import compile_workers_for  # Triton compiled ahead per shard
        self.compile_workers = compile_workers_for(device, compile_workers)
        self.device_name = device_name(device)
        self.store = RunStore(run_dir, create=False)

    def _row(self, prob: Problem, routing: str, backend: str, mode: Mode, config="default",
             glue="", **kw) -> dict:
        """A row of this sweep (moe_lab.measuring.points.new_row); `finish` closes it."""
        row = new_row(dict(prob.key(), backend=backend, mode=mode.name, wrapped=mode.wrapped,
                           routing=routing, config=config, glue=glue),
                      git_commit=self.git_commit, device=self.device_name,
                      sharding=prob.sharding, seed=point_seed(self.seed, prob.tokens, routing))
        row.update(kw)
        row["point_id"] = row_id(prob, routing, backend, mode, config, glue)
        return row

    # --- running -------------------------------------------------------------------
    def check(self) -> None:
        """UsageError (one line, nothing touched) when `run` would be refused (resume)."""
        resume.check_sweep(self, locked=False)

    def run(self) -> dict:
        """Measure every point not yet in the folder, holding its lock. Another writer, a
        corrupt file (unless set_aside_corrupt) or other settings (resume.SWEEP_MEANING)
        stop the sweep before anything is written (moe_lab.storage.resume)."""
        with resume.sweep_lock(self):
            return self._run()

    def _run(self) -> dict:
        self.store = RunStore(self.run_dir)
        t_start = time.time()
        env = capture_environment()
        self.git_commit = env.get("git_commit")
        manifest = dict(
            run_id=os.path.basename(os.path.abspath(self.run_dir)), command=self.command,
            started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), environment=env,
            config=dict(self.grid.config(), device=self.device, seed=self.seed,
                        warmup_ms=self.warmup_ms, rep_ms=self.rep_ms,
                        compile_budget_s=self.budget, profile=self.profile,
                        part=f"{self.part[0]}/{self.part[1]}" if self.part else None),
            inputs="weights, activations and routing drawn from CPU generators seeded by "
                   "the point (correctness.point_seed: seed + 1009*tokens + crc32(routing) "
                   "% 997; weights by the seed alone): the same inputs on any machine",
            where=f"measured on {env.get('device_name')}",
            backends={b: registry.info_for_manifest(b) for b in self.grid.backends})
        invocations = begin_invocation(self.store, manifest, t_start)
        done = set() if getattr(self, "redo_all", False) else self.store.done_ids()
        counts = {"measured": 0, "skipped": 0}
        bar = progress_bar(self.total_points(), self.progress)
        status = "interrupted"
        try:
            with terminate_gracefully():
                for shard in self.grid.shards():
                    self._run_shard(shard, done, counts, bar)
            status = "complete"
        except Terminated:
            status = "interrupted: SIGTERM"
            raise
        except KeyboardInterrupt:
            status = "interrupted: SIGINT (Ctrl-C)"
            raise
        except Exception as exc:
            status = f"failed: {one_line(exc)}"
            raise
        finally:
            bar.close()
            end_invocation(self.store, invocations, t_start, status, counts["measured"],
                           counts["skipped"])
        return counts

    def _mine(self, pid: str) -> bool:
        """Whether a point belongs to this part of a split sweep: its id (a hash of the
        point's key) modulo the number of parts; the same on every machine."""
        return self.part is None or int(pid[:8], 16) % self.part[1] == self.part[0]

    def total_points(self) -> int:
        return sum(self._pending(shard, set())[1] for shard in self.grid.shards())

    def _pending(self, shard, done) -> tuple[dict, int]:
        """((prob, routing, backend) -> [(mode, config)] not yet measured, in run order;
        the number of this part's points in the shard, measured or not)."""
        todo, mine = {}, 0
        for prob in shard:
            for routing in self.grid.routings:
                for b in self.grid.backends:
                    ids = {(m, c, g): row_id(prob, routing, b, m, c, g)
                           for m, c, g in self.grid.points_of(b)}
                    ids = {mc: pid for mc, pid in ids.items() if self._mine(pid)}
                    mine += len(ids)
                    left = [mc for mc, pid in ids.items() if pid not in done]
                    if left:
                        todo[(prob, routing, b)] = left
        return todo, mine

    def _run_shard(self, shard: list[Problem], done, counts, bar):
        todo, n_all = self._pending(shard, done)
        n_todo = sum(len(v) for v in todo.values())
        counts["skipped"] += n_all - n_todo
        bar.update(n_all - n_todo)
        if not todo:
            return
        weights = None
        try:
            weights = make_weights(shard[0], self.device, self.seed)
            if self.compile_workers:  # Triton compiled ahead (it can only save time)
                from .tuning_compile import compile_sweep_ahead
                for line in compile_sweep_ahead(todo, weights, self.device, self.compile_workers):
                    bar.write(line)
            self._run_points(shard, todo, weights, counts, bar)
            self._run_compile(shard, todo, weights, counts, bar)
        except Exception as exc:  # e.g. the weights of this model do not fit: rows, go on
            reraise_if_terminated(exc)
            if disk_full(exc):  # not the points' failure: stop (the CLI says it in one line)
                raise
            self._fail_rest(shard, exc, counts, bar)
        finally:
            del weights
            if self.device.startswith("cuda"):
                torch.cuda.empty_cache()

    def _fail_rest(self, shard, exc, counts, bar):
        status, err = classify_exception(exc), one_line(exc)
        todo, _ = self._pending(shard, self.store.done_ids(retry=()))  # none measured twice
        rows = [finish(self._row(prob, routing, b, m, c, g, status=status,
                                 error=f"setup failed: {err}"))
                for (prob, routing, b), left in todo.items() for m, c, g in left]
        if rows:
            self.store.append(rows, [])
            counts["measured"] += len(rows)
            bar.update(len(rows))

    def _run_points(self, shard, todo, weights, counts, bar):
        """eager and graph points: check once per (problem, routing, backend), then time."""
        prepared: dict[tuple, object] = {}
        by_input: dict = {}
        for (prob, routing, b), left in todo.items():
            for c, g in dict.fromkeys((c, g) for m, c, g in left if m.kind != "compile"):
                modes = [m for m, c2, g2 in left if (c2, g2) == (c, g) and m.kind != "compile"]
                by_input.setdefault((prob, routing), []).append((b, c, g, modes))
        for (prob, routing), work in by_input.items():
            inp = make_inputs(prob, self.device, point_seed(self.seed, prob.tokens, routing),
                              routing)
            ref = reference(prob, weights, inp)
            hit, pairs = local_counts(prob, inp.topk_ids.cpu())
            facts = dict(experts_hit=hit, pairs=pairs, inputs_digest=inp.digest(),
                         threshold=THRESHOLDS[prob.dtype], **self._speed_of_light(prob, pairs),
                         **quant_facts(prob, weights, inp, ref))
            for b, config, glue, modes in work:
                bar.set_description(f"{prob.model.name} {prob.sharding} T={prob.tokens} {b}"
                                    + ("" if config == "default" else f" [{config}]")
                                    + ("" if glue in ("", "fused") else f" [glue {glue}]"))
                rows, krows, prows = self._measure_backend(prob, routing, b, config, glue, modes,
                                                           weights, inp, ref, prepared, facts)
                for r in rows:
                    finish(r, problem=prob, topk_ids=inp.topk_ids, device=self.device)
                # phases, like kernels, before their rows: a kill never leaves a row without
                self.store.append_table("phases", prows, key=("point_id",))
                self.store.append(rows, krows)
                counts["measured"] += len(rows)
                bar.update(len(rows))
            del inp, ref

    def _speed_of_light(self, prob, pairs) -> dict:
        """On a GPU: two dense GEMMs with the point's rows and flops (moe_lab.measuring.sol), the
        "what one big GEMM gets here" of every backend at this point."""
        if not self.device.startswith("cuda") or prob.is_fp8:  # no fp8 dense GEMM yet
            return {}
        from .sol import dense_gemm_us
        try:
            d = dense_gemm_us(prob, pairs, self.device)
            return dict(dense_gemm_us=d.dense_gemm_us, dense_tflops=d.dense_tflops)
        except Exception as exc:
            reraise_if_terminated(exc)
            return dict(warning=f"dense GEMM speed of light: {one_line(exc)}")

    def _measure_backend(self, prob, routing, bname, config, glue, modes, weights, inp, ref,
                         prepared, facts):
        """One point through the one measuring function (points.measure_point): checked,
        profiled, then timed per mode; its rows, kernel rows and phase rows."""
        from .profiling import check_kernel_coverage
        got: dict = {}

        def each(t):  # a failed timing can leave the device's memory in pieces
            if self.device.startswith("cuda") and t.status in ("failed", "oom"):
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
        c = points.measure_point(
            points.Point(prob, bname, config=config, glue=glue, routing=routing), weights,
            self.device, modes=modes, limit_s=self.point_timeout_s, inputs=inp, ref=ref,
            device_name=self.device_name, cache=prepared, each=each,
            before=lambda c: got.update(self._profile(prob, bname, config, c.fn, inp)),
            timer_kw=dict(warmup_ms=self.warmup_ms, rep_ms=self.rep_ms))
        chk = c.row()
        base = dict(facts, max_rel_err=chk["max_rel_err"],
                    **{k: chk[k] for k in ("glue_used", "glue_notes", "config_file",
                                           "launch_config", "backend_version") if k in chk})
        if not c.ok:  # incorrect / unsupported / ...: a row, never timed
            return [self._row(prob, routing, bname, m, config, glue, status=chk["status"],
                              error=chk["error"], **base) for m in modes], [], []
        kdf, kus = got.get("kdf"), got.get("kus", float("nan"))
        base.update(got.get("base", {}))
        rows, krows, samples = [], [], {}
        for t in c.timed:
            mode = t.mode
            row = self._row(prob, routing, bname, mode, config, glue, kernel_us=kus, **base)
            if t.status == "ok":
                finish(row, timing=t.timing)
                samples[row["point_id"]] = t.timing.samples_us
                notes = [row.get("warning", ""), t.timing.note if t.timing.noisy else ""]
                if mode.kind == "graph" and kus == kus:
                    ok, warn = check_kernel_coverage(kus, t.timing.median_us)
                    notes.append("" if ok else warn)
                row["warning"] = "; ".join(n for n in notes if n)
            else:
                row.update(status=t.status, error=t.error)
            rows.append(row)
            if kdf is not None and row["status"] == "ok":
                krows += [dict(k, point_id=row["point_id"]) for k in kdf.to_dict("records")]
        self.store.append_samples(samples)  # before the rows: a kill between leaves no row
        return rows, krows, self._phases(prob, inp, rows, kdf)

    def _profile(self, prob, bname, config, fn, inp) -> dict:
        """The profiler pass of a checked point, before it is timed: kernels (kdf, kus),
        a trace while --traces lasts, and what goes on its rows (base)."""
        from ..storage.traces import trace_name
        from .eager_split import profiled_eager_us
        from .profiling import export_trace, kernel_us, profile_kernels
        out: dict = {"base": {}}
        if not self.profile:
            return out
        try:
            with time_limit(self.point_timeout_s), native_log_filter():
                out["kdf"] = kdf = profile_kernels(fn, inp.args(), iters=3, device=self.device)
                out["kus"] = kernel_us(kdf) if len(kdf) else float("nan")
                if self.traces_left > 0:
                    os.makedirs(os.path.join(self.run_dir, "traces"), exist_ok=True)
                    export_trace(fn, inp.args(), os.path.join(
                        self.run_dir, "traces", trace_name(prob, bname, config)),
                        device=self.device)
                    self.traces_left -= 1
                    # the eager time with the profiler's cost: what its split is held to
                    out["base"]["eager_profiled_us"] = profiled_eager_us(
                        fn, inp.args(), self.device, warmup_ms=self.warmup_ms,
                        rep_ms=self.rep_ms)
        except Exception as exc:
            reraise_if_terminated(exc)
            out["base"]["warning"] = f"profiler pass failed: {one_line(exc)}"
        return out

    def _phases(self, prob, inp, rows, kdf) -> list[dict]:
        """Per timed point and phase: measured time beside its own floor (moe_lab.cost.ledger),
        for phases.parquet. Annotation: a failure here is a warning, never a lost row."""
        if kdf is None:
            return []
        from ..cost.ledger import gathers_rows, phase_rows
        if not hasattr(self, "_ceilings"):
            from ..core.devices import ceilings_for
            try:
                self._ceilings = ceilings_for(self.device_name) if self.device.startswith("cuda") else None
            except Exception:  # no committed ceilings for this device: floors unknown
                self._ceilings = None
        out = []
        for row in rows:
            if row["status"] != "ok":
                continue
            try:
                out += phase_rows(row["point_id"], prob, inp.topk_ids.cpu(), kdf, self._ceilings,
                                  median_us=row["median_us"],
                                  gathered=gathers_rows(row["backend"]))
            except Exception as exc:
                reraise_if_terminated(exc)
                row["warning"] = "; ".join(x for x in (row.get("warning") or "",
                                                       f"phase floors: {one_line(exc)}") if x)
        return out

    def _run_compile(self, shard, todo, weights, counts, bar):
        """compile modes: one CompileBench per shard x routing, one run per backend x mode
        over the token counts it has not measured yet."""
        for routing in self.grid.routings:
            work: dict = {}  # (backend, mode) -> token counts left
            for (prob, r, b), left in todo.items():
                for m, _, _ in left:
                    if r == routing and m.kind == "compile":
                        work.setdefault((b, m), []).append(prob.tokens)
            if not work:
                continue
            tokens = sorted({t for ts in work.values() for t in ts})
            bench = CompileBench(shard[0].with_tokens(tokens[0]), tokens, self.device, routing,
                                 weights=weights,
                                 point_seed=lambda t: point_seed(self.seed, t, routing))
            by_tokens = {p.tokens: p for p in shard}
            for (b, m), toks in work.items():
                bar.set_description(f"{shard[0].model.name} {shard[0].sharding} {b} {m.label}")

                def on_row(r, b=b, m=m):
                    prob = by_tokens[r["tokens"]]
                    samples = r.pop("samples_us", None)
                    out = self._row(prob, routing, b, m)
                    out.update({k: v for k, v in r.items()  # what the bench measured
                                if k not in IDENTITY and k not in ("git_commit", "device")})
                    points.finish(out, problem=prob, device=self.device)
                    if samples:
                        self.store.append_samples({out["point_id"]: samples})
                    self.store.append([out], [])
                    counts["measured"] += 1
                    bar.update(1)
                _, crow = bench.run(b, m, self.budget.get(b, self.budget["*"]), on_row=on_row,
                                    tokens=sorted(toks))
                if crow is not None:
                    crow.update(git_commit=self.git_commit, device=self.device_name)
                    self._store_compile_row(crow)

    def _store_compile_row(self, crow: dict):
        old = self.store.load_table("compile")
        key = tuple(str(crow[k]) for k in COMPILE_KEY)
        if len(old):
            for r in old.to_dict("records"):
                if all(k in r for k in COMPILE_KEY) and tuple(str(r[k]) for k in COMPILE_KEY) == key:
                    crow = merge_compile_rows(r, crow)
                    break
        crow = recount_compile_rows([crow], self.store.load_results())[0]
        self.store.append_table("compile", [crow], key=COMPILE_KEY)
