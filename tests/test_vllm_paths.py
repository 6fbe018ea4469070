"""vLLM's Hopper MoE paths and `vllm-deployed` (moe_lab.backends.vllm_paths) against the real
vllm 0.26.0 package's Python (tests/_vllm_package.py). Their kernels need a Hopper GPU; what
a CPU can hold them to: the layer configuration vLLM builds for each seed sharding, the
quantisation keys its checkpoint methods hand the oracle (read from vLLM's own source and
support tables), and one clear refusal per backend where it cannot run."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from moe_lab import api as ml
from moe_lab.backends import backend_class, get, names
from moe_lab.backends import vllm_paths as vp
from moe_lab.core.problems import make_problem

import _vllm_package

PATHS = ("vllm-cutlass", "deepgemm", "flashinfer-cutlass", "triton-kernels", "vllm-deployed")
# issue 64's seed shapes: (model, tp, ep, scheme)
SEEDS = [("llama4-scout-16e", 8, 1, "bf16"), ("llama4-maverick-128e", 8, 1, "bf16"),
         ("qwen3-235b-a22b", 8, 1, "bf16"), ("deepseek-r1", 8, 8, "bf16"),
         ("deepseek-r1", 8, 8, "fp8-block128"), ("deepseek-r1", 8, 1, "fp8-block128"),
         ("qwen3-235b-a22b", 8, 8, "fp8-block128"), ("llama4-scout-16e", 8, 1, "fp8-channel"),
         ("llama4-maverick-128e", 8, 1, "fp8-channel")]


@pytest.fixture(scope="module")
def vllm():
    try:
        _vllm_package.import_vllm()
    except (ImportError, OSError) as exc:
        pytest.skip(f"the vllm {_vllm_package.VERSION} package cannot be had here: {exc}")
    import importlib
    return lambda name: importlib.import_module(f"{vp.MOE}.{name}")


def test_every_path_is_a_backend_with_its_own_look():
    assert set(PATHS) <= set(names())
    others = {backend_class(n).color for n in names() if n not in PATHS}
    ours = [backend_class(n).color for n in PATHS]
    assert len(set(ours)) == len(ours) and not set(ours) & others, "a path's colour is taken"
    for n in PATHS:
        assert backend_class(n).description


@pytest.mark.parametrize("model,tp,ep,scheme", SEEDS)
def test_the_layer_config_is_the_one_vllm_builds_for_the_sharding(vllm, model, tp, ep, scheme):
    p = make_problem(model, 64, scheme, tp, ep, 0)
    c = vp.moe_config(p, device="cpu")
    assert type(c) is vllm("config").FusedMoEConfig  # vLLM's dataclass, its __post_init__ ran
    assert c.intermediate_size_per_partition == p.inter  # I per rank, as the weights hold it
    assert c.num_local_experts == p.local_experts and c.num_experts == p.experts
    par = c.moe_parallel_config
    assert par.use_ep == (ep > 1) and par.ep_size == ep
    assert par.tp_size == (1 if ep > 1 else tp)  # under EP a rank holds whole experts
    assert not par.use_all2all_kernels  # no DP: vLLM's NoDPEP prepare/finalize, as measured
    assert c.experts_per_token == p.topk and c.hidden_dim == p.hidden


def test_the_quant_keys_are_what_vllm_s_checkpoint_methods_pass(vllm):
    """fp8-block128 and fp8-tensor come from Fp8Config checkpoints (DeepSeek-R1's; CUTLASS
    not allowed), fp8-channel from compressed-tensors ones (Llama-4 Maverick FP8; allowed):
    the flag is read from vLLM's own methods, the keys from its kernels' support tables."""
    import vllm.model_executor.layers.quantization.fp8 as fp8_method
    quant = Path(fp8_method.__file__).parent  # compressed-tensors needs a package CI lacks: read
    ct = (quant / "compressed_tensors" / "compressed_tensors_moe" /
          "compressed_tensors_moe_w8a8_fp8.py").read_text()
    assert "allow_vllm_cutlass=False" in inspect.getsource(fp8_method.Fp8MoEMethod.__init__)
    assert "kFp8StaticChannelSym" in ct and "allow_vllm_cutlass=True" in ct
    assert [vp.quant_keys(s)[2] for s in ("fp8-tensor", "fp8-channel", "fp8-block128")] == \
        [False, True, False]
    cutlass = vllm("experts.cutlass_moe").CutlassExpertsFp8
    deepgemm = vllm("experts.deep_gemm_moe").DeepGemmExperts
    takes = {s: (cutlass._supports_quant_scheme(*vp.quant_keys(s)[:2]),
                 deepgemm._supports_quant_scheme(*vp.quant_keys(s)[:2]))
             for s in ("fp8-tensor", "fp8-channel", "fp8-block128")}
    assert takes == {"fp8-tensor": (True, False), "fp8-channel": (True, False),
                     "fp8-block128": (False, True)}
    assert vp.quant_keys("bf16") == (None, None, False)


def test_the_oracle_is_asked_with_the_point_and_refuses_in_one_line_off_a_gpu(vllm):
    """On a CPU vLLM's oracle finds no experts class: the point's refusal is one line that
    says so (never a traceback), for bf16 and fp8 points."""
    for scheme in ("bf16", "fp8-block128"):
        p = make_problem("deepseek-r1", 64, scheme, 8, 8, 0)
        ok, why = get("vllm-deployed").supports(p, "cuda")
        assert not ok and "oracle" in why and "\n" not in why
    for name in PATHS[:-1]:
        p = make_problem("deepseek-r1", 64, "fp8-block128", 8, 8, 0)
        ok, why = get(name).supports(p, "cuda")
        assert not ok and "\n" not in why and why


@pytest.mark.parametrize("name", PATHS)
def test_on_this_cpu_each_path_is_a_row_with_its_reason(name, tmp_path):
    rows = ml.measure("custom:H=64,I=64,E=4,k=2", 4, backends=name, tp=1, run=tmp_path / "r")
    assert len(rows) == 1
    r = rows.iloc[0]
    assert r.status in ("unavailable", "unsupported") and r.error and "\n" not in r.error
    assert r.median_us != r.median_us  # NaN: nothing timed


def test_a_block_scheme_cutlass_refusal_is_vllm_s_own(vllm):
    """vllm-cutlass at fp8-block128 is refused with vLLM's verdict on the scheme (its sm90
    CUTLASS MoE takes no 128x128 block scales), not a reason of ours."""
    p = make_problem("deepseek-r1", 64, "fp8-block128", 8, 8, 0)
    cls = get("vllm-cutlass")._class()
    cfg = vp.moe_config(p, device="cpu")
    assert not cls._supports_quant_scheme(*vp.quant_keys("fp8-block128")[:2])
    ok, why = vp.verdict(cls, p, cfg)
    assert not ok and why.startswith("vLLM: CutlassExpertsFp8:")


def test_vllm_s_workspace_is_started_on_the_point_s_device_before_the_kernel_is_built(
        vllm, monkeypatch):
    """vLLM's GPU worker starts its workspace manager before any layer runs; every modular
    kernel path failed on an H100 without it ('WorkspaceManager not initialized'). The
    kernel's build starts it (once, on the weights' device) before anything else."""
    import importlib

    import torch

    from moe_lab.backends import Weights
    ws = importlib.import_module("vllm.v1.worker.workspace")
    ws.reset_workspace_manager()
    assert not ws.is_workspace_manager_initialized()

    class Built(Exception):
        pass

    def config(*a, **k):
        assert ws.is_workspace_manager_initialized(), "the kernel was configured first"
        raise Built

    monkeypatch.setattr(vp, "moe_config", config)
    p = make_problem("qwen3-30b-a3b", 4, "bf16", 8, 1, 0)
    w = Weights(torch.zeros(2, 4, 8), torch.zeros(2, 8, 2), None)
    with pytest.raises(Built):
        vp.build_kernel(p, w, None, object)
    first = ws.current_workspace_manager()
    assert first._device == torch.device("cpu")
    with pytest.raises(Built):
        vp.build_kernel(p, w, None, object)
    assert ws.current_workspace_manager() is first  # once per process, as the worker does
    ws.reset_workspace_manager()
