"""`moe-lab sweep`: models x sharding x tokens x routing x backends x modes -> data/runs/<id>/.

For every (problem, routing, backend) the backend is first checked against the fp32
reference on fresh random inputs; only a passing backend is timed. Each timed point
gets a profiler pass (per-kernel device time, phases). Every point, whatever happens to
it, becomes one row; rows are written atomically as they are measured, and rerunning
the same command resumes, skipping points already recorded.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
import zlib

import torch

from . import backends as B
from .check import (THRESHOLDS, check_backend, classify_exception, default_device,
                    make_inputs, make_weights, one_line, reference)
from .errors import (PointTimeout, Terminated, UsageError,  # noqa: F401 (re-exported)
                     reraise_if_terminated, terminate_gracefully, time_limit)
from .problems import (SEED_MODELS, make_problem, parse_int_list, parse_model, parse_tokens,
                       split_models)
from .routing import parse_routing

BASE_MODES = ("eager", "graph")
COMPILE_VARIANTS = ("default", "max-autotune-no-cudagraphs", "reduce-overhead", "off")
# compile:off = the same layer (router + experts) run uncompiled: the fair baseline


def parse_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    for m in modes:
        if m in BASE_MODES:
            continue
        parts = m.split(":")
        if parts[0] != "compile" or len(parts) not in (2, 3) or parts[1] not in COMPILE_VARIANTS \
                or (len(parts) == 3 and parts[2] != "dynamic"):
            raise UsageError(f"mode {m!r} is not eager, graph or compile:<variant>[:dynamic] "
                             f"with variant in {', '.join(COMPILE_VARIANTS)}")
    if not modes:
        raise UsageError("no modes given")
    return modes


def parse_budget(text: str) -> dict[str, float]:
    """`150` or `150,torch=30` -> {"*": 150.0, "torch": 30.0} (seconds, all positive)."""
    out: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, value = part.rpartition("=")
        try:
            sec = float(value)
        except ValueError:
            sec = math.nan
        if not sec > 0 or math.isinf(sec):
            raise UsageError(f"--compile-budget: {part!r} is not a positive number of seconds")
        if name:
            B.parse_names(name)  # an unknown backend is a usage error
        out[name or "*"] = sec
    return out


def _list(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def default_run_id(config: dict, device_name: str) -> str:
    """Same command on the same kind of device -> same run id, so a rerun resumes."""
    slug = "".join(c if c.isalnum() else "-" for c in device_name.lower()).strip("-")
    digest = hashlib.sha1(json.dumps(config, sort_keys=True).encode()).hexdigest()[:8]
    return f"{slug}-{digest}"


class Sweep:
    def __init__(self, *, models, tps, eps, ep_rank, tokens, backends, modes, routings, dtype,
                 device, run_dir, seed=0, profile=True, traces=0, warmup_ms=10, rep_ms=50,
                 compile_budget_s=None,
                 point_timeout_s=120.0, progress=True, command=None):
        from .store import RunStore
        self.models, self.tps, self.eps, self.ep_rank = models, tps, eps, ep_rank
        self.tokens, self.backends, self.modes, self.routings = tokens, backends, modes, routings
        self.dtype, self.device, self.seed = dtype, device, seed
        self.profile, self.traces = profile, traces
        self.warmup_ms, self.rep_ms, self.point_timeout_s = warmup_ms, rep_ms, point_timeout_s
        from .compile import COMPILE_BUDGET_S
        if compile_budget_s is None:
            compile_budget_s = {"*": COMPILE_BUDGET_S}
        elif not isinstance(compile_budget_s, dict):
            compile_budget_s = {"*": float(compile_budget_s)}
        self.compile_budget_s = dict(compile_budget_s)
        self.compile_budget_s.setdefault("*", COMPILE_BUDGET_S)
        self.progress = progress
        self.command = command or " ".join(sys.argv)
        self.store = RunStore(run_dir)
        self.run_dir = run_dir
        self.traces_left = traces

    # --- the grid ------------------------------------------------------------------
    def problems(self):
        for m in self.models:
            for tp in self.tps:
                for ep in self.eps:
                    yield [make_problem(m, t, self.dtype, tp, ep, self.ep_rank if ep > 1 else 0)
                           for t in self.tokens]

    def point_ids(self, prob, routing, backend):
        from .store import point_id
        return {mode: point_id(dict(prob.key(), backend=backend, mode=mode, routing=routing))
                for mode in self.modes}

    def total_points(self) -> int:
        """Rows the sweep will write; compile modes add a custom-op row per wrapped backend."""
        n_shard = len(self.models) * len(self.tps) * len(self.eps)
        per_backend = len(self.modes)
        n_compile = sum(m.startswith("compile:") for m in self.modes)
        wrapped = 0
        if n_compile:
            from .compile import WRAP_BOTH
            wrapped = sum(b in WRAP_BOTH for b in self.backends) * n_compile
        return n_shard * len(self.tokens) * len(self.routings) * (
            len(self.backends) * per_backend + wrapped)

    # --- running ------------------------------------------------------------------------
    def run(self) -> dict:
        from .store import capture_environment
        from .timing import time_cpu  # noqa: F401  (fail early if the instruments are missing)
        t_start = time.time()
        env = capture_environment()
        prior = self.store.read_manifest()  # {} on a fresh run
        manifest = dict(
            run_id=os.path.basename(os.path.abspath(self.run_dir)),
            command=self.command, started=prior.get("started") if prior else
            time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            environment=env,
            config=dict(models=self.models, tp=self.tps, ep=self.eps, ep_rank=self.ep_rank,
                        tokens=self.tokens, backends=self.backends, modes=self.modes,
                        routing=self.routings, dtype=self.dtype, device=self.device,
                        seed=self.seed, warmup_ms=self.warmup_ms, rep_ms=self.rep_ms,
                        compile_budget_s=self.compile_budget_s,
                        profile=self.profile),
            where=("measured on " + str(env.get("device_name"))),
            backends={b: _backend_info(b) for b in self.backends},
            status="running",
        )
        # one entry per invocation, written when it starts: a resumed run keeps who
        # measured what, where, and a SIGKILLed call stays visible as one
        invocations = []
        if prior:
            if prior.get("status") == "running":  # it died without bookkeeping (SIGKILL)
                manifest["previous_status"] = KILLED
            manifest["resumed"] = prior.get("resumed", 0) + 1
            manifest["wall_s_previous"] = prior.get("wall_s_total", prior.get("wall_s", 0))
            for k in KEPT_ON_RESUME:  # what people wrote about the folder stays with it
                if k in prior:
                    manifest[k] = prior[k]
            # a manifest from before invocations were recorded: rebuild its one entry
            invocations = [dict(i, status=KILLED) if i.get("status") == "running" else i
                           for i in (prior.get("invocations") or [_invocation_from(prior)])]
        invocations.append(dict(
            started=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t_start)),
            status="running", command=self.command, git_commit=env.get("git_commit"),
            device_name=env.get("device_name")))
        manifest["invocations"] = invocations
        self.store.write_manifest(manifest)
        done = self.store.done_ids()
        counts = {"measured": 0, "skipped": 0}
        bar = _progress(self.total_points(), self.progress)
        compile_modes = [m for m in self.modes if m.startswith("compile:")]
        status = "interrupted"
        try:
            with terminate_gracefully():
                for group in self.problems():
                    self._run_group(group, done, counts, bar)
                    if compile_modes:
                        self._run_compile(group, compile_modes, done, counts, bar)
            status = "complete"
        except Terminated:
            status = "interrupted: SIGTERM"
            raise
        except KeyboardInterrupt:
            status = "interrupted: Ctrl-C"
            raise
        except Exception as exc:
            status = f"failed: {one_line(exc)}"
            raise
        finally:
            bar.close()
            wall = time.time() - t_start
            finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            invocations[-1].update(finished=finished, wall_s=round(wall, 1), status=status,
                                   points_measured=counts["measured"],
                                   points_skipped=counts["skipped"])
            self.store.update_manifest(
                finished=finished, wall_s=round(wall, 1),
                wall_s_total=round(wall + manifest.get("wall_s_previous", 0), 1),
                status=status, points_measured_this_run=counts["measured"],
                points_skipped_already_done=counts["skipped"], invocations=invocations)
        return counts

    def _run_group(self, group, done, counts, bar):
        base_modes = [m for m in self.modes if m in BASE_MODES]
        first = group[0]
        weights = None
        prepared: dict[str, object] = {}
        try:
            for prob in group:
                for routing in self.routings:
                    pending = {b: {m: pid for m, pid in self.point_ids(prob, routing, b).items()
                                   if m in base_modes and pid not in done}
                               for b in self.backends}
                    skipped = sum(len(base_modes) - len(v) for v in pending.values())
                    counts["skipped"] += skipped
                    bar.update(skipped)
                    if not any(pending.values()):
                        continue
                    if weights is None:
                        weights = make_weights(first, self.device, self.seed)
                    self._run_point(prob, routing, weights, prepared, pending, counts, bar)
        except Exception as exc:  # e.g. the weights of this model do not fit: rows, go on
            reraise_if_terminated(exc)
            self._fail_rest(group, done, base_modes, exc, counts, bar)
        finally:
            del weights, prepared
            if self.device.startswith("cuda"):
                torch.cuda.empty_cache()

    def _fail_rest(self, group, done, base_modes, exc, counts, bar):
        status, err = classify_exception(exc), one_line(exc)
        done_now = self.store.done_ids()
        rows = []
        for prob in group:
            for routing in self.routings:
                for b in self.backends:
                    for m, pid in self.point_ids(prob, routing, b).items():
                        if m in base_modes and pid not in done_now:
                            rows.append(self._row(prob, routing, b, m, pid, status=status,
                                                  error=f"setup failed: {err}"))
        if rows:
            self.store.append(rows, [])
            bar.update(len(rows))

    def _row(self, prob, routing, backend, mode, pid, **kw):
        row = dict(prob.key(), backend=backend, mode=mode, routing=routing, point_id=pid,
                   status="ok", error="", median_us=float("nan"), p10_us=float("nan"),
                   p90_us=float("nan"), n=0, kernel_us=float("nan"), max_rel_err=float("nan"),
                   warning="", noisy=False, sharding=prob.sharding,
                   measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        row.update(kw)
        return row

    def _run_point(self, prob, routing, weights, prepared, pending, counts, bar):
        from .profiling import check_kernel_coverage, export_trace, profile_kernels
        from .timing import CaptureError, time_cpu, time_eager, time_graph
        seed = self.seed + prob.tokens * 1009 + zlib.crc32(routing.encode()) % 997  # not hash(): salted per process
        inp = make_inputs(prob, self.device, seed, routing)
        ref = reference(prob, weights, inp)
        experts_hit = _experts_hit(prob, inp.topk_ids)
        for bname, modes in pending.items():
            if not modes:
                continue
            backend = B.get(bname)
            bar.set_description(f"{prob.model.name} {prob.sharding} T={prob.tokens} {bname}")
            rows, kernel_rows = [], []
            fn = None
            try:
                with time_limit(self.point_timeout_s):
                    ok_avail, _ = backend.available()
                    ok_sup, _ = backend.supports(prob, self.device) if ok_avail else (False, "")
                    if ok_avail and ok_sup and bname not in prepared:
                        prepared[bname] = backend.prepare(prob, weights)
                    fn = prepared.get(bname)
                    chk = check_backend(backend, prob, weights, inp, ref, self.device, fn)
            except Exception as exc:
                reraise_if_terminated(exc)
                chk = dict(status="timeout" if isinstance(exc, PointTimeout) else
                           classify_exception(exc), error=one_line(exc), max_rel_err=float("nan"))
            base = dict(max_rel_err=chk["max_rel_err"], experts_hit=experts_hit,
                        threshold=THRESHOLDS[prob.dtype])
            if chk["status"] != "ok":  # incorrect / unsupported / ...: a row, never timed
                for mode, pid in modes.items():
                    rows.append(self._row(prob, routing, bname, mode, pid, status=chk["status"],
                                          error=chk["error"], **base))
            else:
                kdf, kus = None, float("nan")
                if self.profile:
                    try:
                        with time_limit(self.point_timeout_s):
                            kdf = profile_kernels(fn, inp.args(), iters=3, device=self.device)
                            kus = float(kdf["total_us"].sum()) if len(kdf) else float("nan")
                            if self.traces_left > 0:
                                os.makedirs(os.path.join(self.run_dir, "traces"), exist_ok=True)
                                export_trace(fn, inp.args(), os.path.join(
                                    self.run_dir, "traces",
                                    f"{prob.model.name}_{prob.sharding}_T{prob.tokens}_{bname}.json.gz"))
                                self.traces_left -= 1
                    except Exception as exc:
                        reraise_if_terminated(exc)
                        base["warning"] = f"profiler pass failed: {one_line(exc)}"
                for mode, pid in modes.items():
                    row = self._row(prob, routing, bname, mode, pid, kernel_us=kus, **base)
                    try:
                        with time_limit(self.point_timeout_s):
                            args_sets = [inp.args()]
                            if not self.device.startswith("cuda"):
                                t = time_cpu(fn, args_sets, warmup_ms=self.warmup_ms,
                                             rep_ms=self.rep_ms)
                            elif mode == "graph" and backend.not_capturable:
                                raise CaptureError(backend.not_capturable)
                            elif mode == "eager":
                                t = time_eager(fn, args_sets, warmup_ms=self.warmup_ms,
                                               rep_ms=self.rep_ms)
                            else:
                                t = time_graph(fn, args_sets, warmup_ms=self.warmup_ms,
                                               rep_ms=self.rep_ms)
                        row.update(median_us=t.median_us, p10_us=t.p10_us, p90_us=t.p90_us,
                                   n=t.n, noisy=bool(t.noisy))
                        notes = [row.get("warning", ""), t.note if t.noisy else ""]
                        if mode == "graph" and kus == kus:
                            ok, warn = check_kernel_coverage(kus, t.median_us)
                            if not ok:
                                notes.append(warn)
                        row["warning"] = "; ".join(n for n in notes if n)
                    except CaptureError as exc:
                        row.update(status="unsupported", error=f"graph capture: {exc}")
                    except PointTimeout as exc:
                        row.update(status="timeout", error=str(exc))
                    except Exception as exc:
                        reraise_if_terminated(exc)
                        row.update(status=classify_exception(exc), error=one_line(exc))
                    if self.device.startswith("cuda") and row["status"] in ("failed", "oom"):
                        torch.cuda.synchronize()
                        torch.cuda.empty_cache()
                    rows.append(row)
                    if kdf is not None and row["status"] == "ok":
                        for k in kdf.to_dict("records"):
                            kernel_rows.append(dict(k, point_id=pid))
            _add_roofline(rows, prob, inp.topk_ids, self.device)
            self.store.append(rows, kernel_rows)
            counts["measured"] += len(rows)
            bar.update(len(rows))
        del inp, ref

    def _finish_compile_row(self, r, probs, routing):
        from .store import point_id
        r = dict(r)
        r.setdefault("routing", routing)
        if r.get("wrapped") and not r["mode"].endswith(":custom-op"):
            r["mode"] = f"{r['mode']}:custom-op"  # the custom-op wrapped layer is its own point
        r["point_id"] = point_id(r)
        prob = next((p for p in probs if p.tokens == r["tokens"]), probs[0])
        _add_roofline([r], prob, None, self.device)
        return r

    def _merge_resumed(self, crows: list[dict]) -> list[dict]:
        """A resumed sweep measures only the token counts a killed one left: fold its
        compile rows into the rows already stored for the same backend x variant."""
        from .compile import merge_compile_rows
        old = self.store.load_table("compile")
        if not len(old):
            return crows
        keyed = {tuple(str(r[k]) for k in COMPILE_KEY): r
                 for r in old.to_dict("records") if all(k in r for k in COMPILE_KEY)}
        return [merge_compile_rows(keyed[k], c) if (k := tuple(str(c[x]) for x in COMPILE_KEY))
                in keyed else c for c in crows]

    def _run_compile(self, group, compile_modes, done, counts, bar):
        """Compile modes of one sharding: one call per backend x variant x wrapped, over
        the token counts that wrap has not measured yet (a sweep killed between the plain
        and the custom-op pass resumes the custom-op pass only)."""
        from .compile import WRAP_BOTH, run_compile_sweep
        from .store import point_id
        todo: dict = {}  # (routing, mode, backend, wrapped) -> problems, in run order
        for m in compile_modes:
            for routing in self.routings:
                for b in self.backends:
                    for wrapped in ((False, True) if b in WRAP_BOTH else (False,)):
                        mode = f"{m}:custom-op" if wrapped else m
                        for prob in group:
                            pid = point_id(dict(prob.key(), backend=b, mode=mode,
                                                routing=routing))
                            if pid in done:
                                counts["skipped"] += 1
                                bar.update(1)
                            else:
                                todo.setdefault((routing, m, b, wrapped), []).append(prob)
        for (routing, m, b, wrapped), probs in todo.items():
            variant = m.split(":", 1)[1]
            bar.set_description(f"{probs[0].model.name} {probs[0].sharding} {b} {m}"
                                + (" custom-op" if wrapped else ""))

            def stream(r, probs=probs, routing=routing):  # each point lands at once
                self.store.append([self._finish_compile_row(r, probs, routing)], [])
            try:
                rows, crows = run_compile_sweep(
                    probs, [b], [variant], self.device, routing=routing, seed=self.seed,
                    on_row=stream, wraps=(wrapped,),
                    budget_s=self.compile_budget_s.get(b, self.compile_budget_s["*"]))
            except Exception as exc:
                reraise_if_terminated(exc)
                mode = f"{m}:custom-op" if wrapped else m
                rows = [self._row(p, routing, b, mode, None, status=classify_exception(exc),
                                  error=one_line(exc), wrapped=wrapped) for p in probs]
                crows = []
            rows = [self._finish_compile_row(r, probs, routing) for r in rows]
            self.store.append(rows, [])
            for c in crows:
                c.update({k: v for k, v in probs[0].key().items() if k != "tokens"},
                         routing=routing, mode=m)
            crows = recount_compile_rows(self._merge_resumed(crows), self.store.load_results())
            self.store.append_table("compile", crows, key=COMPILE_KEY)
            counts["measured"] += len(rows)
            bar.update(len(rows))


KILLED = "killed: no wall time or counts recorded"
# manifest keys a resumed sweep keeps from the folder's previous manifest
KEPT_ON_RESUME = ("provenance_note", "notes")


def _invocation_from(prior: dict) -> dict:
    """One `invocations` entry rebuilt from an older manifest's top-level fields."""
    env = prior.get("environment") or {}
    status = prior.get("status")
    return dict(started=prior.get("started"), finished=prior.get("finished"),
                wall_s=prior.get("wall_s_total", prior.get("wall_s")),
                status=KILLED if status == "running" else status, command=prior.get("command"),
                git_commit=env.get("git_commit"), device_name=env.get("device_name"),
                points_measured=prior.get("points_measured_this_run"),
                points_skipped=prior.get("points_skipped_already_done"),
                note="rebuilt from the manifest written before invocations were recorded; "
                     "it may cover several earlier calls")


COMPILE_KEY = ("model", "tp", "ep", "ep_rank", "dtype", "routing", "backend", "mode", "wrapped")


def recount_compile_rows(crows: list[dict], results) -> list[dict]:
    """The counts of each compile row (points, points_ok, compile_s_total, the first
    token count and its compile time, status) recomputed from the results rows of the
    same backend x variant x wrapped: the per-point rows are the record, and a sweep that
    was killed mid-variant and resumed leaves its in-flight compile row unwritten. Graph
    breaks, reasons and recompiles stay as the compile sweep counted them."""
    import pandas as pd

    from .compile import rollup_status
    if results is None or not len(results) or not crows:
        return crows
    out = []
    for c in crows:
        mode = f"{c['mode']}:custom-op" if c.get("wrapped") else c["mode"]
        sel = results[(results["mode"] == mode) & (results["backend"] == c["backend"])]
        for k in ("model", "tp", "ep", "ep_rank", "dtype", "routing"):
            if k in sel.columns and k in c:
                sel = sel[sel[k].astype(str) == str(c[k])]
        if not len(sel):
            out.append(c)
            continue
        sel = sel.sort_values("tokens")
        n_ok = int((sel["status"] == "ok").sum())
        status = rollup_status(list(sel["status"]))
        c = dict(c, points=len(sel), points_ok=n_ok, tokens_first=int(sel["tokens"].iloc[0]),
                 compile_s=float(sel["compile_s"].iloc[0]),
                 compile_s_total=float(pd.to_numeric(sel["compile_s"]).fillna(0).sum()),
                 status=status)
        out.append(c)
    return out


def refresh_compile_table(run_dir) -> int:
    """Recount every compile row of a run folder from its results (see
    recount_compile_rows); returns the number of rows rewritten."""
    from .store import RunStore
    store = RunStore(run_dir)
    table = store.load_table("compile")
    if not len(table):
        return 0
    rows = recount_compile_rows(table.to_dict("records"), store.load_results())
    store.append_table("compile", rows, key=COMPILE_KEY)
    return len(rows)


def _backend_info(name: str) -> dict:
    """What a backend says of itself here (available, why not, versions, configs)."""
    b = B.get(name)
    ok, why = b.available()
    info = dict(available=ok, reason=why, description=b.description)
    if ok:
        try:
            info.update(b.info())
        except Exception as exc:
            info["info_error"] = one_line(exc)
    return info


def _experts_hit(prob, topk_ids) -> int:
    ids = topk_ids.reshape(-1).long()
    emap = prob.expert_map(topk_ids.device)
    if emap is not None:
        ids = emap.long()[ids]
        ids = ids[ids >= 0]
    return int(torch.unique(ids).numel())


def _add_roofline(rows, prob, topk_ids, device):
    """flops, bytes, roof_us, pct_of_roof per row (ceilings measured when committed)."""
    if not device.startswith("cuda"):
        return  # no CPU roofline: the workbook's floors are for GPUs
    try:
        from . import roofline as R
    except ImportError:
        return
    try:
        dev_name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
        ceil = R.ceilings_for(dev_name)
        ids = topk_ids.cpu() if topk_ids is not None else None
        for r in rows:
            c = R.cost(prob, ids=ids, backend=r["backend"])
            roof = R.floor_us(c, ceil)
            r.update(flops=float(c.flops), bytes=float(c.bytes), roof_us=roof,
                     ceiling_source=getattr(ceil, "source", ""))
            med = r.get("median_us", float("nan"))
            r["pct_of_roof"] = 100.0 * roof / med if med == med and med > 0 else float("nan")
    except Exception as exc:  # the roofline is annotation: never lose a measurement for it
        for r in rows:
            r.setdefault("warning", "")
            r["warning"] = "; ".join(x for x in (r["warning"], f"roofline: {one_line(exc)}") if x)


class _NoBar:
    def update(self, n=1):
        pass

    def set_description(self, s):
        pass

    def close(self):
        pass


def _progress(total, enabled):
    if not enabled:
        return _NoBar()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, unit="pt", dynamic_ncols=True, smoothing=0.05)


# --- CLI -------------------------------------------------------------------------------

def configure(p):
    p.add_argument("--models", default=None,
                   help="comma-separated presets or custom:... (default: the four seed models "
                        "on GPU; qwen3-30b-a3b on CPU)")
    p.add_argument("--tp", default="8", help="tensor-parallel size(s)")
    p.add_argument("--ep", default=None, help="expert-parallel size(s), 1 = none "
                   "(default: 1,8 on GPU, 1 on CPU)")
    p.add_argument("--ep-rank", type=int, default=0, help="EP rank whose experts are measured")
    p.add_argument("--tokens", default=None,
                   help="token counts, e.g. 1,64,1024 or 1-8192 (default: 1-8192 on GPU, 1-64 on CPU)")
    p.add_argument("--backends", default=None,
                   help="comma-separated (default: every backend available here)")
    p.add_argument("--modes", default=None,
                   help="eager,graph and/or compile:<variant>[:dynamic] (default: eager,graph on "
                        "GPU, eager on CPU)")
    p.add_argument("--routing", default="uniform", help="comma-separated: uniform, balanced, "
                   "zipf:S, hot:P")
    p.add_argument("--dtype", default="bf16", choices=sorted(THRESHOLDS))
    p.add_argument("--device", choices=["cpu", "cuda"], default=None)
    p.add_argument("--data-dir", default="data/runs", help="where run folders live")
    p.add_argument("--run-id", default=None,
                   help="folder name (default: derived from device and arguments, so the same "
                        "command resumes)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-profile", action="store_true", help="skip the per-kernel profiler pass")
    p.add_argument("--traces", type=int, default=0, help="export this many Chrome traces")
    p.add_argument("--warmup-ms", type=float, default=10.0)
    p.add_argument("--rep-ms", type=float, default=50.0, help="timed repetitions, in ms")
    p.add_argument("--point-timeout", type=float, default=120.0, help="seconds per point")
    p.add_argument("--compile-budget", default=None, metavar="S[,BACKEND=S...]",
                   help="compile modes: seconds of compile allowed per backend x variant "
                        "(x wrapped) over the token grid; a compile running past it is "
                        "stopped and it and the remaining token counts become timeout rows. "
                        "BACKEND=S sets one backend's budget, e.g. 150,torch=30 (default 900)")
    p.add_argument("--no-progress", action="store_true")


def run(args) -> int:
    device = args.device or default_device()
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda but no GPU is visible to torch")
    gpu = device == "cuda"
    models = split_models(args.models) if args.models else (list(SEED_MODELS) if gpu else ["qwen3-30b-a3b"])
    for m in models:
        parse_model(m)
    tokens = parse_tokens(args.tokens or ("1-8192" if gpu else "1-64"))
    routings = _list(args.routing)
    for r in routings:
        parse_routing(r)
    modes = parse_modes(args.modes or ("eager,graph" if gpu else "eager"))
    if args.backends:
        backends = B.parse_names(args.backends)
    else:
        backends = [b.name for b in B.all_backends() if b.available()[0]]
    budget = parse_budget(args.compile_budget) if args.compile_budget else None
    tps = parse_int_list(args.tp)
    eps = parse_int_list(args.ep or ("1,8" if gpu else "1"))
    # validate every sharding before measuring anything
    for m in models:
        for tp in tps:
            for ep in eps:
                make_problem(m, 1, args.dtype, tp, ep, args.ep_rank if ep > 1 else 0)
    config = dict(models=models, tp=tps, ep=eps, ep_rank=args.ep_rank, tokens=tokens,
                  backends=backends, modes=modes, routing=routings, dtype=args.dtype,
                  seed=args.seed)
    dev_name = torch.cuda.get_device_name() if gpu else "cpu"
    run_id = args.run_id or default_run_id(config, dev_name)
    run_dir = os.path.join(args.data_dir, run_id)
    sweep = Sweep(models=models, tps=tps, eps=eps, ep_rank=args.ep_rank, tokens=tokens,
                  backends=backends, modes=modes, routings=routings, dtype=args.dtype,
                  device=device, run_dir=run_dir, seed=args.seed, profile=not args.no_profile,
                  traces=args.traces, warmup_ms=args.warmup_ms, rep_ms=args.rep_ms,
                  point_timeout_s=args.point_timeout, progress=not args.no_progress,
                  compile_budget_s=budget,
                  command="moe-lab " + " ".join(getattr(args, "_argv", sys.argv[1:])))
    print(f"run {run_dir}: {sweep.total_points()} points ({device}: {dev_name})", flush=True)
    counts = sweep.run()
    res = sweep.store.load_results()
    summary = res["status"].value_counts().to_dict() if len(res) else {}
    print(f"done: {counts['measured']} measured now, {counts['skipped']} already there; "
          f"status counts {summary}; {run_dir}")
    return 0
