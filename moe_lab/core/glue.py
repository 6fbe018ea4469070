"""The glue between a backend's kernels, as a declared, swappable part: the activation
(SiLU*mul), the activation quantisation of an fp8 scheme, and the combine (sum over the k
slots of each token). Two variants, `GLUES`:

    fused  (the default) one kernel per glue step, as deployments run it: the faster of
           aiter's kernel and ours where both exist (measured below), ours where aiter
           ships none for this GPU
    aiter  fused, with aiter's own Triton glue kernels wherever aiter ships one (the A/B
           of the choice above; identical to fused for steps aiter has no kernel for):
           its group quantisers and its align
    naive  moe-lab's PyTorch glue as it was before (a labelled variant, to show what the
           fusion buys): elementwise SiLU and mul, moe_lab.quant's quantiser, torch's sum,
           and the backend's align as it was (aiter's)

    step                  fused kernel                                             phase
    act (bf16/fp16)       _moe_lab_silu_and_mul_kernel (ours; aiter ships no bf16  act
                          act_mul)
    act + quant           _moe_lab_act_mul_and_group_quant_kernel (ours), or        act
      (fp8-block128)      aiter's act_mul_and_fp8_group_quant (GROUP_QUANT)
    quant (fp8-block128)  _moe_lab_group_quant_kernel (ours), or aiter's            quant
                          fused_flatten_fp8_group_quant (GROUP_QUANT)
    quant (fp8-channel)   aiter quant.dynamic_per_token_quant_fp8_i8                 quant
    quant (fp8-tensor)    aiter quant.dynamic_per_tensor_quant_fp8_i8 (an amax       quant
                          kernel, then a scaling kernel: a global amax needs two)
    combine               _moe_lab_moe_sum_kernel (ours): [T, k, H] read once, fp32  combine
                          sums in registers, [T, H] written once
    align                 _moe_lab_moe_align_block_size_{count,scan,place}_kernel   align
                          (ours, EP map inside; few pairs: _one_kernel, or _small_kernel,
                          a block per pair, when sparse), or aiter's
                          moe_align_block_size_triton (glue aiter and naive)

The align exists twice too, with the same output bit for bit (tests/test_align.py).
aiter's runs one program per expert, each walking numel / E ids in a serial loop (under
EP8, E_local + 1 = 33 experts, about a thousand ids per program); ours is the faster at
every point of the H200 A/B runs (h200-align-ab-*: notebook 05 and the findings' glue
section give the times).

The 1x128 group quantisers (fp8-block128) exist twice, aiter's and ours, and give the same
bits (scale = amax / fp8 max per 128 columns, values scaled, clamped, rounded to nearest).
aiter's launch one 128-element program per (row, group), ours a tile of 2-8 rows x 2-8
groups; ours was the faster on the H200 (GROUP_QUANT = "moe_lab", the default; "aiter", or
Glue(group_quant="aiter"), runs aiter's for the A/B).

Each fused step runs inside `torch.profiler.record_function("moe_lab.<phase>")`, so the
profiler puts its kernel in that phase (moe_lab.measuring.profiling.PHASE_RANGES); the kernel names
classify into the same phases without it. No step syncs with the host: every one can be
captured in a CUDA graph.

What the fused variants change, per step:
  * act + quant computes SiLU*mul in fp32 and quantises that; the naive step rounds the
    product to the activation dtype first. Scales differ by up to one rounding of the
    activation dtype, values by at most one fp8 step (plus that rounding).
  * aiter's group kernels load a 128-column group with a mask but no `other` value: a
    ragged last group (H or I not a multiple of 128) would take undefined lanes into its
    amax, so with GROUP_QUANT = "aiter" those shapes run the naive step (`notes` says
    so). Ours reads masked lanes as 0 and takes any width.
  * aiter's per-token and per-tensor quantisers clamp no amax from below: an all-zero row
    (per token) or tensor gets scale 0 and NaN values where moe_lab.quant gives a tiny
    scale and zeros. Only rows that no GEMM output reads are ever all zero here (padding
    rows of torch-fp8-grouped), so the outputs are the same.

Where a fused kernel cannot run (no Triton, no aiter for an aiter step, a CPU tensor
without Triton's interpreter, an fp8 step under an interpreter whose fp8 rounding is
wrong), `Glue` uses the naive step and says so in `used` and `notes`, so a row can record
the glue that actually ran (`Glue.glue_used`).

    Glue(variant, device, *, steps, scheme=None, fmt="e4m3fn", hidden=None, inter=None,
         group_quant=None)
        .act(g, inter) -> a              g [rows, 2I] (gate, then up) -> [rows, I]
        .act_quant(g, inter) -> (q, s)   SiLU*mul quantised for gemm2 (fp8-block128)
        .quant(x) -> (q, s)              x [rows, K] -> fp8 [rows, K], fp32 scales in
                                         moe_lab.quant's shapes
        .combine(c2) -> out              c2 [T, k, H] -> [T, H]
        .used {step: variant}, .notes {step: why naive}, .kernels, .glue_used, describe()

The functions under it (no fallback: a fused one raises where it cannot run):
    silu_mul(g, inter, glue), silu_mul_quant(g, inter, scheme, fmt, glue),
    quantize_act(x, scheme, fmt, glue), combine(c2, glue); each *_fused / *_naive alone.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import quant

try:
    import triton
    import triton.language as tl
except ImportError:  # moe-lab runs without Triton; the fused variant then falls back
    triton = None

GLUES = ("fused", "naive", "aiter")
DEFAULT = "fused"
# "aiter": the fused variant with aiter's own glue kernels wherever aiter ships one (the
# 1x128 group quantisers and SiLU*mul+quant of fp8-block128), for the A/B against ours
STEPS = ("act", "act_quant", "quant", "combine", "align", "combine_rows")
PHASE = {"act": "act", "act_quant": "act", "quant": "quant", "combine": "combine",
         "align": "align", "combine_rows": "combine"}
GROUP = quant.BLOCK  # columns per scale of fp8-block128
GROUP_QUANTS = ("moe_lab", "aiter")
GROUP_QUANT = "moe_lab"  # the faster on an H200 (module doc)


def check(glue: str) -> str:
    if glue not in GLUES:
        raise ValueError(f"glue must be one of {', '.join(GLUES)}, not {glue!r}")
    return glue


from .glue_kernels import KERNELS  # noqa: E402 (our kernels, by step)
from .align import (AITER_ALIGN_KERNELS, align_aiter, align_fused, align_sparse,  # noqa: E402,F401
                    is_sparse)
from .combine_rows import combine_rows_fused, combine_rows_naive  # noqa: E402

if KERNELS:
    _moe_lab_silu_and_mul_kernel, _moe_lab_moe_sum_kernel = KERNELS["act"], KERNELS["combine"]
    _moe_lab_group_quant_kernel = KERNELS["quant"]
    _moe_lab_act_mul_and_group_quant_kernel = KERNELS["act_quant"]

# aiter's kernels that the fused steps launch, by step and scheme (their profiler names)
AITER_KERNELS = {
    ("quant", "fp8-block128"): ("_fused_flatten_fp8_group_quant_kernel",),
    ("act_quant", "fp8-block128"): ("_act_mul_and_dynamic_fp8_group_quant_kernel",),
    ("quant", "fp8-channel"): ("_dynamic_per_token_quant_fp8_i8_kernel",),
    ("quant", "fp8-tensor"): ("_dynamic_per_tensor_quant_fp8_i8_kernel",
                              "_static_per_tensor_quant_fp8_i8_kernel"),
}


def kernel_name(kernel) -> str:
    """A Triton kernel's name as the profiler shows it (the jitted function's name)."""
    fn = getattr(kernel, "fn", kernel)
    return getattr(fn, "__name__", str(kernel))


def interpreted() -> bool:
    """Are our kernels run by Triton's interpreter (TRITON_INTERPRET=1 when Triton was
    imported)? Then they also take CPU tensors."""
    return triton is not None and type(KERNELS["act"]).__name__ == "InterpretedFunction"


def triton_runs_on(device) -> tuple[bool, str]:
    """Can a Triton kernel take tensors on this device here?"""
    if triton is None:
        return False, "triton is not installed"
    if torch.device(device).type == "cuda" or interpreted():
        return True, ""
    return False, f"Triton kernels need a GPU: {device} tensors (no TRITON_INTERPRET=1)"


def interpreter_rounds_fp8() -> bool:
    """Does Triton's interpreter convert fp32 to fp8 right (round to nearest)? Triton 3.x's
    OR-s a rounding carry into the exponent instead of adding it (126.4 -> 64, not 128, in
    e4m3fn; 2% of random values in error), so the fp8 glue steps are not run under it: a
    CPU check of them would fail for the interpreter's fault. Tests that correct the
    conversion (tests/test_glue.py) get the fused steps."""
    try:
        import numpy as np
        from triton._C.libtriton import ir
        from triton.runtime import interpreter as ti
        v = np.array([126.4, 7.77, -31.4, 0.3, 400.0], dtype=np.float32)
        got = ti._convert_float(v, tl.float32, tl.float8e4nv, ir.ROUNDING_MODE.RTNE)
        want = torch.from_numpy(v).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
        return bool((np.asarray(got).reshape(-1).view(np.uint8) == want).all())
    except Exception:
        return False


def aiter_glue() -> tuple[object, object, object]:
    """aiter's Triton glue modules (activation, fused_fp8_quant, quant), imported without
    aiter's ROCm-only top level (moe_lab.aiter_import.load_aiter_glue)."""
    from .aiter_import import load_aiter_glue
    return load_aiter_glue()


def aiter_glue_status() -> tuple[bool, str]:
    try:
        aiter_glue()
    except Exception as exc:
        return False, f"aiter's Triton glue kernels do not import: {type(exc).__name__}: {exc}"
    return True, ""


# --- the steps, each in its variants --------------------------------------------------------

def silu_mul_naive(g: torch.Tensor, inter: int) -> torch.Tensor:
    """silu(gate) in the activation dtype, then the product in place (two kernels)."""
    return F.silu(g[:, :inter]).mul_(g[:, inter:])


def silu_mul_fused(g: torch.Tensor, inter: int) -> torch.Tensor:
    """One kernel of ours; g [rows, 2I] with any strides, out [rows, I] in g's dtype."""
    rows = g.shape[0]
    out = torch.empty(rows, inter, dtype=g.dtype, device=g.device)
    if rows == 0 or inter == 0:
        return out
    block_i = min(1024, triton.next_power_of_2(inter))
    block_r = max(1, min(triton.next_power_of_2(rows), 4096 // block_i))
    grid = (triton.cdiv(rows, block_r), triton.cdiv(inter, block_i))
    with torch.profiler.record_function("moe_lab.act"):
        _moe_lab_silu_and_mul_kernel[grid](g, out, rows, inter, g.stride(0), g.stride(1),
                                           out.stride(0), out.stride(1), BLOCK_R=block_r,
                                           BLOCK_I=block_i, num_warps=4)
    return out


def combine_naive(c2: torch.Tensor) -> torch.Tensor:
    T, k = c2.shape[:2]
    return c2.sum(dim=1) if k > 1 else c2.view(T, -1)


def combine_fused(c2: torch.Tensor) -> torch.Tensor:
    """One kernel of ours: c2 [T, k, H] (any strides) -> [T, H] in c2's dtype."""
    T, k, H = c2.shape
    if k == 1:
        return c2.view(T, -1)
    out = torch.empty(T, H, dtype=c2.dtype, device=c2.device)
    if T == 0 or H == 0:
        return out
    block_h = min(1024, triton.next_power_of_2(H))
    with torch.profiler.record_function("moe_lab.combine"):
        _moe_lab_moe_sum_kernel[(T, triton.cdiv(H, block_h))](
            c2, out, H, c2.stride(0), c2.stride(1), c2.stride(2), out.stride(0), out.stride(1),
            K=k, BLOCK_H=block_h, num_warps=4)
    return out


def _group_quant(kernel, src, rows, cols, fmt):
    """Launch one of our 1x128 group kernels: (fp8 [rows, cols], fp32 [rows, cols/128])."""
    dt = quant.FORMATS[fmt]
    q = torch.empty(rows, cols, dtype=dt, device=src.device)
    s = torch.empty(rows, triton.cdiv(cols, GROUP), dtype=torch.float32, device=src.device)
    if rows == 0 or cols == 0:
        return q, s
    # a tile of 2-8 rows x 2-8 groups (measured on an H200: module doc)
    g = min(8, triton.next_power_of_2(triton.cdiv(cols, GROUP)))
    br = max(1, min(8, 32 // g))
    kernel[(triton.cdiv(rows, br), triton.cdiv(cols, g * GROUP))](
        src, q, s, rows, cols, src.stride(0), src.stride(1), q.stride(0), q.stride(1),
        s.stride(0), s.stride(1), BLOCK_R=br, G=g, GROUP_=GROUP, FP8_MAX=quant.fp8_max(fmt),
        num_warps=8 if br * g >= 32 else 4)
    return q, s


def quantize_act_naive(x: torch.Tensor, scheme: str, fmt: str):
    return quant.quantize_act(x, scheme, fmt)  # its own moe_lab.quant range


def aiter_group_refusal(cols: int) -> str:
    """Why aiter's 1x128 group kernels cannot take `cols` columns ('' when they can)."""
    if cols % GROUP:
        return (f"aiter's group quantiser reads whole {GROUP}-column groups: {cols} columns "
                f"leave a ragged last group")
    return ""


def quantize_act_fused(x: torch.Tensor, scheme: str, fmt: str, group_quant: str | None = None):
    """x [M, K] -> (fp8 [M, K], fp32 scales in moe_lab.quant's shapes) in one pass (two
    for fp8-tensor): fp8-block128 by GROUP_QUANT's kernel, the others by aiter's."""
    impl = group_quant or GROUP_QUANT
    dt = quant.FORMATS[fmt]
    M, K = x.shape
    with torch.profiler.record_function("moe_lab.quant"):
        if scheme == "fp8-block128" and impl == "moe_lab":
            return _group_quant(_moe_lab_group_quant_kernel, x, M, K, fmt)
        _, ffq, aq = aiter_glue()
        if scheme == "fp8-block128":  # aiter's: one program per (row, 128-column group)
            why = aiter_group_refusal(K)
            if why:
                raise ValueError(why)
            return ffq.fused_flatten_fp8_group_quant(x.unflatten(-1, (K // GROUP, GROUP)),
                                                     GROUP, dtype_quant=dt)
        if scheme not in quant.SCHEMES:
            raise ValueError(f"no fp8 scheme {scheme!r}")
        x = x if x.stride(-1) == 1 else x.contiguous()  # its kernels take a row stride only
        q = torch.empty(M, K, dtype=dt, device=x.device)
        if scheme == "fp8-channel":  # one program per row
            s = torch.empty(M, dtype=torch.float32, device=x.device)
            aq.dynamic_per_token_quant_fp8_i8(q, x, s)
            return q, s.view(M, 1)
        s = torch.zeros(1, dtype=torch.float32, device=x.device)  # an atomic max into it
        aq.dynamic_per_tensor_quant_fp8_i8(q, x, s)
        return q, s


def silu_mul_quant_naive(g: torch.Tensor, inter: int, scheme: str, fmt: str):
    return quant.quantize_act(silu_mul_naive(g, inter), scheme, fmt)


def silu_mul_quant_fused(g: torch.Tensor, inter: int, scheme: str, fmt: str,
                         group_quant: str | None = None):
    """fp8-block128: SiLU*mul and the 1x128 group quantisation in one kernel -> (fp8
    [rows, I], fp32 [rows, ceil(I/128)]), the layout fused_moe takes as A_scale for
    block_shape [128, 128]. Other schemes: our act kernel, then quantize_act_fused."""
    if scheme != "fp8-block128":
        return quantize_act_fused(silu_mul_fused(g, inter), scheme, fmt)
    impl = group_quant or GROUP_QUANT
    with torch.profiler.record_function("moe_lab.act"):
        if impl == "moe_lab":
            return _group_quant(_moe_lab_act_mul_and_group_quant_kernel, g, g.shape[0], inter, fmt)
        why = aiter_group_refusal(inter)
        if why:
            raise ValueError(why)
        act, _, _ = aiter_glue()
        return act.act_mul_and_fp8_group_quant(g, "silu", GROUP, dtype_quant=quant.FORMATS[fmt])


def silu_mul(g, inter, glue=DEFAULT):
    return (silu_mul_fused if check(glue) == "fused" else silu_mul_naive)(g, inter)


def silu_mul_quant(g, inter, scheme, fmt, glue=DEFAULT):
    f = silu_mul_quant_fused if check(glue) == "fused" else silu_mul_quant_naive
    return f(g, inter, scheme, fmt)


def quantize_act(x, scheme, fmt, glue=DEFAULT):
    f = quantize_act_fused if check(glue) == "fused" else quantize_act_naive
    return f(x, scheme, fmt)


def combine(c2, glue=DEFAULT):
    return (combine_fused if check(glue) == "fused" else combine_naive)(c2)


# --- one backend's glue, decided once at prepare time ----------------------------------------

class Glue:
    """The glue steps of one prepared call, each resolved to the variant that can run
    (module doc). `steps`: those the backend uses; `scheme`/`fmt`: its fp8 scheme, if
    any; `hidden`/`inter`: H and I (aiter's group kernels need multiples of 128);
    `group_quant`: whose 1x128 group kernels (GROUP_QUANTS; default GROUP_QUANT)."""

    def __init__(self, variant: str = DEFAULT, device="cpu", *, steps=STEPS,
                 scheme: str | None = None, fmt: str = "e4m3fn", hidden: int | None = None,
                 inter: int | None = None, group_quant: str | None = None,
                 align_alt: str = "aiter"):
        self.variant, self.align_alt = check(variant), align_alt
        self.scheme, self.fmt = scheme, fmt
        if variant == "aiter":  # fused, with aiter's kernels where it ships one
            variant, group_quant = "fused", "aiter"
        self.group_quant = group_quant or GROUP_QUANT
        if self.group_quant not in GROUP_QUANTS:
            raise ValueError(f"group_quant must be one of {', '.join(GROUP_QUANTS)}")
        self.used: dict[str, str] = {}
        self.notes: dict[str, str] = {}
        self.kernels: dict[str, tuple[str, ...]] = {}
        ok, why = triton_runs_on(device) if variant == "fused" else (False, "")
        for step in steps:
            if step not in STEPS:
                raise ValueError(f"unknown glue step {step!r}; known: {', '.join(STEPS)}")
            if step == "align":
                self._align(ok, why)
            elif variant == "naive":
                self._naive(step, "")
            elif not ok:
                self._naive(step, why)
            elif step in ("act", "combine", "combine_rows"):
                self._fused(step, (kernel_name(KERNELS[step]),))
            else:
                self._quant_step(step, hidden if step == "quant" else inter)

    def _quant_step(self, step, cols):
        scheme = self.scheme
        if scheme not in quant.SCHEMES:
            raise ValueError(f"glue step {step!r} needs an fp8 scheme, not {scheme!r}")
        if step == "act_quant" and scheme != "fp8-block128":
            raise ValueError("act_quant is the fp8-block128 step (other schemes: act, quant)")
        if interpreted() and not interpreter_rounds_fp8():
            return self._naive(step, "Triton's interpreter rounds fp32 -> fp8 wrongly "
                                     "(interpreter_rounds_fp8): fp8 steps naive under it")
        if scheme == "fp8-block128" and self.group_quant == "moe_lab":
            return self._fused(step, (kernel_name(KERNELS[step]),))
        aiter_ok, aiter_why = aiter_glue_status()
        refusal = aiter_group_refusal(cols) if scheme == "fp8-block128" and cols else ""
        if not aiter_ok or refusal:
            self._naive(step, aiter_why or refusal)
            if step == "act_quant":  # our act kernel, then the naive quantiser
                self.notes[step] += "; SiLU*mul by our kernel, then moe_lab.quant"
                self.kernels[step] = (kernel_name(KERNELS["act"]), "moe_lab.quant.quantize_act")
            return None
        return self._fused(step, AITER_KERNELS[(step, scheme)])

    def _align(self, ok, why):
        """fused: ours; aiter (the A/B) and naive (the glue as it was): the backend's own
        align, `align_alt`: aiter's kernels (aiter-triton), or "torch", its PyTorch sort
        (torch-fp8-grouped, which under `aiter` takes ours: aiter has no align for it)."""
        if ok and (self.variant == "fused" or (self.variant, self.align_alt) == ("aiter", "torch")):
            self._fused("align", tuple(kernel_name(k) for k in KERNELS["align"]))
            return
        if self.align_alt == "torch":
            return self._naive("align", why if self.variant != "naive" else "")
        self.used["align"] = "fused" if self.variant == "aiter" else "naive"
        self.kernels["align"] = AITER_ALIGN_KERNELS
        if self.variant == "fused":
            self.notes["align"] = why

    def _naive(self, step, why):
        self.used[step] = "naive"
        self.kernels[step] = ("PyTorch",)
        if why:
            self.notes[step] = why

    def _fused(self, step, kernels):
        self.used[step] = "fused"
        self.kernels[step] = tuple(kernels)

    @property
    def glue_used(self) -> str:
        """The variant asked for (fused, aiter) when any step runs fused, else 'naive'."""
        return self.variant if "fused" in self.used.values() else "naive"

    def describe(self) -> dict:
        return dict(glue=self.variant, glue_used=self.glue_used, group_quant=self.group_quant,
                    used=dict(self.used), notes=dict(self.notes),
                    kernels={k: list(v) for k, v in self.kernels.items()})

    # the steps; each runs the variant chosen above
    def act(self, g, inter):
        return (silu_mul_fused if self.used["act"] == "fused" else silu_mul_naive)(g, inter)

    def quant(self, x):
        if self.used["quant"] == "fused":
            return quantize_act_fused(x, self.scheme, self.fmt, self.group_quant)
        return quantize_act_naive(x, self.scheme, self.fmt)

    def act_quant(self, g, inter):
        if self.used["act_quant"] == "fused":
            return silu_mul_quant_fused(g, inter, self.scheme, self.fmt, self.group_quant)
        if self.kernels["act_quant"][0] != "PyTorch":  # our act, the naive quantiser
            return quantize_act_naive(silu_mul_fused(g, inter), self.scheme, self.fmt)
        return silu_mul_quant_naive(g, inter, self.scheme, self.fmt)

    def combine(self, c2):
        return (combine_fused if self.used["combine"] == "fused" else combine_naive)(c2)

    def combine_rows(self, y, pos, weights, pad):  # out[t] = sum_j w[t, j] * y[pos[t, j]]
        fused = self.used["combine_rows"] == "fused"
        return (combine_rows_fused if fused else combine_rows_naive)(y, pos, weights, pad)

    def align(self, topk_ids, n_exp, block_m, expert_map=None, aiter=None):
        """(sorted_token_ids, expert_ids, num_tokens_post_padded): ours, else aiter's."""
        if self.kernels["align"][0].startswith("_moe_lab"):
            if is_sparse(topk_ids.numel(), n_exp, expert_map):
                return align_sparse(topk_ids, block_m)
            return align_fused(topk_ids, n_exp, block_m, expert_map)
        return align_aiter(topk_ids, n_exp, block_m, expert_map, kernel=aiter)
