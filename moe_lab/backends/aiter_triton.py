"""`aiter-triton`: aiter's Triton MoE kernels (`aiter.ops.triton`), on ROCm and CUDA.

Pipeline, as vLLM's Triton `fused_experts` does it (the glue steps, marked *, are
moe_lab.glue's; `glue="fused"`, the default, is shown, `glue="naive"` in brackets):
* align                        sort (token, slot) pairs by expert, pad each expert to BLOCK_M:
                               three kernels of ours, the EP map applied inside
                               (glue.align_fused) [aiter's moe_align_block_size_triton]
* quant (fp8-block128)         x -> fp8 [T, H] + [T, H/128] scales in one kernel (ours, or
                               aiter's fused_flatten_fp8_group_quant: glue.GROUP_QUANT)
                               [moe_lab.quant's ~8 kernels]
  moe_op.fused_moe (gemm1)     x @ w1^T -> [T, k, 2I]
* act                          bf16/fp16 and fp8-tensor: silu(gate) * up, one kernel of ours
                               [F.silu, mul_]; fp8-block128: SiLU*mul and the 1x128 group
                               quantisation of gemm2's input in one kernel (ours, or aiter's
                               act_mul_and_fp8_group_quant) [silu, mul, moe_lab.quant]
  moe_op.fused_moe (gemm2)     a @ w2^T -> [T, k, H], router weight applied (fp8-tensor:
                               fused_moe quantises A itself, per tensor, in both GEMMs)
* combine                      sum over k: one kernel of ours, fp32 in registers [c2.sum(1)]

Details that matter for correctness:
  * `import aiter` runs aiter/__init__.py, which needs ROCm. Off ROCm we register empty
    package modules for `aiter` and `aiter.ops` pointing at the installed package's
    folders, so `aiter.ops.triton.*` import without the ROCm-only top level.
  * aiter's align kernels do not write the padding slots of `sorted_token_ids`; they
    must be pre-filled with T*k (the kernel masks ids >= T*k) or rows are garbage
    (glue.align_aiter does; ours writes them).
  * aiter's tuned configs are for MI300X/MI350X and carry AMD-only launch keys
    (`waves_per_eu`, `matrix_instr_nonkdim`, `kpack`) that Triton on CUDA rejects.
  * EP: remote experts go to one extra dummy expert whose blocks get expert id -1,
    which the kernel turns into zero rows.
"""
from __future__ import annotations

import inspect
import json
import os

import torch

from ..core import glue as glue_mod
from ..core.aiter_import import (aiter_root, aiter_version, load_aiter_glue,  # noqa: F401 (re-exported)
                            load_aiter_triton, load_silu_fused)
from . import Backend, Weights, register
from ._aiter_fp8 import TRITON_NO_CHANNEL, TRITON_SCHEMES, fit_block_k, triton_fp8_fixed
from ._triton_configs import FINE_KEYS, file_names, gemm_space, is_coarse, nearest

AMD_ONLY_KEYS = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")
# aiter's own M thresholds for its small/medium/large configs (moe_config_utils.py)
M_THRESHOLD_SMALL, M_THRESHOLD_MEDIUM = 256, 1024


# aiter ships tuned Triton MoE configs per AMD arch (ops/triton/utils/_triton/arch_info.py)
_ARCH_CONFIGS = {"gfx942": "MI300X", "gfx950": "MI350X"}


def config_device() -> str:
    """Which aiter config file fits this GPU: the arch's own on ROCm; MI300X elsewhere
    (aiter has no NVIDIA configs, so CUDA runs use the MI300X ones, AMD keys stripped)."""
    if torch.version.hip and torch.cuda.is_available():
        arch = getattr(torch.cuda.get_device_properties(0), "gcnArchName", "").split(":")[0]
        return _ARCH_CONFIGS.get(arch, "MI300X")
    return "MI300X"


def aiter_moe_configs(device_name: str | None = None, fp8: bool = False) -> dict:
    """aiter's tuned MoE configs ({small_M, medium_M, large_M}) from its JSON: bf16/fp16
    (MOE-DEFAULT) or fp8 w8a8 (MOE-FP8_W8A8)."""
    device_name = device_name or config_device()
    root = aiter_root()
    kind = "FP8_W8A8" if fp8 else "DEFAULT"
    path = os.path.join(root, "ops", "triton", "configs", "moe", f"{device_name}-MOE-{kind}.json")
    with open(path) as f:
        return json.load(f)


def pick_config(configs: dict, tokens: int, strip_amd: bool) -> dict:
    key = ("small_M" if tokens < M_THRESHOLD_SMALL else
           "medium_M" if tokens < M_THRESHOLD_MEDIUM else "large_M")
    cfg = dict(configs[key])
    if strip_amd:
        for k in AMD_ONLY_KEYS:
            cfg.pop(k, None)
    return cfg


# --- the call of aiter's moe_op.fused_moe, bound to its real signature ----------------
# Arguments that change with every call (the call's tensors, the config picked for its
# token count); all others are fixed when the backend is prepared.
FUSED_MOE_PER_CALL = ("A", "C", "topk_weights", "topk_ids", "sorted_token_ids", "expert_ids",
                      "num_tokens_post_padded", "config")
_PER_CALL = object()  # stands for a per-call argument while binding at prepare time


def bind_fused_moe(fused_moe, kwargs: dict) -> inspect.BoundArguments:
    """`inspect.signature(fused_moe).bind(**kwargs)`; names the installed function does
    not take, or required ones missing, raise TypeError naming them and the signature."""
    sig = inspect.signature(fused_moe)
    try:
        return sig.bind(**kwargs)
    except TypeError as exc:
        P = inspect.Parameter
        params = sig.parameters
        unknown = ([] if any(p.kind is P.VAR_KEYWORD for p in params.values())
                   else sorted(set(kwargs) - set(params)))
        missing = [n for n, p in params.items() if p.default is P.empty
                   and p.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD) and n not in kwargs]
        parts = []
        if unknown:
            parts.append(f"not parameters: {', '.join(map(repr, unknown))}")
        if missing:
            parts.append(f"required, not passed: {', '.join(map(repr, missing))}")
        what = "; ".join(parts) or str(exc)
        raise TypeError(f"aiter moe_op.fused_moe (amd-aiter {aiter_version()}) does not take "
                        f"this call ({what}); its signature is {sig}") from None


class FusedMoeCall:
    """One call site of `moe_op.fused_moe`: the fixed arguments and the names of the
    per-call ones, bound to the installed function's signature when built (prepare
    time), so a misspelt or missing argument fails there, not on the GPU. Calling it
    passes `fixed` plus the per-call arguments (FUSED_MOE_PER_CALL), by keyword."""

    def __init__(self, fused_moe, per_call: tuple[str, ...] = FUSED_MOE_PER_CALL, **fixed):
        both = set(fixed) & set(per_call)
        if both:
            raise TypeError(f"fused_moe arguments both fixed and per call: {sorted(both)}")
        self.fn, self.per_call, self.fixed = fused_moe, tuple(per_call), fixed
        self.bound = bind_fused_moe(fused_moe, {**fixed, **dict.fromkeys(per_call, _PER_CALL)})

    @property
    def names(self) -> set[str]:
        """Every argument name this call passes."""
        return set(self.fixed) | set(self.per_call)

    def __call__(self, **per_call):
        # no checks here: the hot path stays what it was (one call, by keyword) and
        # traceable; the names were checked when the call site was built
        return self.fn(**self.fixed, **per_call)


def fused_moe_calls(fused_moe, w1, w2, compute_type, weight_on_input: bool, top_k: int,
                    gemm1_fn=None, fp8: tuple[dict, dict] | None = None):
    """The backend's two calls: gemm1 (x @ w1^T -> [T, k, 2I], the router weight applied
    here when it scales the input; `gemm1_fn`, e.g. aiter's fused_moe_silu, instead of
    fused_moe) and gemm2 (a @ w2^T -> [T, k, H], one expert per row, the router weight
    applied here otherwise). bf16/fp16 without `fp8`; with it (gemm1's and gemm2's fixed
    fp8 arguments, _aiter_fp8.triton_fp8_fixed) A_scale is a per-call argument."""
    common = dict(A_scale=None, B_scale=None, B_zp=None, compute_type=compute_type,
                  use_fp8_w8a8=False, use_int8_w8a16=False, use_int4_w4a16=False,
                  block_shape=None)
    q1, q2, per_call = {}, {}, FUSED_MOE_PER_CALL
    if fp8 is not None:
        (q1, q2), per_call = fp8, FUSED_MOE_PER_CALL + ("A_scale",)
        del common["A_scale"]
    gemm1 = FusedMoeCall(gemm1_fn or fused_moe, per_call, B=w1,
                         mul_routed_weight=weight_on_input, top_k=top_k, **{**common, **q1})
    gemm2 = FusedMoeCall(fused_moe, per_call, B=w2, mul_routed_weight=not weight_on_input,
                         top_k=1, **{**common, **q2})
    return gemm1, gemm2


@register
class AiterTritonBackend(Backend):
    name = "aiter-triton"
    description = "aiter's Triton MoE kernels (moe_align_block_size_triton + moe_op.fused_moe)"
    label, color = "aiter-triton", "tab:red"
    # c1 [T, k, 2I], activation [T*k, I], c2 [T, k, H], then moe_sum
    intermediates = [("c1", "all", "2I", "act"), ("a", "all", "I", "act"),
                     ("c2", "all", "H", "act")]
    compile_both_ways = True  # aiter's Python graph-breaks when traced
    tunable = True
    quant_schemes = TRITON_SCHEMES  # fp8-channel: no per-channel fp8 path (_aiter_fp8)
    fused_silu = False  # gemm1 through aiter's fused_moe_silu (SiLU*mul in its epilogue)
    glues = glue_mod.GLUES

    def available(self):
        # the GPU first: installing amd-aiter or triton is no use on a machine without one
        if not torch.cuda.is_available():
            return False, "Triton kernels need a CUDA or ROCm GPU (none visible)"
        if aiter_root() is None:
            return False, "amd-aiter is not installed (pip install amd-aiter)"
        try:
            import triton  # noqa: F401
        except ImportError:
            return False, "triton is not installed"
        try:
            load_aiter_triton()
        except Exception as exc:  # report, never crash `backends`
            return False, f"aiter Triton modules failed to import: {type(exc).__name__}: {exc}"
        return True, ""

    def supports(self, problem, device):
        if not str(device).startswith("cuda"):
            return False, "Triton kernels run on GPU only"
        if problem.dtype == "fp8-channel" and not self.fused_silu:
            return False, TRITON_NO_CHANNEL
        if problem.dtype not in ("bf16", "fp16") + self.quant_schemes:
            return False, f"aiter's Triton MoE has no {problem.dtype} path here"
        return True, ""

    def info(self):
        return {"aiter": aiter_version(), "aiter_triton_configs": config_device()}

    # --- configurations (moe-lab tune) ------------------------------------------------
    def default_config(self, problem) -> dict:
        """aiter's shipped choice for this token count (AMD-only keys dropped off ROCm)."""
        cfg = pick_config(aiter_moe_configs(fp8=problem.is_fp8), problem.tokens,
                          torch.version.hip is None)
        cfg = fit_block_k(cfg, problem.dtype)
        return {"gemm1": cfg, "gemm2": dict(cfg)}

    def config_space(self, problem) -> dict:
        """Every configuration that can run at the problem's token count (the limits of
        _triton_configs: shared memory with fp8's 1-byte operands, registers, the 128-column
        scale block of fp8-block128, BLOCK_SIZE_M by the token count), for both GEMMs."""
        space = gemm_space(problem.tokens, elem_bytes=1 if problem.is_fp8 else 2,
                           block_quant=problem.dtype == "fp8-block128")
        return {"gemm1": space, "gemm2": [dict(c) for c in space]}

    # the search's coarse pass and the launch keys its fine pass changes (moe_lab.measuring.tuning)
    coarse_config = staticmethod(is_coarse)
    fine_keys = FINE_KEYS

    def config_files(self, problem, device_name: str) -> dict:
        return file_names(problem.local_experts, problem.inter, device_name, problem.dtype)

    def glue_steps(self, problem) -> tuple[str, ...]:
        """The moe_lab.glue steps this backend runs for a problem (module doc)."""
        if self.fused_silu:
            return ("align", "combine")
        if problem.dtype == "fp8-block128":
            return ("align", "quant", "act_quant", "combine")
        return ("align", "act", "combine")

    def prepare(self, problem, weights: Weights, config: dict | None = None,
                glue: str = glue_mod.DEFAULT):
        """`config`: None (aiter's shipped configs by token count), or {"gemm1": c,
        "gemm2": c} where each c is one launch configuration or a table {M: config}
        (the nearest M is used, as vLLM does). `glue`: moe_lab.glue.GLUES; the variant
        each step actually runs is `fn.glue` (a moe_lab.glue.Glue), `fn.glue_used`."""
        import triton.language as tl
        moe_op, aiter_align = load_aiter_triton()
        shipped = aiter_moe_configs(fp8=problem.is_fp8)
        strip = torch.version.hip is None
        compute_type = tl.float16 if problem.dtype == "fp16" else tl.bfloat16
        scheme, qw = problem.dtype, weights.quant
        w1, w2 = (qw.w1, qw.w2) if problem.is_fp8 else (weights.w1, weights.w2)
        fp8 = triton_fp8_fixed(scheme, qw.w1_scale, qw.w2_scale) if problem.is_fp8 else None
        block = scheme == "fp8-block128"
        if problem.is_fp8 and self.fused_silu:
            raise ValueError("aiter-triton-silu has no fp8 path here")
        E_local, inter, k = w1.shape[0], problem.inter, problem.topk
        woi = problem.weight_on_input
        emap = weights.expert_map
        self.last_config = None
        # bound to the installed fused_moe's signature here: a bad argument fails now
        gemm1_fn = load_silu_fused().fused_moe_silu if self.fused_silu else None
        gemm1, gemm2 = fused_moe_calls(moe_op.fused_moe, w1, w2, compute_type, woi, k,
                                       gemm1_fn, fp8)
        G = glue_mod.Glue(glue, w1.device, steps=self.glue_steps(problem),
                          scheme=scheme if block else None,
                          fmt=qw.fmt if problem.is_fp8 else "e4m3fn",
                          hidden=problem.hidden, inter=inter)
        self.glue, self.glue_used = G, G.glue_used

        def pick(stage, T):
            if config is None:
                return fit_block_k(pick_config(shipped, T, strip), scheme)
            c = config[stage]
            return fit_block_k(dict(nearest(c, T) if all(isinstance(m, int) for m in c) else c),
                               scheme)

        def fn(x, topk_weights, topk_ids):
            T = x.shape[0]
            cfg1, cfg2 = pick("gemm1", T), pick("gemm2", T)
            self.last_config = {"gemm1": cfg1, "gemm2": cfg2}
            n_exp = E_local + 1 if emap is not None else E_local  # + the EP sentinel
            numel = T * k
            aligned = {}

            def routing(cfg):  # one alignment per distinct BLOCK_SIZE_M
                bm = cfg["BLOCK_SIZE_M"]
                if bm not in aligned:
                    # glue step align: ours (fused) or aiter's moe_align_block_size_triton;
                    # fused_moe reads only topk_ids.numel()
                    sorted_ids, expert_ids, n_post_pad = G.align(topk_ids, n_exp, bm, emap,
                                                                 aiter=aiter_align)
                    aligned[bm] = dict(topk_weights=topk_weights, topk_ids=topk_ids,
                                       sorted_token_ids=sorted_ids, expert_ids=expert_ids,
                                       num_tokens_post_padded=n_post_pad)
                return dict(aligned[bm], config=cfg)
            if self.fused_silu:  # gemm1 writes silu(gate) * up into [T*k, I]: this kernel
                # takes C's stride(0) and stride(1) as its row and column strides, so C must
                # be 2-D (a [T, k, I] tensor made it write out of bounds on an H200)
                a = torch.empty(numel, inter, dtype=x.dtype, device=x.device)
                r1 = routing(cfg1)
                if emap is not None:
                    # Under EP, this kernel's zero-fill of a remote block (expert id -1)
                    # is sized for [.., 2I] while C is [.., I]: it writes past its rows
                    # and past the buffer (wrong rows, then a crash, seen on the H200 and
                    # under TRITON_INTERPRET). Remote blocks sort last (the sentinel
                    # expert E_local is the largest id), so gemm1 is told the padded
                    # count of the local blocks only: it never visits the remote ones.
                    # Their rows of `a` stay unwritten and are never read: gemm2 gives
                    # a remote block zeros without loading A.
                    local = (r1["expert_ids"] >= 0).sum(dtype=torch.int32) * cfg1["BLOCK_SIZE_M"]
                    r1 = dict(r1, num_tokens_post_padded=local.reshape(1))
                gemm1(A=x, C=a, **r1)
            elif fp8 is not None:  # per tensor: fused_moe quantises A itself (A_scale unused);
                # blocks: A in fp8 with [rows, K/128] scales (glue step `quant`, phase quant).
                # Remote pairs' rows of c1 are never written. Per tensor they must be zeros,
                # not garbage, since the per-tensor amax over `a` reads them (every glue step
                # is row-wise: a zero row of c1 stays a zero row of `a`). Per 1x128 group
                # a row's scales are its own and gemm2 gives a remote block zeros without
                # reading A, so no fill: it cost 80 us of 1673 at DeepSeek-R1 TP8+EP8, 4096
                # tokens (h200-glue-fp8-block128-tp8ep8-20261201, phase `other`)
                c1 = (torch.zeros if emap is not None and not block else torch.empty)(
                    T, k, 2 * inter, dtype=x.dtype, device=x.device)
                A, A_scale = G.quant(x) if block else (x, None)
                gemm1(A=A, A_scale=A_scale, C=c1, **routing(cfg1))
                g = c1.view(numel, 2 * inter)
                # blocks: SiLU*mul and gemm2's quantisation in one step (phase act)
                A, A_scale = G.act_quant(g, inter) if block else (G.act(g, inter), None)
            else:
                c1 = torch.empty(T, k, 2 * inter, dtype=x.dtype, device=x.device)
                gemm1(A=x, C=c1, **routing(cfg1))
                a = G.act(c1.view(numel, 2 * inter), inter)
            c2 = torch.empty(T, k, x.shape[1], dtype=x.dtype, device=x.device)
            if fp8 is not None:
                gemm2(A=A, A_scale=A_scale, C=c2, **routing(cfg2))
            else:
                gemm2(A=a, C=c2, **routing(cfg2))
            return G.combine(c2)
        fn.glue, fn.glue_used = G, G.glue_used
        # the launch configuration each GEMM runs at T tokens (the row's launch_config)
        fn.launch_config = lambda T: {"gemm1": pick("gemm1", T), "gemm2": pick("gemm2", T)}
        # on the row (moe_lab.storage.rows): aiter's shipped file picked by token range, its version
        fn.row_facts = dict(backend_version=f"aiter {aiter_version()}",
                            config_file=(f"{config_device()}-MOE-"
                                         f"{'FP8_W8A8' if problem.is_fp8 else 'DEFAULT'}.json"
                                         if config is None else None))
        return fn
