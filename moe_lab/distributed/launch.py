"""Starting distributed sweeps, and spreading a sweep over the GPUs of a host.

    moe-lab sweep --nproc N ...           spawns N ranks (python -m moe_lab.distributed.worker)
                                          with the standard environment contract
    torchrun --nproc-per-node N -m moe_lab sweep ...
                                          the same, ranks started by torchrun (WORLD_SIZE
                                          set: --nproc may be left out, torchrun would
                                          read it as its own --nproc-per-node)
    moe-lab sweep --gpus all ...          one part of the sweep per local GPU (--shard i/n,
                                          CUDA_VISIBLE_DEVICES=i), then the parts merged
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..core.errors import EXIT_SIGTERM, Terminated, UsageError
from ..storage.vocabulary import VARIANTS
from . import DIST_TIMEOUT_S, PARENT_ENV, SIGNAL_NOTE_ENV

FAULT_ENV = "MOE_LAB_DIST_FAULT"  # testing hook: "RANK:PHASE" (worker.fault)
PKG_ROOT = str(Path(__file__).resolve().parents[2])
DIST_REPS = 20
DIST_FLAGS = (("parallel", "--parallel"), ("dist_reps", "--dist-reps"),
              ("dist_timeout", "--dist-timeout"))


def add_arguments(p):
    g = p.add_argument_group("expert parallelism and spreading (moe_lab.distributed)")
    g.add_argument("--nproc", type=int, default=None, metavar="N",
                   help="measure every point on N ranks with torch.distributed (NCCL on GPUs, "
                        "gloo on the CPU): each rank holds its real TP or EP shard; spawned "
                        "here (under torchrun: its ranks, WORLD_SIZE of them)")
    g.add_argument("--parallel", default=None,
                   help="with --nproc: the variants, from " + ", ".join(VARIANTS)
                        + " (default: all)")
    g.add_argument("--dist-reps", type=int, default=None,
                   help=f"with --nproc: timed calls of the collective and of the layer "
                        f"(default: {DIST_REPS})")
    g.add_argument("--dist-timeout", type=float, default=None,
                   help=f"with --nproc: seconds a collective may take before it fails "
                        f"(default: {DIST_TIMEOUT_S:g})")
    g.add_argument("--gpus", default=None, metavar="all|N",
                   help="spread the sweep over the local GPUs: part i of n on GPU i "
                        "(--shard i/n), then the parts merged into one run")


def parse_variants(text: str) -> list[str]:
    out = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in out if v not in VARIANTS]
    if bad or not out:
        raise UsageError(f"--parallel: {', '.join(bad) or text!r} unknown; choose from "
                         f"{', '.join(VARIANTS)}")
    return out


def refuse_without_nproc(args) -> None:
    """--parallel, --dist-reps, --dist-timeout shape a distributed sweep only: given
    without --nproc (and not under a launcher) they would be silently ignored."""
    given = [flag for key, flag in DIST_FLAGS if getattr(args, key, None) is not None]
    if given:
        raise UsageError(f"{', '.join(given)} without --nproc: {'they shape' if len(given) > 1 else 'it shapes'} "
                         "a distributed sweep only; add --nproc N (or leave "
                         f"{'them' if len(given) > 1 else 'it'} out)")


def under_launcher() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SPEC_PREFIX = "moe-lab-spec-"  # a rank's spec file (it removes it once read)
GRACE_S = 10.0  # after SIGTERM or Ctrl-C, how long the ranks get to close their rows


def spawn(spec: dict, nproc: int, timeout_s: float) -> int:
    """Start `nproc` ranks on this host and wait for them. A rank that exits with an error
    while others keep running gets them stopped once they had time to notice (a rank that
    lost its peers reports within 2 x the collective timeout). The ranks die with this
    process (worker.die_with_parent: a SIGKILL here leaves none measuring or writing);
    SIGTERM or Ctrl-C here stops them (SIGTERM, then SIGKILL after GRACE_S) and leaves the
    run's manifest saying so, never "running"."""
    port = free_port()
    procs, files, relay = [], [], _Relay()
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")

    def on_term(signum, frame):  # `timeout -s TERM` on the launcher: stop the ranks too
        raise Terminated("terminated by SIGTERM")
    old = signal.signal(signal.SIGTERM, on_term)
    try:
        for r in range(nproc):  # one spec file per rank: each removes its own once read
            with tempfile.NamedTemporaryFile("w", prefix=SPEC_PREFIX, suffix=".json",
                                             delete=False) as f:
                json.dump(spec, f)
            note = f.name[:-len(".json")] + ".signal"  # the rank's word of a SIGTERM
            files += [f.name, note]
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                       WORLD_SIZE=str(nproc), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(nproc),
                       PYTHONPATH=os.pathsep.join(p for p in (PKG_ROOT, os.environ.get("PYTHONPATH"))
                                                  if p), **{PARENT_ENV: str(os.getpid()),
                                                            SIGNAL_NOTE_ENV: note})
            procs.append(subprocess.Popen([sys.executable, "-m", "moe_lab.distributed.worker",
                                           f.name], env=env, stderr=subprocess.PIPE))
            procs[-1].note = note
            relay.add(procs[-1])
        first_fail = None
        while any(p.poll() is None for p in procs):
            looked = time.monotonic()  # lines read before this look may be shown (_Relay)
            dead = _died(procs)
            if dead is not None:  # killed from outside: its peers only wait for it, stop them
                _stop(procs)
                break
            relay.show(before=looked)
            if first_fail is None and any(p.poll() not in (None, 0) for p in procs):
                first_fail = time.time()
            if first_fail is not None and time.time() - first_fail > 3 * timeout_s + 30:
                for p in procs:
                    if p.poll() is None:
                        p.terminate()
            time.sleep(0.2)
    except BaseException as exc:
        sigint = isinstance(exc, KeyboardInterrupt)
        _stop(procs, signal.SIGINT if sigint else signal.SIGTERM)  # the ranks hear the same
        _close_invocation(spec["run_dir"], started, "interrupted: SIGTERM" if isinstance(
            exc, Terminated) else "interrupted: SIGINT (Ctrl-C)" if sigint
            else f"failed: launcher: {type(exc).__name__}")
        raise
    finally:
        signal.signal(signal.SIGTERM, old)
        dead = _died(procs)  # before the notes go
        for name in files:
            with contextlib.suppress(OSError):
                os.unlink(name)
        relay.close(drop=dead is not None)  # a death: the peers' backtraces go
    if dead is not None:
        rank, sig = dead
        status = f"failed: rank {rank} was killed by {sig}"
        _close_invocation(spec["run_dir"], started, status, force=True)
        print(f"moe-lab: error: rank {rank} of {nproc} was killed by {sig}; the other ranks "
              "were stopped, what was measured is saved; rerun the same command to resume",
              file=sys.stderr, flush=True)
        return 1
    codes = [p.returncode for p in procs]
    return 0 if all(c == 0 for c in codes) else 1


def _died(procs) -> tuple[int, str] | None:
    """(rank, signal name) of the first rank killed by a signal this launcher did not send,
    None when none was; kept on the rank once found. First a rank's note of a SIGTERM
    (worker.note_signal): written before it closes anything, so before a peer can print
    about its going or die of it, however long it then takes to close its run and exit
    (was: read from the exit codes alone; on a busy machine a peer's backtrace came out,
    or a peer was blamed, while the signalled rank was still closing). Then the exit
    codes: a signal (SIGKILL, a crash) or the rank's own SIGTERM handler."""
    for r, p in enumerate(procs):
        if getattr(p, "killed_by", None):
            return r, p.killed_by
    for r, p in enumerate(procs):
        if not getattr(p, "stopped_here", False) and os.path.exists(getattr(p, "note", "")):
            p.killed_by = "SIGTERM"
            return r, p.killed_by
    for r, p in enumerate(procs):
        code = p.poll()
        if code is None or getattr(p, "stopped_here", False) or not (
                code == EXIT_SIGTERM or code < 0):
            continue
        try:
            p.killed_by = "SIGTERM" if code == EXIT_SIGTERM else signal.Signals(-code).name
        except ValueError:
            p.killed_by = f"signal {-code}"
        return r, p.killed_by
    return None


HOLD_S = 2.0  # a rank's stderr line is shown this long after it came (see _Relay)


class _Relay:
    """The ranks' stderr, shown on ours HOLD_S late: when a rank is killed, what its peers
    print next is their view of the lost peer (a C++ backtrace each, sometimes before the
    dead rank's exit is seen), and it is dropped for the launcher's one line. Only lines
    read before the launcher last looked for a dead rank are shown: a peer's line caused
    by a death came after it, so after what that look sees (an exit, a note)."""

    def __init__(self):
        import collections
        import threading
        self.lines, self.lock, self.threads = collections.deque(), threading.Lock(), []

    def add(self, proc) -> None:
        import threading

        def run():
            for line in iter(proc.stderr.readline, b""):
                with self.lock:
                    self.lines.append((time.monotonic(), line))
            proc.stderr.close()
        t = threading.Thread(target=run, daemon=True, name="moe-lab-rank-stderr")
        t.start()
        self.threads.append(t)

    def show(self, older_than: float = HOLD_S, drop: bool = False,
             before: float = float("inf")) -> None:
        with self.lock:
            upto = min(time.monotonic() - older_than, before)
            while self.lines and (drop or self.lines[0][0] <= upto):
                _, line = self.lines.popleft()
                if not drop:
                    if hasattr(sys.stderr, "buffer"):
                        sys.stderr.buffer.write(line)
                    else:
                        sys.stderr.write(line.decode(errors="replace"))
            sys.stderr.flush()

    def close(self, drop: bool) -> None:
        for t in self.threads:
            t.join(timeout=5)
        self.show(0.0, drop)


def _stop(procs, sig=signal.SIGTERM) -> None:
    """`sig` (SIGTERM; SIGINT for a Ctrl-C here) to every rank still running (rank 0 closes
    its invocation) but one already stopping at its own SIGTERM, SIGKILL to any left after
    GRACE_S (one blocked in a collective with a peer that is gone)."""
    for p in procs:
        if p.poll() is None and not getattr(p, "killed_by", None):
            p.stopped_here = True
            p.send_signal(sig)
    deadline = time.time() + GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _close_invocation(run_dir: str, started: str, status: str, force: bool = False) -> None:
    """The ranks are gone: an invocation of this launch that rank 0 could not close (it was
    killed mid-collective) is closed here with `status`; `force`: one rank 0 closed too
    (it only saw its peers stopped: `status` says why)."""
    from ..storage.store import RunStore
    from ..core.errors import CorruptFile
    store = RunStore(run_dir, create=False)
    try:
        man = store.read_manifest()
    except CorruptFile:
        return
    inv = (man.get("invocations") or [None])[-1]
    if not isinstance(inv, dict) or str(inv.get("started", "")) < started or (
            not force and (man.get("status") != "running" or inv.get("status") != "running")):
        return
    finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    inv.update(status=status, finished=finished, note="closed by the launcher: its ranks "
               "were stopped before rank 0 could close it")
    store.update_manifest(status=status, finished=finished, invocations=man["invocations"])


def run_nproc(args, device: str, models, tokens, routings, modes, backends) -> int:
    """`sweep --nproc N`: validate every shard, name the run, start the ranks."""
    from ..core.environment import device_name
    from .shards import rank_problem
    from ..core.problems import parse_model
    from ..core.problems import FP8_SCHEMES
    if not args.nproc:  # under torchrun (whose own --nproc-per-node swallows --nproc)
        args.nproc = int(os.environ["WORLD_SIZE"])
    variants = parse_variants(args.parallel if args.parallel is not None else ",".join(VARIANTS))
    args.dist_reps = DIST_REPS if args.dist_reps is None else args.dist_reps
    args.dist_timeout = DIST_TIMEOUT_S if args.dist_timeout is None else args.dist_timeout
    if args.dtype in FP8_SCHEMES:
        raise UsageError(f"--nproc with --dtype {args.dtype}: the fp8 schemes are not sharded "
                         "here yet; use bf16, fp16 or fp32")
    if args.gpus:
        raise UsageError("--nproc and --gpus: give one")
    from ..core.validate import count, positive
    count(args.dist_reps, "--dist-reps", 1)
    positive(args.dist_timeout, "--dist-timeout", "seconds")
    for m in models:
        for v in variants:
            for r in range(args.nproc):
                rank_problem(parse_model(m), 1, args.dtype, v, args.nproc, r)
    spec = dict(models=models, tokens=tokens, routings=routings, backends=backends,
                modes=[m.name for m in modes], variants=variants, dtype=args.dtype,
                seed=args.seed, nproc=args.nproc, device=device, reps=args.dist_reps,
                warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, timeout_s=args.dist_timeout)
    from ..storage.configs import validate_config_arg
    configs = validate_config_arg(getattr(args, "config", None) or "default")
    if configs != ["default"]:  # carried to the ranks (was dropped: default measured)
        spec["configs"] = configs  # a default run keeps its spec, so its id, as before
    dev = device_name(device) if device == "cpu" else "gpu"
    if device == "cuda":
        import torch
        dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "cuda"
    slug = "-".join("".join(c if c.isalnum() else " " for c in f"{dev} x{args.nproc}".lower()).split())
    digest = hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]
    run_id = args.run_id or f"{slug}-{digest}"  # the same command resumes the same run
    spec.update(run_dir=os.path.join(args.data_dir, run_id),
                command="moe-lab " + " ".join(getattr(args, "_argv", sys.argv[1:])))
    return run_distributed(args, spec)


def run_distributed(args, spec: dict) -> int:
    """`sweep --nproc N`: every rank measures the grid; rank 0 writes the run."""
    n = args.nproc
    if n < 1:
        raise UsageError("--nproc must be >= 1")
    if under_launcher():
        world = int(os.environ["WORLD_SIZE"])
        if world != n:
            raise UsageError(f"--nproc {n} but the launcher started {world} ranks")
        from .worker import Worker
        rank = int(os.environ["RANK"])
        return Worker(spec, rank, world, int(os.environ.get("LOCAL_RANK", rank))).run()
    if spec["device"] == "cuda":
        import torch
        if torch.cuda.device_count() < n:
            raise UsageError(f"--nproc {n} needs {n} GPUs; {torch.cuda.device_count()} visible")
    if os.environ.get(FAULT_ENV):
        spec = dict(spec, fault=os.environ[FAULT_ENV])
    from ..core.errors import RunLocked
    from ..storage.runlock import busy, run_lock
    who = busy(spec["run_dir"])
    if who:  # another writer: one line, before anything is printed or written
        raise RunLocked(who)
    print(f"run {spec['run_dir']}: {n} ranks ({spec['device']}), variants "
          f"{', '.join(spec['variants'])}", flush=True)
    with run_lock(spec["run_dir"], spec.get("command") or "moe-lab sweep --nproc"):
        rc = spawn(spec, n, spec["timeout_s"])  # the ranks die with this holder
    from ..storage.store import open_run
    res = open_run(spec["run_dir"]).results if os.path.exists(
        os.path.join(spec["run_dir"], "results.parquet")) else None
    counts = res["status"].value_counts().to_dict() if res is not None else {}
    print(f"done (exit {rc}): status counts {counts}; {spec['run_dir']}")
    return rc


# --- one sweep spread over the GPUs of a host ------------------------------------------

def gpu_count(text: str) -> int:
    import torch
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if have == 0:
        raise UsageError("--gpus: no GPU is visible to torch on this machine; run one part "
                         "with --shard I/N instead")
    if text == "all":
        return have
    try:
        n = int(text)
    except ValueError:
        raise UsageError(f"--gpus {text!r}: give all or a number") from None
    if not 1 <= n <= have:
        raise UsageError(f"--gpus {n}: {have} GPU(s) visible")
    return n


def _without(argv: list[str], flags: tuple[str, ...]) -> list[str]:
    """argv without `--flag value` / `--flag=value` for the given flags."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in flags:
            skip = True
            continue
        if any(a.startswith(f + "=") for f in flags):
            continue
        out.append(a)
    return out


def run_spread(args, run_dir: str) -> int:
    """One part per GPU (CUDA_VISIBLE_DEVICES=i, --shard i/n), each its own resumable
    folder under <data-dir>/.parts/<run id>/, then merged into `run_dir` (replacing an
    earlier merge). The merged manifest records the spread's wall time."""
    n = gpu_count(args.gpus)
    if args.shard:
        raise UsageError("--gpus and --shard: give one (--gpus makes the parts itself)")
    argv = _without(list(getattr(args, "_argv", sys.argv[1:])), ("--gpus", "--run-id", "--data-dir"))
    from ..core.validate import not_inside_run
    not_inside_run(run_dir)  # before .parts is made there (each part refused it, after)
    parts_dir = Path(args.data_dir) / ".parts" / Path(run_dir).name
    parts_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    procs = []
    for i in range(n):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(i),
                   PYTHONPATH=os.pathsep.join(p for p in (PKG_ROOT, os.environ.get("PYTHONPATH")) if p))
        cmd = [sys.executable, "-m", "moe_lab", *argv, "--shard", f"{i}/{n}",
               "--data-dir", str(parts_dir), "--run-id", f"part-{i}-of-{n}", "--no-progress"]
        log = open(parts_dir / f"part-{i}-of-{n}.log", "w")
        procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    codes = []
    for p, log in procs:
        codes.append(p.wait())
        log.close()
    wall = time.time() - t0
    from ..storage.merging import merge_runs
    from ..storage.store import RunStore
    before = RunStore(run_dir, create=False).read_manifest().get("spread") or {}
    parts = [str(parts_dir / f"part-{i}-of-{n}") for i in range(n)]
    tmp = run_dir.rstrip("/") + ".merging"
    shutil.rmtree(tmp, ignore_errors=True)
    command = "moe-lab " + " ".join(getattr(args, "_argv", sys.argv[1:]))
    merge_runs(tmp, [p for p in parts if os.path.exists(os.path.join(p, "results.parquet"))],
               command)
    if os.path.exists(run_dir):
        shutil.rmtree(run_dir)
    os.replace(tmp, run_dir)
    RunStore(run_dir).update_manifest(
        spread=dict(gpus=n, wall_s=round(wall + before.get("wall_s", 0), 1),
                    wall_s_this_invocation=round(wall, 1), part_exit_codes=codes,
                    parts=[os.path.relpath(p, args.data_dir) for p in parts]), command=command)
    print(f"spread over {n} GPUs in {wall:.0f} s (exit codes {codes}); merged into {run_dir}")
    return 0 if all(c == 0 for c in codes) else 1

