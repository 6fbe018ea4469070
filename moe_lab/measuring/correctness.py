"""Correct before fast: the inputs of a point, the reference, and the check of a backend.

Inputs are a pure function of the point and a seed: weights, activations and routing are
drawn from CPU generators (the same numbers on any machine and device), then moved to the
device. The reference is the `torch` per-expert loop with every operand upcast (fp64 on
the CPU, fp32 on a GPU). The error is `max|out - ref| / max|ref|`; NaN or Inf never passes.
"""
from __future__ import annotations

import hashlib
import time
import zlib
from dataclasses import dataclass

import torch

from .. import backends
from ..backends.torch_ref import torch_moe
from ..core.problems import Problem
from ..core.routing import make_routing
from ..core.errors import one_line  # noqa: F401 (re-exported: every verb imports it from here)

# The limit rule's thresholds, rel_err and classify_exception live with the one point path
# (moe_lab.measuring.points) and are re-exported here, where the checks have always found them.
from .points import THRESHOLDS, classify_exception, rel_err  # noqa: F401


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device(device: str | None) -> str:
    """The device asked for (None: cuda when visible, else cpu); UsageError for cuda
    where torch sees no GPU."""
    from ..core.validate import device as valid_device
    device = valid_device(device) or default_device()  # "tpu": one line, not torch's
    if device.startswith("cuda") and not torch.cuda.is_available():
        from ..core.errors import UsageError
        raise UsageError("--device cuda but no GPU is visible to torch")
    return device


def point_seed(seed: int, tokens: int, routing: str) -> int:
    """The seed of a point's routing and activations: the run's seed, the token count and
    the routing name (crc32, not hash(): Python salts that per process)."""
    return seed + tokens * 1009 + zlib.crc32(routing.encode()) % 997


def _randn_cpu(shape, gen: torch.Generator, dtype, device, scale: float) -> torch.Tensor:
    """N(0, scale^2) drawn on the CPU one leading slice at a time (bounded fp32 memory)."""
    out = torch.empty(shape, dtype=dtype, device=device)
    for e in range(shape[0]):
        out[e].copy_(torch.randn(shape[1:], generator=gen).mul_(scale))
    return out


def make_weights(problem: Problem, device: str, seed: int) -> backends.Weights:
    """Random expert weights for this rank, scaled so activations stay O(1); the same
    numbers on any machine for the same (problem shard, seed)."""
    g = torch.Generator().manual_seed(seed)
    E, I, H, dt = problem.local_experts, problem.inter, problem.hidden, problem.torch_dtype
    w1 = _randn_cpu((E, 2 * I, H), g, dt, device, H ** -0.5)
    w2 = _randn_cpu((E, H, I), g, dt, device, I ** -0.5)
    qw = None
    if problem.is_fp8:  # quantised once, with scales from these weights (moe_lab.quant)
        from ..core.devices import fp8_format_for
        from ..core.environment import device_name
        from ..core.quant import quantize_weights
        qw = quantize_weights(w1, w2, problem.dtype, fp8_format_for(device_name(device)))
    return backends.Weights(w1, w2, problem.expert_map(device), qw)


@dataclass
class Inputs:
    x: torch.Tensor
    topk_weights: torch.Tensor
    topk_ids: torch.Tensor

    def args(self):
        return self.x, self.topk_weights, self.topk_ids

    def digest(self) -> str:
        """12 hex of a hash over the routing and activations: equal digests, equal inputs."""
        h = hashlib.sha1()
        for t in (self.topk_ids, self.topk_weights, self.x):
            h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
        return h.hexdigest()[:12]


def make_inputs(problem: Problem, device: str, seed: int, routing: str = "uniform",
                ensure_local: bool = True) -> Inputs:
    """Fresh random x and routing. Under EP a draw that sends no token to this rank's
    experts checks nothing and times empty launches, so with `ensure_local` the routing is
    redrawn (next seeds, up to 64 times) until at least one (token, slot) is local."""
    lo, hi = problem.first_local_expert, problem.first_local_expert + problem.local_experts
    for attempt in range(64 if ensure_local and problem.ep > 1 else 1):
        w, ids, _ = make_routing(problem.model, problem.tokens, routing, seed + 7919 * attempt)
        if ((ids >= lo) & (ids < hi)).any():
            break
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(problem.tokens, problem.hidden, generator=g).to(problem.torch_dtype)
    return Inputs(x.to(device), w.to(device), ids.to(device))


def reference(problem: Problem, weights: backends.Weights, inp: Inputs) -> torch.Tensor:
    """fp64 (CPU) / fp32 (GPU). An fp8 scheme: the FP8 layer on the dequantised weights
    and activations (moe_lab.backends.torch_fp8.fp8_reference)."""
    cd = torch.float64 if inp.x.device.type == "cpu" else torch.float32
    if problem.is_fp8:
        from ..backends.torch_fp8 import fp8_reference
        return fp8_reference(inp.x, weights.quant, inp.topk_weights, inp.topk_ids,
                             weights.expert_map, problem.weight_on_input, compute_dtype=cd)
    return unquantized_reference(problem, weights, inp)


def unquantized_reference(problem: Problem, weights: backends.Weights, inp: Inputs) -> torch.Tensor:
    """The layer on the unquantised (bf16) weights and activations."""
    cd = torch.float64 if inp.x.device.type == "cpu" else torch.float32
    return torch_moe(inp.x, weights.w1, weights.w2, inp.topk_weights, inp.topk_ids,
                     weights.expert_map, problem.weight_on_input, compute_dtype=cd)


def quant_facts(problem: Problem, weights: backends.Weights, inp: Inputs,
                ref: torch.Tensor) -> dict:
    """Row columns of the dtype: fp8_format ('' for bf16) and quant_err, the distance of
    the FP8 layer (ref) from the bf16 layer, max|fp8 - bf16| / max|bf16| (NaN for bf16)."""
    if not problem.is_fp8:
        return dict(fp8_format="", quant_err=float("nan"))
    return dict(fp8_format=weights.quant.fmt,
                quant_err=rel_err(ref, unquantized_reference(problem, weights, inp)))


def check_backend(backend: backends.Backend, problem: Problem, weights: backends.Weights, inp: Inputs,
                  ref: torch.Tensor, device: str, prepared=None) -> dict:
    """One backend, one point: status, error and max_rel_err (the row of
    moe_lab.measuring.points.check_point, the one path). Never raises."""
    from .points import Point, check_point
    return check_point(Point(problem, backend), weights, device, inputs=inp, ref=ref,
                       fn=prepared).row()


class Drawn:
    """A point's weights, inputs, reference and quantisation facts, drawn on first use:
    once its gate has passed (a full layer's shard is GBs), never for a refused point.
    `build` and `output` are check_point's hooks."""

    def __init__(self, problem: Problem, device: str, seed: int, input_seed: int, routing: str):
        self.problem, self.device, self.seed = problem, device, seed
        self.input_seed, self.routing, self.made = input_seed, routing, {}

    def _draw(self) -> dict:
        """All three or nothing: a draw that fails leaves `made` empty (facts() {}, never a
        half-drawn point's KeyError), so the next backend draws again and says its error."""
        p = self.problem
        if not self.made:
            w = make_weights(p, self.device, self.seed)
            inp = make_inputs(p, self.device, self.input_seed, self.routing)
            self.made = dict(w=w, inp=inp, ref=reference(p, w, inp))
        return self.made

    @property
    def inputs(self) -> Inputs:
        return self._draw()["inp"]

    def facts(self) -> dict:
        """quant_facts of what was drawn; {} when nothing was."""
        m = self.made
        return quant_facts(self.problem, m["w"], m["inp"], m["ref"]) if m else {}

    def build(self, be, kw):
        return be.prepare(self.problem, self._draw()["w"], **kw)

    def output(self, fn):
        m = self._draw()
        return fn(*m["inp"].args()), m["ref"]


def check_problem(problem: Problem, backend_names: list[str], device: str, seed: int,
                  routing: str = "uniform", config: str = "default") -> list[dict]:
    """Each backend against the reference on fresh inputs; `config` (default, tuned or a
    file) is used by the tunable backends (moe_lab.storage.configs.config_for)."""
    from .points import Point, check_point
    d = Drawn(problem, device, seed, seed + 7, routing)
    rows = []
    for name in backend_names:
        t0 = time.perf_counter()
        c = check_point(Point(problem, name, config=config, routing=routing), None, device,
                        build=d.build, output=d.output)
        row = c.row()
        row.update(problem.key(), routing=routing, seed=seed,
                   config=config if c.backend.tunable else "default",
                   check_s=round(time.perf_counter() - t0, 3))
        rows.append(row)
    facts = d.facts()  # the point's quantisation facts on every row (when any was drawn)
    for row in rows:
        row.update(facts)
    del d
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return rows


def checked_point(model: str, tokens: int, backend: str, tp: int, ep: int, ep_rank: int,
                  dtype: str, routing: str, device: str, seed: int, config: str = "default"):
    """One point made ready to measure, correct before fast: (problem, prepared fn, inputs,
    check row), through moe_lab.measuring.points.check_point. UsageError when the backend
    cannot run it here or fails its check."""
    from ..core.errors import UsageError
    from ..core.problems import make_problem
    from .points import Point, check_point
    prob = make_problem(model, tokens, dtype, tp, ep, ep_rank)
    d = Drawn(prob, device, seed, point_seed(seed, tokens, routing), routing)
    c = check_point(Point(prob, backend, config=config, routing=routing), None, device,
                    build=d.build, output=d.output)
    if c.status in ("unsupported", "unavailable"):
        raise UsageError(f"{backend} cannot run this point here: {c.error}")
    if not c.ok:
        raise UsageError(f"{backend} on {prob.describe()}: {c.status} {c.error}")
    return prob, c.fn, d.inputs, c.row()
