"""`vllm`: vLLM's own Triton fused MoE, pinned: the seeds' "No AITER" baseline.

Written to and checked against vllm 0.26.0 (the release that pins torch 2.11 / CUDA 13),
read from its wheel; 0.26.0 is also the oldest release it supports: `available()` refuses
an older one by name (vLLM's MoE API moved release by release; an older one was never
read). A newer one is used when its calls still bind (`bind_call`), else refused naming
the argument.

What runs: `vllm.model_executor.layers.fused_moe.fused_moe.fused_experts(x, w1, w2,
topk_weights, topk_ids, apply_router_weight_on_input=, global_num_experts=, expert_map=,
quant_config=)`, vLLM's functional Triton entry: `torch.ops.vllm.fused_experts` ->
`fused_experts_impl`: configuration by `try_get_optimal_moe_config`, [fp8: activation
quantisation], `moe_align_block_size` (its `_moe_C` op, the expert map applied there),
`fused_moe_kernel` (gemm1), `silu_and_mul`, [fp8: quantisation], `fused_moe_kernel`
(gemm2, router weight), `moe_sum`: the kernels of `TritonExperts`, which vLLM's MoE
oracle picks when aiter is off.

Pinned: vLLM's `FusedMoE` layer chooses its experts through the oracle, and on ROCm with
VLLM_ROCM_USE_AITER=1 and VLLM_ROCM_USE_AITER_MOE=1 (the seeds' settings) that is aiter's
fused_moe (`AiterExperts`); on Hopper, DeepGEMM, CUTLASS or FlashInfer for some schemes.
This backend never goes through the layer: `fused_experts` launches the Triton kernels
whatever those variables say. The one DeepGEMM switch that reaches the Triton path is
the power-of-two (UE8M0) rounding of block-fp8 activation scales
(`is_deep_gemm_e8m0_used`, on by default where vLLM finds DeepGEMM on Hopper or
Blackwell); `prepare` turns it off (VLLM_USE_DEEP_GEMM_E8M0=0), so the scales are the
Triton path's own.

Configuration: vLLM's own lookup for the device (`get_moe_configs`: the file named by
`get_config_file_name` in VLLM_TUNED_CONFIG_FOLDER first, then among the files vLLM ships,
else `get_default_config`; the entry of the token count nearest M). vLLM 0.26 takes one
configuration for both GEMMs of a call (`fused_experts_impl` hands the same `config` to
both launches) and reads no `_down` file, so a configuration here is one stage, `gemm1`.
  config=None (`--config default`): vLLM as shipped: the lookup without a user folder
      (a VLLM_TUNED_CONFIG_FOLDER of the caller's is set aside while the call runs).
  config from files whose name is the one vLLM looks up (`--config tuned`: moe-lab tune's
      files under data/configs/<device>/vllm/): VLLM_TUNED_CONFIG_FOLDER is their folder
      while the call runs, and vLLM finds, reads and picks from them itself.
  a configuration or a table without such a file (moe-lab tune's candidates, `--config
      FILE` of another name): vLLM's `override_config`, the hook its own tuning script
      (benchmarks/kernels/benchmark_moe.py) times candidates with; a table gives the entry
      nearest the call's token count, vLLM's rule.
`get_moe_configs` is cached per shape (lru_cache): the cache is cleared when a call needs
another folder than the last one (never in between, so an eager call reads no file).
`fn.row_facts` names the file vLLM used (the user folder's as a path under the checkout),
or `default`, and the vLLM version; the sweep puts both on the row (`config_file`,
`backend_version`).

Tuning (`moe-lab tune --backend vllm`): moe_lab.measuring.tuning's search over the space of
moe_lab.backends._triton_configs (aiter-triton's), one stage; the default it times is
vLLM's own choice for the key (shipped file or get_default_config); the winners are written
as `E=<local experts>,N=<I per rank>,device_name=<the device, vLLM's name>[,dtype=fp8_w8a8]
[,block_shape=[128,128]].json`, vLLM's name and format (core.devices.file_device_name: vLLM names every H200 of the family
NVIDIA_H200). vLLM's name does not tell fp8-tensor from fp8-channel: one file serves both.

Schemes, through vLLM's quant config (`fp8_w8a8_moe_quant_config`), with moe-lab's scales
(moe_lab.core.quant) as vLLM lays them out:
  fp8-tensor    w scales [E] (one per expert), activations dynamic per tensor
  fp8-channel   w scales [E, N, 1] (moe-lab's [E, N] with a trailing unit dimension,
                as vLLM's checkpoints load), per_act_token_quant and per_out_ch_quant
  fp8-block128  w scales [E, ceil(N/128), ceil(K/128)] as they are, block_shape [128, 128]
The fp8 dtype is vLLM's platform's (`current_platform.fp8_dtype()`: e4m3fnuz on MI300);
a checkpoint in another format is refused.

Expert parallelism: w1/w2 hold this rank's experts, `expert_map` (int32[E], -1 for
remote) and `global_num_experts=E` as vLLM's layer passes them.
"""
from __future__ import annotations

import importlib.util
import inspect
import os
from pathlib import Path

import torch

from ..core.environment import vllm_device_code
from . import Backend, Weights, register
from ._triton_configs import FINE_KEYS, file_stem, gemm_space, is_coarse, nearest

CHECKED = "0.26.0"  # the release read and tested; also the oldest supported
OLDEST = CHECKED
BLOCK_SHAPE = [128, 128]
FUSED_MOE = "vllm.model_executor.layers.fused_moe.fused_moe"
FUSED_MOE_PKG = "vllm.model_executor.layers.fused_moe"  # override_config lives here
QUANT_CONFIG = "vllm.model_executor.layers.fused_moe.config"
# vLLM's names for the dtype part of its config files (`_get_config_dtype_str`)
CONFIG_DTYPE = {"bf16": None, "fp16": None, "fp32": "float32", "fp8-tensor": "fp8_w8a8",
                "fp8-channel": "fp8_w8a8", "fp8-block128": "fp8_w8a8"}
PINNED_ENV = {"VLLM_USE_DEEP_GEMM_E8M0": "0"}
TUNED_FOLDER = "VLLM_TUNED_CONFIG_FOLDER"
STAGE = "gemm1"  # one configuration for both GEMMs (module doc)


def _version_tuple(v: str) -> tuple:
    out = []
    for part in v.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def vllm_version() -> str | None:
    """The installed vLLM's version, read without importing it (None: not installed)."""
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version("vllm")
    except PackageNotFoundError:
        pass
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "_version.py")
    try:  # a wheel unpacked without its metadata: vllm/_version.py says it
        text = open(path).read()
    except OSError:
        return "unknown"
    for line in text.splitlines():
        if line.startswith(("__version__", "version")) and "=" in line:
            return line.split("=", 1)[1].strip().strip("'\"")
    return "unknown"


def quant_kwargs(scheme: str, w1_scale, w2_scale) -> dict:
    """The keyword arguments of vLLM's `fp8_w8a8_moe_quant_config` for a moe-lab scheme and
    its weight scales (module doc); activation scales dynamic (None)."""
    if scheme == "fp8-tensor":
        return dict(w1_scale=w1_scale, w2_scale=w2_scale)
    if scheme == "fp8-channel":
        return dict(w1_scale=w1_scale.unsqueeze(-1), w2_scale=w2_scale.unsqueeze(-1),
                    per_act_token_quant=True, per_out_ch_quant=True)
    if scheme == "fp8-block128":
        return dict(w1_scale=w1_scale, w2_scale=w2_scale, block_shape=list(BLOCK_SHAPE))
    raise ValueError(f"vllm has no {scheme} path here")


def experts_kwargs(problem, expert_map, quant_config) -> dict:
    """The keyword arguments of `fused_experts` beside (x, w1, w2, topk_weights, topk_ids)."""
    return dict(apply_router_weight_on_input=bool(problem.weight_on_input),
                global_num_experts=problem.experts, expert_map=expert_map,
                quant_config=quant_config)


def bind_call(fn, args: tuple, kwargs: dict) -> inspect.BoundArguments:
    """inspect.signature(fn).bind(*args, **kwargs); TypeError naming the vLLM function and
    its signature when the installed vLLM does not take this call."""
    sig = inspect.signature(fn)
    try:
        return sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"vllm {vllm_version()} {fn.__module__}.{fn.__name__} does not take "
                        f"moe-lab's call ({exc}); its signature is {sig}") from None


def config_dtype(problem) -> str | None:
    return CONFIG_DTYPE[problem.dtype]


def config_choice(problem, fm=None) -> str:
    """The configuration file vLLM's lookup uses for this problem here (`get_moe_configs`'
    order: VLLM_TUNED_CONFIG_FOLDER, then vLLM's shipped configs/): its name (the full path
    when from the user's folder), or `default` (vLLM's get_default_config)."""
    fm = fm or importlib.import_module(FUSED_MOE)
    import vllm.envs as envs
    if envs.VLLM_BATCH_INVARIANT:
        return "default (VLLM_BATCH_INVARIANT)"
    block = list(BLOCK_SHAPE) if problem.dtype == "fp8-block128" else None
    name = fm.get_config_file_name(problem.local_experts, problem.inter, config_dtype(problem),
                                   block)
    user = envs.VLLM_TUNED_CONFIG_FOLDER
    if user is not None and os.path.exists(os.path.join(user, name)):
        return os.path.join(user, name)
    if os.path.exists(os.path.join(os.path.dirname(os.path.realpath(fm.__file__)),
                                   "configs", name)):
        return name
    return "default"


def config_file_name(problem, device_name: str) -> str:
    """The file vLLM's lookup reads for this problem on that device."""
    return file_stem(problem.local_experts, problem.inter, device_name,
                     problem.dtype) + ".json"


_LOOKUP = [object()]  # the user folder vLLM's (cached) lookup was last cleared for


def use_lookup(fm, folder) -> None:
    """VLLM_TUNED_CONFIG_FOLDER = folder (None: unset, vLLM as shipped) for the calls that
    follow; get_moe_configs' cache cleared when that is not what it was last read with."""
    want = None if folder is None else str(folder)
    if os.environ.get(TUNED_FOLDER) != want or _LOOKUP[0] != want:
        if want is None:
            os.environ.pop(TUNED_FOLDER, None)
        else:
            os.environ[TUNED_FOLDER] = want
        fm.get_moe_configs.cache_clear()
        _LOOKUP[0] = want


def looked_up(fm, problem, T: int, folder=None) -> dict:
    """The configuration vLLM's own lookup gives fused_experts at T tokens
    (try_get_optimal_moe_config, as fused_experts_impl calls it: the local experts' weight
    shapes), reading `folder` (None: vLLM as shipped) first."""
    use_lookup(fm, folder)
    H, inter, E = problem.hidden, problem.inter, problem.local_experts
    return dict(fm.try_get_optimal_moe_config(
        (E, 2 * inter, H), (E, H, inter), problem.topk, config_dtype(problem), T,
        block_shape=list(BLOCK_SHAPE) if problem.dtype == "fp8-block128" else None))


def _shown(path) -> str:
    """A path as a row names it: under the checkout, relative to it (a row must not carry
    the measuring machine's folders)."""
    from ..core.environment import REPO_ROOT
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT.resolve()))
    except ValueError:
        return str(path)


def pin_env() -> None:
    """Turn off the DeepGEMM UE8M0 rounding of the Triton path's activation scales (module
    doc), including a decision vLLM cached before."""
    os.environ.update(PINNED_ENV)
    try:
        from vllm.utils.deep_gemm import is_deep_gemm_e8m0_used
        is_deep_gemm_e8m0_used.cache_clear()
    except (ImportError, AttributeError):
        pass


@register
class VllmBackend(Backend):
    name = "vllm"
    description = (f"vLLM's Triton fused_experts, pinned (never aiter, DeepGEMM or CUTLASS), "
                   f"vLLM's config files, bf16 and fp8; vllm >= {OLDEST}")
    label, color = "vllm (Triton)", "tab:purple"
    quant_schemes = ("fp8-tensor", "fp8-channel", "fp8-block128")
    # fused_experts_impl's caches: gemm1 out [T, k, 2I], act out [T*k, I], gemm2 out [T, k, H]
    intermediates = [("cache1", "all", "2I", "act"), ("cache2", "all", "I", "act"),
                     ("cache3", "all", "H", "act")]

    def available(self):
        v = vllm_version()
        if v is None:
            return False, (f"vLLM is not installed (pip install vllm=={CHECKED}; its fused MoE "
                           f"needs a CUDA or ROCm GPU)")
        if v != "unknown" and _version_tuple(v) < _version_tuple(OLDEST):
            return False, (f"vllm {v} is older than {OLDEST}, the oldest release this backend "
                           f"is written to (pip install vllm>={OLDEST})")
        try:
            fm = importlib.import_module(FUSED_MOE)
            qc = importlib.import_module(QUANT_CONFIG)
            from vllm.platforms import current_platform
        except Exception as exc:
            return False, (f"import of vLLM's fused MoE failed: {type(exc).__name__}: "
                           f"{str(exc).splitlines()[0][:160] if str(exc) else ''}")
        for mod, attr in ((fm, "fused_experts"), (fm, "get_config_file_name"),
                          (qc, "fp8_w8a8_moe_quant_config")):
            if not hasattr(mod, attr):
                return False, f"vllm {v} has no {mod.__name__}.{attr}"
        try:
            bind_call(fm.fused_experts, (None,) * 5, experts_kwargs(_Probe, None, None))
        except TypeError as exc:
            return False, str(exc)
        if not current_platform.is_cuda_alike():
            return False, (f"vLLM found no CUDA or ROCm platform (it detected "
                           f"{type(current_platform).__name__}; on NVIDIA it needs "
                           f"vllm/third_party/pynvml.py and a visible GPU)")
        if not torch.cuda.is_available():
            return False, "vLLM's fused MoE needs a GPU (none visible to torch)"
        try:
            torch.ops._moe_C.moe_align_block_size  # noqa: B018 (vLLM's compiled MoE ops)
        except (AttributeError, RuntimeError):
            return False, ("vLLM's compiled MoE ops are missing (vllm/_moe_C*.so did not load: "
                           "a wheel built for another torch or CUDA?)")
        return True, ""

    def supports(self, problem, device):
        if not str(device).startswith("cuda"):
            return False, "vLLM's Triton fused MoE runs on GPU only"
        if problem.dtype not in ("bf16", "fp16") + self.quant_schemes:
            return False, f"vLLM's Triton fused MoE has no {problem.dtype} path here"
        if problem.is_fp8:
            from vllm.platforms import current_platform
            from ..core.devices import fp8_format_for
            from ..core.environment import device_name
            from ..core.quant import FORMATS
            theirs, ours = current_platform.fp8_dtype(), fp8_format_for(device_name(device))
            if theirs != FORMATS[ours]:
                return False, (f"vLLM quantises activations to {theirs} here, the checkpoint "
                               f"is {ours}")
        return True, ""

    def info(self):
        return {"vllm": vllm_version(), "vllm_path": "fused_experts (Triton), pinned",
                "vllm_device_code": vllm_device_code(),
                "vllm_pinned_env": dict(PINNED_ENV)}

    # --- configurations (moe-lab tune; module doc) --------------------------------------
    tunable = True
    coarse_config = staticmethod(is_coarse)
    fine_keys = FINE_KEYS

    def default_config(self, problem) -> dict:
        """What vLLM as shipped runs at the problem's token count: its shipped file's entry
        nearest M, else get_default_config (vLLM's try_get_optimal_moe_config, no user
        folder)."""
        return {STAGE: looked_up(importlib.import_module(FUSED_MOE), problem, problem.tokens)}

    def config_space(self, problem) -> dict:
        """aiter-triton's space (moe_lab.backends._triton_configs: shared memory with the fp8
        schemes' 1-byte operands, registers, the 128-column scale block of fp8-block128,
        BLOCK_SIZE_M by the token count): one stage, both GEMMs."""
        return {STAGE: gemm_space(problem.tokens, elem_bytes=1 if problem.is_fp8 else 2,
                                  block_quant=problem.dtype == "fp8-block128")}

    def config_files(self, problem, device_name: str) -> dict:
        return {STAGE: config_file_name(problem, device_name)}

    def warm_tokens(self, problem, keys) -> list[int]:
        """Token counts whose calls compile every specialisation of vLLM's kernel the keys
        reach (moe_lab.measuring.tuning_compile): the smallest key per (naive block assignment: no
        alignment where T*k*4 <= E without EP; num_valid_tokens 1; a multiple of 16)."""
        out = {}
        for T in sorted(keys):
            n = T * problem.topk
            naive = problem.ep == 1 and n * 4 <= problem.experts
            out.setdefault((naive, n == 1, n % 16 == 0), T)
        return sorted(out.values())

    def prepare(self, problem, weights: Weights, config: dict | None = None):
        """`config`: None, vLLM as shipped; else {"gemm1": a configuration or a table {M:
        configuration}}, from files (moe_lab.storage.configs.ConfigTables: vLLM's own lookup reads
        them when their name is vLLM's) or not (vLLM's override_config); module doc."""
        fm = importlib.import_module(FUSED_MOE)
        pin_env()
        quant_config = None
        w1, w2 = weights.w1, weights.w2
        if problem.is_fp8:
            qc = importlib.import_module(QUANT_CONFIG)
            qw = weights.quant
            if qw is None:
                raise ValueError("vllm was given unquantised weights for an fp8 point")
            w1, w2 = qw.w1, qw.w2
            quant_config = qc.fp8_w8a8_moe_quant_config(
                **quant_kwargs(problem.dtype, qw.w1_scale, qw.w2_scale))
        kw = experts_kwargs(problem, weights.expert_map, quant_config)
        fused_experts = fm.fused_experts
        bind_call(fused_experts, (None,) * 5, kw)  # a call this vLLM does not take fails here
        folder, override, table, shown = None, None, None, None
        if config is not None:
            c = config[STAGE]
            path = (getattr(config, "files", None) or {}).get(STAGE)
            block = list(BLOCK_SHAPE) if problem.dtype == "fp8-block128" else None
            if path is not None and Path(path).name == fm.get_config_file_name(
                    problem.local_experts, problem.inter, config_dtype(problem), block):
                folder = Path(path).resolve().parent  # vLLM's own lookup finds it there
            elif all(isinstance(m, int) for m in c):
                table, shown = c, _shown(path) if path is not None else None
            else:
                override = dict(c)
        override_config = importlib.import_module(FUSED_MOE_PKG).override_config

        if folder is None and override is None and table is None:  # vLLM as shipped
            def fn(x, topk_weights, topk_ids):
                use_lookup(fm, None)
                return fused_experts(x, w1, w2, topk_weights, topk_ids, **kw)
        elif folder is not None:  # vLLM reads moe-lab's files from its tuned-config folder
            def fn(x, topk_weights, topk_ids):
                use_lookup(fm, folder)
                return fused_experts(x, w1, w2, topk_weights, topk_ids, **kw)
        else:
            def fn(x, topk_weights, topk_ids):
                with override_config(override or nearest(table, x.shape[0])):
                    return fused_experts(x, w1, w2, topk_weights, topk_ids, **kw)

        def launch_config(T):  # what fused_experts launches at T tokens
            if override is not None or table is not None:
                return {STAGE: dict(override or nearest(table, T))}
            return {STAGE: looked_up(fm, problem, T, folder)}
        fn.launch_config = launch_config
        use_lookup(fm, folder)
        used = config_choice(problem, fm)
        fn.row_facts = dict(config_file=_shown(used) if folder is not None else
                            shown if table is not None else None if override else used,
                            backend_version=f"vllm {vllm_version()}")
        fn.call_kwargs = kw  # what a test binds and inspects
        fn.lookup_folder = folder
        return fn


class _Probe:
    """A problem-shaped stand-in for binding the call in available() (no shapes needed)."""
    weight_on_input, experts = False, 1
