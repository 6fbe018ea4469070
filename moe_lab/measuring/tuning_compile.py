"""Compiling ahead for `moe-lab tune` (moe_lab.measuring.tuning) and `moe-lab sweep`: Triton
compiles each launch configuration when it first runs, 1-3 s per configuration on a GPU, the
dominant cost of a search and of a grid sweep of tuned files. `Precompiler` compiles the
next batch of candidates in worker processes into Triton's on-disk cache before the tuner
times them (the Precompiler's doc says why this can only save time, never change a timing);
`_warm_config` is what a worker runs; `compile_sweep_ahead` does the same for the launch
configurations a sweep's shard will run (`sweep_launches`)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .. import backends
from ..core.environment import device_name
from ..core.errors import one_line, reraise_if_terminated
from ..core.problems import Problem

# a batch compiled ahead may take this long (a worker's start, then per configuration a
# worker compiles; one takes a few seconds): past it compiling ahead is turned off
WARM_S, WARM_PER_CONFIG_S = 60.0, 30.0


def default_compile_workers(device: str) -> int:
    """Processes compiling ahead (Precompiler): none on a CPU (no Triton there); on a GPU
    machine all cores but COMPILE_WORKERS_SPARE (2: one times, one for the rest), at most
    COMPILE_WORKERS_MAX (12; core.constants, the --help states them)."""
    from ..core.constants import COMPILE_WORKERS_MAX, COMPILE_WORKERS_SPARE
    if not str(device).startswith("cuda"):
        return 0
    return max(1, min(COMPILE_WORKERS_MAX, (os.cpu_count() or 2) - COMPILE_WORKERS_SPARE))


def compile_workers_for(device: str, workers: int | None) -> int:
    """The processes compiling ahead for a command on `device`: `workers` as given (None:
    default_compile_workers), none off a GPU (no Triton compiles there)."""
    if workers is None:
        workers = default_compile_workers(device)
    return workers if str(device).startswith("cuda") else 0


def token_reps(be, prob: Problem, keys) -> list[int]:
    """The token counts a worker runs a configuration at so that every kernel the token
    counts `keys` launch is compiled: the backend's own (`warm_tokens`), else one per way
    Triton specialises the token count (_specialization_reps)."""
    warm_tokens = getattr(be, "warm_tokens", None)
    return warm_tokens(prob, sorted(keys)) if warm_tokens else _specialization_reps(keys,
                                                                                    prob.topk)


def warm_timeout_s(n: int, workers: int) -> float:
    """How long a batch of n configurations compiled ahead may take before it is off."""
    return WARM_S + WARM_PER_CONFIG_S * -(-n // workers)


def _js(cfg) -> str:
    return json.dumps(cfg, sort_keys=True)


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
        root = str(Path(__file__).resolve().parents[2])  # where this moe_lab is
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        code = "from moe_lab.measuring.tuning_compile import _worker_loop; _worker_loop()"
        self.procs = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
                      for _ in range(self.workers)]

    def warm(self, prob: Problem, fulls: list[dict], token_reps: list[int],
             timeout_s: float = 600.0, budget_cut: bool = False, reps_of=None) -> None:
        """Compile `fulls` (full configurations of `prob`'s shape) ahead; back when all are
        done, or at `timeout_s` (then off, unless `budget_cut`: the command's budget set
        the timeout, and it ends anyway). `reps_of`: {_js(full): token counts} where a full
        configuration runs at other token counts than `token_reps`."""
        fulls = [f for f in fulls if _js(f) not in self._seen]
        if self.off or not fulls or timeout_s <= 0:
            return
        t0 = time.time()
        try:
            if not self.procs:
                self._start()
            self._run([(self.backend_name, prob, f, (reps_of or {}).get(_js(f), token_reps),
                        self.device) for f in fulls], t0 + timeout_s)
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

    def close(self, grace_s: float = 5.0) -> None:
        """End the workers this Precompiler started (each by its own handle): `grace_s`
        for all of them together to finish, then the busy ones are killed (a tune stopped
        by SIGTERM has seconds to write its manifest: 12 busy workers waited 5 s each
        outlived them)."""
        for p in self.procs:
            try:
                p.stdin.close()
            except OSError:
                pass
        end = time.time() + grace_s
        for p in self.procs:
            try:
                p.wait(timeout=max(0.0, end - time.time()))
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
        from ..core.devices import fp8_format_for
        from ..core.quant import quantize_weights
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



def sweep_launches(todo: dict, weights, device_name: str) -> dict:
    """What a sweep's shard will launch (moe_lab.measuring.sweep): {backend: {_js(full):
    (full, token counts)}} over `todo` ({(problem, routing, backend): [(mode, config,
    glue)]}), each tunable backend's configuration resolved as the point will resolve it
    (storage.configs.config_for) and prepared, then asked what each GEMM launches at the
    point's token count (the prepared fn's `launch_config`, the row's column). A point
    that cannot say (no launch_config, an unreadable file, a failing prepare) is left to
    compile in place: it meets its error again when it is checked."""
    from ..storage.configs import config_for
    out: dict = {}
    fns: dict = {}  # (backend, config) -> its prepared fn, or None: one per shard (one shape)
    for (prob, _, bname), left in todo.items():
        be = backends.get(bname)
        if not be.tunable:
            continue
        for config in dict.fromkeys(c for m, c, _ in left if m.kind != "compile"):
            try:
                if (bname, config) not in fns:
                    fns[bname, config] = None
                    table, why = config_for(bname, config, prob, device_name)
                    if not why:
                        fns[bname, config] = be.prepare(prob, weights, **(
                            {"config": table} if table is not None else {}))
                fn = fns[bname, config]
                if fn is None:
                    continue
                full = fn.launch_config(prob.tokens)
            except Exception as exc:  # noqa: BLE001 - the point's own check says it
                reraise_if_terminated(exc)
                continue
            _, tokens = out.setdefault(bname, {}).setdefault(_js(full), (full, set()))
            tokens.add(prob.tokens)
    return out


def compile_sweep_ahead(todo: dict, weights, device: str, workers: int) -> list[str]:
    """Before a sweep times a shard on a GPU: every launch configuration its tunable
    backends will run (sweep_launches) compiled into Triton's on-disk cache by `workers`
    processes (Precompiler: it can only save time, never change one), at the token counts
    of each way Triton specialises the kernels' arguments where the configuration runs.
    A grid sweep of one shape runs some 40-60 configurations (default, tuned and a
    published file at 19 token keys), 1-4 s of compiling each in place. One line per
    backend for the log; whatever goes wrong here, each point compiles in place."""
    lines = []
    if workers <= 0 or not todo:
        return lines
    prob = next(iter(todo))[0]
    where = f"{prob.model.name} {prob.sharding}"
    try:
        launches = sweep_launches(todo, weights, device_name(device))
    except Exception as exc:  # noqa: BLE001
        reraise_if_terminated(exc)
        return [f"{where}: compiling ahead skipped: {one_line(exc)}"]
    for bname, fulls in launches.items():
        be = backends.get(bname)
        reps = {js: token_reps(be, prob, ts) for js, (_, ts) in fulls.items()}
        pre = Precompiler(workers, bname, device)
        try:
            pre.warm(prob, [f for f, _ in fulls.values()], [], reps_of=reps,
                     timeout_s=warm_timeout_s(len(fulls), workers))
        finally:
            pre.close()
        r = pre.report()
        lines.append(f"{where} {bname}: {r['configurations']} launch configurations compiled ahead "
                     f"in {r['wall_s']} s ({workers} processes"
                     + (f"; {r['off']}" if r["off"] else "") + ")")
    return lines
