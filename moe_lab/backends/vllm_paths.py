"""vLLM's Hopper MoE paths beside its Triton one, and `vllm-deployed`: the experts class
vLLM's own oracle picks (issue 64).

Written to and checked against vllm 0.26.0's wheel (the release the `vllm` backend pins;
moe_lab.backends.vllm_fused). Every path here runs through vLLM's modular kernel exactly as
its quantisation methods build it after loading a checkpoint:

    FusedMoEConfig (the layer's, for the point's sharding)  ->  the oracle's functions
    convert_to_fp8_moe_kernel_format / convert_to_unquantized_kernel_format (weight layout,
    outside timing), make_fp8_moe_quant_config, make_fp8_moe_kernel /
    make_unquantized_moe_kernel (prepare/finalize: MoEPrepareAndFinalizeNoDPEP, vLLM's TP and
    TP+EP layer without data parallelism; it quantises the activations), then per call
    FusedMoEKernel.apply(x, w13, w2, topk_weights, topk_ids, activation=SILU,
    global_num_experts=E, expert_map=, apply_router_weight_on_input=).

The experts class per backend (one pure class each, so a row says which kernels ran; vLLM's
oracle deploys the Triton*Or* wrappers, which fall back to Triton on shapes the kernel does
not take: `vllm-deployed` times those):
  vllm-cutlass        CutlassExpertsFp8: vLLM's CUTLASS grouped FP8 GEMM (`cutlass_moe_mm`),
                      per-tensor and per-channel weights, dynamic activations; vLLM enables it
                      for compressed-tensors checkpoints (allow_vllm_cutlass)
  deepgemm            DeepGemmExperts: DeepGEMM's grouped FP8 block128 GEMM, contiguous
                      layout (vllm/third_party/deep_gemm, JIT-compiled with the machine's nvcc);
                      weights through prepare_fp8_moe_layer_for_deepgemm
  flashinfer-cutlass  FlashInferExperts: FlashInfer's CUTLASS fused MoE (flashinfer-python as
                      vLLM pins it), bf16 and block FP8 on sm90
  triton-kernels      UnfusedOAITritonExperts: OpenAI's triton_kernels `matmul_ogs`
                      (vllm/third_party/triton_kernels), bf16 weights as [E, K, N]; vLLM
                      deploys the class for MXFP4 weights only, so this is the kernel off its
                      deployment: the row says so
  vllm-deployed       select_fp8_moe_backend / select_unquantized_moe_backend with vLLM's
                      defaults for the checkpoint's quantisation method (module constant
                      CHECKPOINT), then the class it returns; the row's `kernel_class` names it

A class's own `is_supported_config` (vLLM's verdict: device, scheme, parallel config) is
asked before anything is prepared; a refusal is the point's `unsupported` row with vLLM's
reason. Monolithic classes (FlashInfer TRT-LLM: they route inside the kernel from router
logits) take no top-k ids and are refused here.
"""
from __future__ import annotations

import importlib
from types import SimpleNamespace

import torch

from ..core.errors import one_line
from . import Backend, Weights, register
from .vllm_fused import BLOCK_SHAPE, VllmBackend, quant_kwargs, vllm_version

MOE = "vllm.model_executor.layers.fused_moe"
# the quantisation method of the checkpoints a seed scheme comes from, and what vLLM's
# method passes the oracle (fp8.py Fp8MoEMethod; compressed_tensors_moe_w8a8_fp8.py):
# (weight key, activation key, allow_vllm_cutlass)
CHECKPOINT = {
    "fp8-tensor": ("kFp8StaticTensorSym", "kFp8DynamicTensorSym", False),  # Fp8Config, dynamic
    "fp8-channel": ("kFp8StaticChannelSym", "kFp8DynamicTokenSym", True),  # compressed-tensors
    "fp8-block128": ("kFp8Static128BlockSym", "kFp8Dynamic128Sym", False),  # Fp8Config, block
}
ROUTING = {"llama4": "Llama4", "deepseek": "DeepSeekV3"}  # else Renormalize / Default


def _mod(name: str):
    return importlib.import_module(f"{MOE}.{name}")


def quant_keys(scheme: str) -> tuple:
    """vLLM's (weight key, activation key, allow_vllm_cutlass) for a moe-lab scheme; (None,
    None, False) unquantised."""
    if scheme not in CHECKPOINT:
        return None, None, False
    qu = importlib.import_module("vllm.model_executor.layers.quantization.utils.quant_utils")
    w, a, allow = CHECKPOINT[scheme]
    return getattr(qu, w), getattr(qu, a), allow


def moe_config(problem, device="cuda", moe_backend: str = "auto"):
    """The FusedMoEConfig vLLM's layer builds for this point (layer.py): TP without EP shards
    I by tp (tp_size = tp); TP+EP gives every rank whole experts (tp_size 1, ep_size = tp);
    no data parallelism."""
    cfg = _mod("config")
    act = _mod("activation").MoEActivation
    ep = problem.ep > 1
    par = cfg.FusedMoEParallelConfig(
        tp_size=1 if ep else problem.tp, tp_rank=0, pcp_size=1, pcp_rank=0, dp_size=1,
        dp_rank=0, ep_size=problem.ep if ep else 1, ep_rank=problem.ep_rank if ep else 0,
        sp_size=1, use_ep=ep, all2all_backend="allgather_reducescatter", enable_eplb=False)
    m = problem.model
    routing = ROUTING.get(m.router, "Renormalize" if m.renormalize else "Default")
    return cfg.FusedMoEConfig(
        num_experts=problem.experts, experts_per_token=problem.topk, hidden_dim=problem.hidden,
        intermediate_size=problem.inter * par.tp_size, num_local_experts=problem.local_experts,
        num_logical_experts=problem.experts, activation=act.SILU, device=device,
        routing_method=getattr(cfg.RoutingMethodType, routing), moe_parallel_config=par,
        in_dtype=torch.bfloat16 if problem.dtype != "fp16" else torch.float16,
        moe_backend=moe_backend)


def _standard():
    return importlib.import_module(f"{MOE}.modular_kernel").FusedMoEActivationFormat.Standard


def verdict(cls, problem, config=None) -> tuple[bool, str]:
    """vLLM's own `is_supported_config` for an experts class at this point."""
    w, a, _ = quant_keys(problem.dtype)
    ok, why = cls.is_supported_config(cls, config or moe_config(problem), w, a, _standard())
    return bool(ok), "" if ok else f"vLLM: {cls.__name__}: {why}"


def oracle_choice(problem, config=None):
    """(backend enum, experts class) vLLM's oracle picks for the point with its defaults
    (moe_backend auto, no VLLM_USE_DEEP_GEMM override); raises vLLM's error when none fits."""
    config = config or moe_config(problem)
    if problem.is_fp8:
        w, a, allow = quant_keys(problem.dtype)
        return _mod("oracle.fp8").select_fp8_moe_backend(config, w, a,
                                                        allow_vllm_cutlass=allow)
    return _mod("oracle.unquantized").select_unquantized_moe_backend(config)


def workspace(device) -> None:
    """vLLM's modular kernel takes its scratch buffers from the process's workspace manager,
    which vLLM's GPU worker starts before any layer runs (v1/worker/gpu_worker.py:
    init_workspace_manager(device)); started here once per process, on the point's device
    (without it every path failed on an H100: 'WorkspaceManager not initialized')."""
    ws = importlib.import_module("vllm.v1.worker.workspace")
    if not ws.is_workspace_manager_initialized():
        ws.init_workspace_manager(torch.device(device))


def build_kernel(problem, weights: Weights, backend, cls, config=None, kn_weights=False):
    """(kernel, w13, w2) as vLLM's method holds them after loading: weights converted for the
    backend, quant config, prepare/finalize and experts, outside timing. kn_weights: bf16
    weights as [E, K, N] (triton_kernels' matmul_ogs) instead of the backend's format."""
    workspace(weights.w1.device)
    config = config or moe_config(problem)
    if problem.is_fp8:
        o = _mod("oracle.fp8")
        qw = weights.quant
        if qw is None:
            raise ValueError(f"{cls.__name__} was given unquantised weights for an fp8 point")
        kw = quant_kwargs(problem.dtype, qw.w1_scale, qw.w2_scale)
        block = problem.dtype == "fp8-block128"
        layer = SimpleNamespace(moe_config=config, activation=config.activation,
                                **({"weight_block_size": list(BLOCK_SHAPE)} if block else {}))
        w13, w2, s13, s2 = o.convert_to_fp8_moe_kernel_format(
            backend, layer, qw.w1, qw.w2, kw.pop("w1_scale"), kw.pop("w2_scale"), None, None)
        qc = o.make_fp8_moe_quant_config(backend, w1_scale=s13, w2_scale=s2, a1_scale=None,
                                         a2_scale=None, **kw)
        kernel = o.make_fp8_moe_kernel(qc, config, cls, backend)
    else:
        o = _mod("oracle.unquantized")
        w13, w2 = weights.w1, weights.w2
        if kn_weights:
            w13, w2 = w13.transpose(1, 2).contiguous(), w2.transpose(1, 2).contiguous()
        else:
            w13, w2 = o.convert_to_unquantized_kernel_format(backend, config, w13, w2)
        qc = _mod("config").FUSED_MOE_UNQUANTIZED_CONFIG
        kernel = o.make_unquantized_moe_kernel(qc, config, backend, cls)
    return kernel, w13, w2


def _apply_fn(problem, kernel, w13, w2, expert_map):
    act = _mod("activation").MoEActivation.SILU
    E, woi = problem.experts, bool(problem.weight_on_input)

    def fn(x, topk_weights, topk_ids):
        return kernel.apply(x, w13, w2, topk_weights, topk_ids, activation=act,
                            global_num_experts=E, expert_map=expert_map,
                            apply_router_weight_on_input=woi)
    return fn


class _VllmPath(Backend):
    """One of vLLM's experts classes through its modular kernel (module doc)."""
    experts: tuple[str, str] = ("", "")  # (module under fused_moe, class)
    fp8_enum = None  # Fp8MoeBackend member whose weight format the class takes
    bf16_enum = None  # UnquantizedMoeBackend member, where the class runs bf16
    off_label = ""  # why vLLM would not pick this class for the point, where it never would
    needs: tuple[str, ...] = ()  # import names the path needs beyond vLLM
    kn_weights = False  # bf16 weights as [E, K, N] (build_kernel)
    fp8_formats = ("e4m3fn",)

    def available(self):
        ok, why = VllmBackend().available()
        if not ok:
            return ok, why
        for name in self.needs:
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - any import failure is the reason
                return False, f"{self.name} needs {name}, which does not import here: {one_line(exc)}"
        try:
            self._class()
        except Exception as exc:  # noqa: BLE001
            return False, f"vllm {vllm_version()} has no {'.'.join(self.experts)}: {exc}"
        return True, ""

    def _class(self):
        return getattr(_mod(self.experts[0]), self.experts[1])

    def _enum(self, problem):
        if problem.is_fp8:
            return getattr(_mod("oracle.fp8").Fp8MoeBackend, self.fp8_enum) if self.fp8_enum else None
        return getattr(_mod("oracle.unquantized").UnquantizedMoeBackend,
                       self.bf16_enum) if self.bf16_enum else None

    def supports(self, problem, device):
        if not str(device).startswith("cuda"):
            return False, f"{self.name} runs on an NVIDIA GPU only"
        if problem.dtype not in ("bf16",) + self.quant_schemes or self._enum(problem) is None:
            return False, f"{self.name} has no {problem.dtype} path in vLLM {vllm_version()}"
        if self.off_label:
            return True, ""
        return verdict(self._class(), problem)

    def prepare(self, problem, weights: Weights):
        cls = self._class()
        kernel, w13, w2 = build_kernel(problem, weights, self._enum(problem), cls,
                                       kn_weights=self.kn_weights)
        fn = _apply_fn(problem, kernel, w13, w2, weights.expert_map)
        fn.row_facts = dict(backend_version=f"vllm {vllm_version()}",
                            kernel_class=cls.__name__ + (f" ({self.off_label})"
                                                         if self.off_label else ""))
        return fn

    def info(self):
        return {"vllm": vllm_version(), "vllm_path": ".".join(self.experts)}


class _Fp8Path(_VllmPath):
    """An FP8-only path: asked for every scheme, so a scheme vLLM's class does not take is a
    row with vLLM's reason."""
    quant_schemes = ("fp8-tensor", "fp8-channel", "fp8-block128")
    fp8_only = True


@register
class VllmCutlass(_Fp8Path):
    name = "vllm-cutlass"
    label, color = "vllm CUTLASS", "darkgoldenrod"
    description = "vLLM's CUTLASS grouped FP8 MoE (CutlassExpertsFp8), per-tensor and per-channel"
    experts, fp8_enum = ("experts.cutlass_moe", "CutlassExpertsFp8"), "VLLM_CUTLASS"


@register
class DeepGemm(_Fp8Path):
    name = "deepgemm"
    label, color = "DeepGEMM", "teal"
    description = "DeepGEMM's grouped FP8 block128 GEMMs as vLLM calls them (DeepGemmExperts)"
    experts, fp8_enum = ("experts.deep_gemm_moe", "DeepGemmExperts"), "DEEPGEMM"
    needs = ("vllm.third_party.deep_gemm",)


@register
class FlashInferCutlass(_VllmPath):
    name = "flashinfer-cutlass"
    label, color = "FlashInfer CUTLASS", "crimson"
    description = "FlashInfer's CUTLASS fused MoE as vLLM calls it (FlashInferExperts)"
    quant_schemes = ("fp8-tensor", "fp8-channel", "fp8-block128")
    experts, needs = ("experts.flashinfer_cutlass_moe", "FlashInferExperts"), ("flashinfer",)
    fp8_enum = bf16_enum = "FLASHINFER_CUTLASS"  # one class for bf16 and block FP8 on sm90


@register
class TritonKernels(_VllmPath):
    name = "triton-kernels"
    label, color = "triton_kernels (OpenAI)", "slateblue"
    description = "OpenAI's triton_kernels matmul_ogs MoE, bf16 (vLLM's UnfusedOAITritonExperts)"
    experts = ("experts.gpt_oss_triton_kernels_moe", "UnfusedOAITritonExperts")
    bf16_enum = "TRITON"  # only names the kernel's weight format: unquantised, as loaded
    kn_weights = True  # matmul_ogs takes [E, K, N]
    off_label = "vLLM deploys it for MXFP4 weights only; bf16 weights here"

    def supports(self, problem, device):
        ok, why = super().supports(problem, device)
        if not ok:
            return ok, why
        cls = self._class()
        if not cls._supports_current_device():
            return False, f"vLLM: {cls.__name__}: not on this device (Hopper or Blackwell, triton_kernels)"
        return True, ""


@register
class VllmDeployed(Backend):
    name = "vllm-deployed"
    label, color = "vllm as deployed", "indigo"
    description = ("the experts class vLLM's own oracle picks for the point on this GPU, with "
                   "its defaults (the row's kernel_class names it)")
    quant_schemes = ("fp8-tensor", "fp8-channel", "fp8-block128")
    fp8_formats = ("e4m3fn",)

    def available(self):
        return VllmBackend().available()

    def supports(self, problem, device):
        if not str(device).startswith("cuda"):
            return False, "vllm-deployed runs on an NVIDIA GPU only"
        if problem.dtype not in ("bf16",) + self.quant_schemes:
            return False, f"vLLM has no {problem.dtype} MoE path here"
        try:
            backend, cls = oracle_choice(problem)
        except Exception as exc:  # noqa: BLE001 - vLLM's refusal (or its failure) is the reason
            return False, f"vLLM's oracle found no experts class: {one_line(exc)}"
        mk = importlib.import_module(f"{MOE}.modular_kernel")
        if cls is None or issubclass(cls, mk.FusedMoEExpertsMonolithic):
            return False, (f"vLLM's oracle picks {getattr(cls, '__name__', backend)}, which routes "
                           f"inside the kernel from router logits (no top-k ids to give it)")
        return True, ""

    def prepare(self, problem, weights: Weights):
        backend, cls = oracle_choice(problem)
        kernel, w13, w2 = build_kernel(problem, weights, backend, cls)
        fn = _apply_fn(problem, kernel, w13, w2, weights.expert_map)
        fn.row_facts = dict(backend_version=f"vllm {vllm_version()}",
                            kernel_class=f"{cls.__name__} ({backend.name})")
        return fn

    def info(self):
        return {"vllm": vllm_version(), "vllm_path": "the oracle's pick"}
