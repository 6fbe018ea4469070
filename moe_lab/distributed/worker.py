"""One rank of a distributed sweep: `python -m moe_lab.distributed.worker SPEC.json`,
started by `moe-lab sweep --nproc N` or by torchrun (environment contract: RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT).

Every rank draws the same inputs (a pure function of the point and the seed), holds its
real shard, and for each point x variant x backend goes through three phases, each ended
by a status exchange through the store (moe_lab.distributed.control):

    setup   available / supports / prepare on this rank (no collective)
    check   the layer once, end to end; this rank's output against the single-process
            reference of the full layer (every rank computes it from the full weights)
    time    per mode: this rank's expert work alone (moe_lab.measuring.timing: expert_us), then
            barrier-synchronised (timed.py) the expert work (expert_sync_us), the
            collective alone and the layer end to end; predicted_us = the slowest rank's
            expert_sync_us + the slowest rank's collective

A rank that raises in a phase reports it; then every rank's row of the point carries the
reason (`rank R: ...`) and the sweep goes on (with a fresh process group when the failure
may have left a collective half done). Rank 0 writes every rank's rows."""
from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import time
import warnings

import torch
import torch.distributed as dist

from ..backends import Weights
from ..measuring.correctness import THRESHOLDS, classify_exception, make_inputs, one_line, point_seed, reference
from ..core.environment import capture_environment, device_name
from ..core.errors import EXIT_SIGINT, EXIT_SIGTERM, Terminated, terminating_handled
from ..storage.invocations import begin_invocation, end_invocation
from ..core.problems import DTYPES, parse_model
from ..storage.store import RunStore, point_id
from ..measuring.points import Point, finish, measure_point, new_row
from ..measuring.timing import summarize
from . import DIST_TIMEOUT_S, layers, shards
from .control import Control, RankLost, open_store
from .timed import across_ranks, sync_loop

ORDER = ("ok", "incorrect", "unsupported", "unavailable", "timeout", "oom", "failed")


def fault(spec: dict, rank: int, phase: str, tokens: int | None = None):
    """Testing hook (spec["fault"] = "RANK:PHASE[:TOKENS]"): that rank raises in that
    phase (setup, check, time; at that token count only, if given), or exits without a
    word when the phase is "exit" (at its time phase); how the tests make a rank fail."""
    want = (spec.get("fault") or "").split(":")
    if len(want) < 2 or int(want[0]) != rank or (len(want) > 2 and int(want[2]) != tokens):
        return
    if want[1] == phase:
        raise RuntimeError(f"injected fault on rank {rank} in {phase}")
    if want[1] == "exit" and phase == "time":
        os._exit(3)


def _median(xs):
    return summarize(xs).median_us


def predict_us(expert_us_per_rank, collective_us_per_rank) -> float:
    """The layer's predicted time: every rank waits for the slowest, so the slowest rank's
    expert time plus the slowest rank's collective (never a mean over ranks)."""
    return max(expert_us_per_rank) + max(collective_us_per_rank)


class Worker:
    def __init__(self, spec: dict, rank: int, world: int, local_rank: int):
        self.spec, self.rank, self.world = spec, rank, world
        want = spec.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
        if want == "cuda":
            torch.cuda.set_device(local_rank)
            self.device = f"cuda:{local_rank}"
        else:
            self.device = "cpu"
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
        self.cuda = self.device.startswith("cuda")
        self.pg_backend = "nccl" if self.cuda else "gloo"
        self.timeout_s = float(spec.get("timeout_s", DIST_TIMEOUT_S))
        store = open_store(rank, world, self.timeout_s)
        dist.init_process_group(self.pg_backend, store=store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=self.timeout_s))
        self.group = None  # the default group until a failure calls for a fresh one
        # a rank reports after its collective timed out: wait longer than that
        self.ctl = Control(store, rank, world, 2 * self.timeout_s + 5)
        self.dev_name = device_name(self.device)
        self.env = capture_environment()

    # --- helpers ---------------------------------------------------------------------
    def fresh_group(self):
        """A new process group: after a failure a collective may be half done on some
        ranks, so the old group's sequence can no longer be trusted. Not with a rank lost
        (its rows are written; the sweep ends: RankLost)."""
        if self.lost:
            raise RankLost(f"rank(s) {self.lost} stopped reporting")
        self.group = dist.new_group(backend=self.pg_backend,
                                    timeout=datetime.timedelta(seconds=self.timeout_s))

    def agree(self, tag: str, status: str, error: str = "", **facts) -> list[dict]:
        out = self.ctl.exchange(tag, dict(status=status, error=error, **facts))
        lost = [r for r, p in enumerate(out) if p.get("lost")]
        if lost:
            self.lost = lost
        return out

    @staticmethod
    def verdict(states: list[dict]) -> tuple[str, str]:
        """The point's status: the worst rank's, with every failing rank's reason."""
        bad = [(r, s) for r, s in enumerate(states) if s["status"] != "ok"]
        if not bad:
            return "ok", ""
        status = max((s["status"] for _, s in bad), key=ORDER.index)
        return status, "; ".join(f"rank {r}: {s['error']}" for r, s in bad)[:600]

    def gpu_facts(self) -> dict:
        """Which GPU this rank is (the manifest names every one)."""
        if not self.cuda:
            return {}
        try:
            p = torch.cuda.get_device_properties(self.device)
            return dict(gpu_uuid=str(getattr(p, "uuid", "")), pci_bus_id=getattr(p, "pci_bus_id", None),
                        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
        except Exception as exc:
            return dict(gpu_facts_error=one_line(exc))

    # --- the loop --------------------------------------------------------------------
    def run(self) -> int:
        spec, t0 = self.spec, time.time()
        self.lost = []
        self.store = RunStore(spec["run_dir"]) if self.rank == 0 else None
        hosts = self.ctl.exchange("hello", dict(device=self.dev_name, host=socket.gethostname(),
                                                torch_device=self.device, **self.gpu_facts()))
        if self.rank == 0:
            manifest = dict(
                run_id=os.path.basename(os.path.abspath(spec["run_dir"])),
                command=spec.get("command"), started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                environment=self.env, config={k: v for k, v in spec.items()
                                              if k not in ("run_dir", "command", "fault")},
                distributed=dict(world_size=self.world, backend=self.pg_backend,
                                 ranks=[dict(rank=r, **h) for r, h in enumerate(hosts)]),
                inputs="every rank draws the same routing and activations (correctness."
                       "point_seed); expert e's weights from a generator seeded by (seed, e) "
                       "(distributed.shards): each rank's shard is a slice of one full layer",
                where=f"measured by {self.world} processes over {self.pg_backend} on "
                      + ", ".join(sorted({h['device'] for h in hosts})))
            self.invocations = begin_invocation(self.store, manifest, t0)
            done = sorted(self.store.done_ids())
        else:
            done = None
        self.done = set(self.ctl.exchange("done", done)[0])
        self.devices = [h["device"] for h in hosts]
        counts = dict(measured=0, skipped=0)
        status = "interrupted"
        try:
            for model in spec["models"]:
                self.run_model(parse_model(model), counts)
            status = "complete"
        except RankLost as exc:
            status = f"failed: {exc}"
        except (Terminated, KeyboardInterrupt) as exc:  # every rank was told: no goodbyes
            terminating_handled()  # no re-signal raises in the bookkeeping below
            status = "interrupted: " + ("SIGTERM" if isinstance(exc, Terminated)
                                        else "SIGINT (Ctrl-C)")
            self.lost = list(range(self.world))
            raise
        except BaseException as exc:
            status = f"failed: {one_line(exc)}"
            raise
        finally:
            if self.rank == 0:
                end_invocation(self.store, self.invocations, t0, status, counts["measured"],
                               counts["skipped"])
            if not self.lost:
                self.ctl.exchange("bye", None)  # rank 0 hosts the store: leave together
            try:
                dist.destroy_process_group()
            except Exception:
                pass
        return 0 if status == "complete" else 1

    def points(self, model):
        s = self.spec
        for tokens in s["tokens"]:
            for routing in s["routings"]:
                for variant in s["variants"]:
                    for b in s["backends"]:
                        for config in self.configs_of(b):
                            yield tokens, routing, variant, b, config

    def configs_of(self, backend: str) -> list[str]:
        """The configurations a backend is measured with (--config, carried in the spec):
        every one asked for when it is tunable, else its own, as the one-process sweep."""
        from ..backends import backend_class
        return self.spec.get("configs", ["default"]) if backend_class(backend).tunable else ["default"]

    def row_key(self, model, tokens, routing, variant, backend, mode, rank, config="default") -> dict:
        prob = shards.rank_problem(model, tokens, self.spec["dtype"], variant, self.world, rank)
        return dict(prob.key(), backend=backend, mode=mode, routing=routing, config=config,
                    parallel=variant, world_size=self.world, rank=rank,
                    sharding=prob.sharding)

    def todo_modes(self, model, tokens, routing, variant, b, config="default") -> list[str]:
        return [m for m in self.spec["modes"]
                if any(point_id(self.row_key(model, tokens, routing, variant, b, m, r, config))
                       not in self.done for r in range(self.world))]

    def run_model(self, model, counts):
        s, dt = self.spec, DTYPES[self.spec["dtype"]]
        work = [(p, self.todo_modes(model, *p)) for p in self.points(model)]
        counts["skipped"] += sum(len(s["modes"]) - len(m) for _, m in work) * self.world
        work = [(p, m) for p, m in work if m]
        if not work:
            return
        full = None
        try:  # this rank draws its EP shard; the full layer is every rank's shard gathered
            w1, w2 = shards.ep_shard(model, dt, self.device, s["seed"], self.world, self.rank)
            fault(s, self.rank, "weights")
            state = dict(status="ok", error="")
        except Exception as exc:
            state = dict(status=classify_exception(exc), error=f"weights: {one_line(exc)}")
        states = self.agree("weights", **state)
        if self.verdict(states)[0] == "ok":
            try:
                full = Weights(self.gather(w1), self.gather(w2), None)
                del w1, w2
            except Exception as exc:
                states = self.agree("gather", classify_exception(exc), f"gather: {one_line(exc)}")
            else:
                states = self.agree("gather", "ok")
            if self.verdict(states)[0] != "ok" and not self.lost:
                self.fresh_group()
        status = self.verdict(states)[0]
        tp_w = None
        for (tokens, routing, variant, b, config), modes in work:
            if status != "ok":  # this model's weights: every point a row with the reason
                self.write(model, tokens, routing, variant, b, modes, states, {}, config)
                counts["measured"] += len(modes) * self.world
                continue
            if variant == "tp-allreduce" and tp_w is None:
                tp_w = shards.rank_weights(variant, None, full, self.world, self.rank,
                                           self.device)
            self.run_point(model, full, tp_w, tokens, routing, variant, b, modes, config)
            counts["measured"] += len(modes) * self.world
            if self.lost:
                raise RankLost(f"rank(s) {self.lost} stopped reporting")

    def reference(self, fprob, full, inp, key):
        """The single-process reference of the full layer (fp64 on the CPU, fp32 on a
        GPU), once per token count and routing."""
        if getattr(self, "_ref", (None,))[0] != key:
            self._ref = (None, None)
            self._ref = (key, reference(fprob, full, inp))
        return self._ref[1]

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """Every rank's shard of a weight, concatenated in rank order."""
        t = t.contiguous()
        out = t.new_empty((self.world * t.shape[0], *t.shape[1:]))  # the full layer once
        with warnings.catch_warnings():  # deprecated for all_gather_single in torch 2.13,
            warnings.simplefilter("ignore", FutureWarning)  # which torch 2.11 lacks
            dist.all_gather_into_tensor(out, t, group=self.group)
        return out

    # --- one point -------------------------------------------------------------------
    def run_point(self, model, full, tp_w, tokens, routing, variant, bname, modes,
                  config="default"):
        """One point through the one measuring function (points.measure_point): set up,
        checked and timed per mode, every step agreed by every rank."""
        s, r = self.spec, self.rank
        prob = shards.rank_problem(model, tokens, s["dtype"], variant, self.world, r)
        seed = point_seed(s["seed"], tokens, routing)
        fprob = shards.full_problem(model, tokens, s["dtype"])
        inp = make_inputs(fprob, self.device, seed, routing, ensure_local=False)
        facts = dict(inputs_digest=inp.digest(), seed=seed, threshold=THRESHOLDS[s["dtype"]])
        bprob = layers.k1_problem(prob) if variant == "ep-alltoall" else prob
        got = {}  # what the steps leave: every rank's setup and check states, the layer
        where = (model, tokens, routing, variant, bname)

        def build(be, kw):  # setup: this rank alone, its shard of the layer's weights
            w = tp_w if variant == "tp-allreduce" else shards.rank_weights(
                variant, prob, full, self.world, r, self.device)
            fn = be.prepare(bprob, w, **kw)
            fault(s, r, "setup", tokens)
            return fn

        def agree(step, st, why, c):  # no rank checks (collectives) or times alone
            if step == "setup":
                got["setup"] = self.agree(step, st, why)
                return self.verdict(got["setup"])
            got["check"] = self.agree("check", st, why, max_rel_err=c.max_rel_err,
                                      **got.get("mine", {}))
            facts["max_rel_err"] = max((x.get("max_rel_err", float("nan")) for x in got["check"]),
                                       key=lambda v: -1 if v != v else v)
            if config != "default":
                facts.update(c.facts)  # the configuration's file and launch, as measured
            return self.verdict(got["check"])

        def output(fn):  # the layer once, end to end, against the single-process reference
            lay = got["lay"] = layers.build(variant, prob, fn, inp, self.world, r, self.group)
            out = lay.layer()
            if self.cuda:
                torch.cuda.synchronize()
            ref = self.reference(fprob, full, inp, (model.name, tokens, routing))[lay.rows.to(inp.x.device)]
            fault(s, r, "check", tokens)
            got["mine"] = dict(pairs=lay.pairs, experts_hit=lay.experts_hit,
                               sent_bytes=lay.sent_bytes, tokens_local=len(lay.rows))
            return out, ref

        def then(c, mode, t):  # expert_us is the timer's; then the parts and the whole in
            # one regime (barrier, then the call): the prediction adds the first two
            fault(s, r, "time", tokens)
            lay = got["lay"]
            comp = sync_loop(lay.compute, self.device, mode, s["reps"], 3, self.group)
            coll = sync_loop(lay.collective, self.device, mode, s["reps"], 3, self.group)
            e2e = sync_loop(lay.layer, self.device, mode, s["reps"], 3, self.group)
            return dict(expert_us=t.median_us, expert_p10_us=t.p10_us, expert_p90_us=t.p90_us,
                        expert_n=t.n, comp=comp, coll=coll, e2e=e2e)

        def each(t):  # every rank's outcome of the mode, written; a broken group renewed
            states = self.agree(f"time-{t.mode}", t.status, t.error, **(t.extra or {}))
            merged = [dict(c, **x) for c, x in zip(got["check"], states)]
            self.write(*where, [t.mode], merged, facts, config)
            if self.verdict(states)[0] not in ("ok", "unsupported"):
                self.fresh_group()
        c = measure_point(Point(bprob, bname, config=config, routing=routing), None, self.device,
                          modes=modes, build=build, output=output, agree=agree, then=then,
                          each=each, timed=lambda c: (got["lay"].compute, [()]),
                          refuse=self.refuse_mode,
                          timer_kw=dict(warmup_ms=s["warmup_ms"], rep_ms=s["rep_ms"],
                                        clock="wall"))  # a rank waits on the others
        if self.verdict(got["setup"])[0] != "ok":
            return self.write(*where, modes, got["setup"], facts, config)
        if not c.ok:
            self.write(*where, modes, got["check"], facts, config)
            if c.status != "incorrect":
                self.fresh_group()

    def refuse_mode(self, c, mode) -> str:
        """Why a rank cannot time `mode` here: graphs of collectives need a GPU."""
        return "graph mode needs a GPU (CUDA/HIP graphs)" if mode == "graph" and not self.cuda else ""

    # --- rows ------------------------------------------------------------------------
    def write(self, model, tokens, routing, variant, bname, modes, states, facts, config="default"):
        """Rank 0 writes one row per rank and mode; every row of the point carries the
        point's status and every failing rank's reason."""
        if self.rank != 0:
            return
        status, error = self.verdict(states)
        rows, samples = [], {}
        timed = status == "ok" and all("e2e" in x for x in states)
        if timed:
            layer = across_ranks([x["e2e"] for x in states])
            timing = summarize(layer)  # the one percentile rule (moe_lab.measuring.timing)
            exp = [_median(x["comp"]) for x in states]
            coll = [_median(x["coll"]) for x in states]
            pairs = [x["pairs"] for x in states]
            point = dict(layer_us=timing.median_us, predicted_us=predict_us(exp, coll),
                         imbalance=max(pairs) / (sum(pairs) / len(pairs)) if sum(pairs) else 1.0,
                         imbalance_time=max(exp) / (sum(exp) / len(exp)))
        for mode in modes:
            for r, x in enumerate(states):
                row = new_row(self.row_key(model, tokens, routing, variant, bname, mode, r, config),
                              git_commit=self.env.get("git_commit"), device=self.devices[r],
                              status=status, error=error, dist_backend=self.pg_backend, **facts)
                for k in ("pairs", "experts_hit", "sent_bytes", "tokens_local"):
                    if k in x:
                        row[k] = x[k]
                if timed:
                    row.update(point, expert_us=x["expert_us"], expert_p10_us=x["expert_p10_us"],
                               expert_p90_us=x["expert_p90_us"], collective_us=_median(x["coll"]),
                               expert_sync_us=_median(x["comp"]),
                               rank_layer_us=_median(x["e2e"]))
                finish(row, timing=timing if timed else None)
                if timed:
                    samples[row["point_id"]] = x["e2e"]
                rows.append(row)
        self.store.append_samples(samples)
        self.store.append(rows, [])


def die_with_parent(parent: int) -> None:
    """This rank dies when the launcher that spawned it does (a SIGKILLed `sweep --nproc`
    left both ranks measuring and writing its run): the kernel's parent-death signal
    (Linux prctl PR_SET_PDEATHSIG, SIGKILL), and a watchdog thread that sees the parent
    gone (any POSIX; also covers a parent that died before prctl took effect)."""
    import signal
    import threading
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)  # no bookkeeping: a resume says killed
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=watch, daemon=True, name="moe-lab-parent-watch").start()


def note_signal() -> None:
    """At a SIGTERM, before any connection is closed: the launcher's note (launch._died)
    saying so, read before it shows a peer's view of this rank's going."""
    from . import SIGNAL_NOTE_ENV
    path = os.environ.get(SIGNAL_NOTE_ENV)
    if path:
        try:
            with open(path, "w") as f:
                f.write("SIGTERM")
        except OSError:
            pass


def main(argv=None) -> int:
    from . import PARENT_ENV
    from ..core.errors import terminate_gracefully
    argv = sys.argv[1:] if argv is None else argv
    if os.environ.get(PARENT_ENV):
        die_with_parent(int(os.environ[PARENT_ENV]))
    with open(argv[0]) as f:
        spec = json.load(f)
    if os.environ.get(PARENT_ENV):  # this rank's own copy (launch.spawn): read, so removed
        try:
            os.unlink(argv[0])
        except OSError:
            pass
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    try:
        with terminate_gracefully(note_signal):  # SIGTERM: rank 0 closes its invocation
            w = Worker(spec, rank, world, int(os.environ.get("LOCAL_RANK", rank)))
            return w.run()
    except Terminated:
        return EXIT_SIGTERM
    except KeyboardInterrupt:
        return EXIT_SIGINT


if __name__ == "__main__":
    sys.exit(main())
