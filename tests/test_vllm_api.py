"""The `vllm` backend against the real vllm 0.26.0 package (its Python files, imported on
the CPU: tests/_vllm_package.py says how CI gets them). Its GPU kernels cannot run here,
so the backend's prepared call is run through vLLM's own code down to the kernel launch:
vLLM's compiled ops (alignment, SiLU*mul, sum, fp8 quantisation) are torch stand-ins,
and its Triton `fused_moe_kernel` a recorder of what `invoke_fused_moe_triton_kernel`
(vLLM's, with its asserts) launches."""
from __future__ import annotations

import inspect
import os

import pytest
import torch

from moe_lab.backends import Weights, get
from moe_lab.backends import vllm_fused as vb
from moe_lab.backends._triton_configs import file_names
from moe_lab.core.problems import SEED_MODELS, make_problem
from moe_lab.core.quant import quantize_weights

import _vllm_package

SCHEMES = ("bf16", "fp8-tensor", "fp8-channel", "fp8-block128")
SEED_ENV = {"VLLM_ROCM_USE_AITER": "1", "VLLM_ROCM_USE_AITER_MOE": "1"}


@pytest.fixture(scope="module")
def vllm():
    try:
        fm, qc = _vllm_package.import_vllm()
    except (ImportError, OSError) as exc:
        pytest.skip(f"the vllm {_vllm_package.VERSION} package cannot be had here: {exc}")
    return fm, qc


@pytest.fixture(autouse=True)
def h200(vllm, monkeypatch):
    """vLLM's config lookup sees an H200 (its device name, as vLLM writes it in file names)."""
    fm, _ = vllm
    monkeypatch.setattr(fm, "get_device_name_as_file_name", lambda device_id=0: "NVIDIA_H200")
    fm.get_moe_configs.cache_clear()


def _problem(dtype="bf16", ep=1, model="custom:H=256,I=256,E=8,k=2", tokens=5):
    return make_problem(model, tokens, dtype, ep, ep, 0)  # TP=EP as vLLM shards


def _weights(p, seed=0):
    g = torch.Generator().manual_seed(seed)
    E, I, H = p.local_experts, p.inter, p.hidden
    w1 = (torch.randn(E, 2 * I, H, generator=g) / H ** 0.5).to(torch.bfloat16)
    w2 = (torch.randn(E, H, I, generator=g) / I ** 0.5).to(torch.bfloat16)
    qw = quantize_weights(w1, w2, p.dtype, "e4m3fn") if p.is_fp8 else None
    return Weights(w1, w2, p.expert_map("cpu"), qw)


def _inputs(p, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(p.tokens, p.hidden, generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(p.experts, generator=g)[:p.topk]
                       for _ in range(p.tokens)]).to(torch.int32)
    w = torch.rand(p.tokens, p.topk, generator=g).softmax(-1)
    return x, w, ids


# --- the stand-ins for vLLM's compiled ops, and the kernel recorder ---------------------

class Launches(list):
    """vLLM's `fused_moe_kernel[grid](...)` launches, recorded (args by parameter name)."""

    def __init__(self, kernel):
        super().__init__()
        self.params = list(inspect.signature(kernel.fn if hasattr(kernel, "fn") else kernel)
                           .parameters)

    def __getitem__(self, grid):
        if not callable(grid):
            return list.__getitem__(self, grid)

        def launch(*args, **kw):
            self.append(dict(zip(self.params, args), **kw))
        return launch


def _align(topk_ids, block_size, num_experts, expert_map=None, pad_sorted_ids=False,
           ignore_invalid_experts=False):
    """vLLM's moe_align_block_size semantics in torch: (token, slot) pairs sorted by (local)
    expert, each expert padded to block_size with T*k; remote experts dropped."""
    flat = topk_ids.flatten().long()
    local = expert_map.long()[flat] if expert_map is not None else flat
    n_exp = int(local.max()) + 1 if local.numel() else 0
    ids, experts = [], []
    for e in range(max(n_exp, 0)):
        rows = (local == e).nonzero().flatten()
        if len(rows) == 0:
            continue
        pad = -len(rows) % block_size
        ids += rows.tolist() + [flat.numel()] * pad
        experts += [e] * ((len(rows) + pad) // block_size)
    return (torch.tensor(ids, dtype=torch.int32), torch.tensor(experts, dtype=torch.int32),
            torch.tensor([len(ids)], dtype=torch.int32))


@pytest.fixture
def run_vllm(vllm, monkeypatch):
    """Call a prepared backend fn through vLLM's real fused_experts down to the kernel
    launch, as on an H200 (the device name vLLM's config lookup sees); returns the
    launches."""
    fm, _ = vllm
    from vllm import _custom_ops as ops
    from vllm.model_executor.layers.fused_moe import utils as mu
    monkeypatch.setattr(fm, "moe_align_block_size", _align)
    monkeypatch.setattr(fm, "apply_moe_activation",
                        lambda act, out, inp, **kw: out.copy_(torch.nn.functional.silu(
                            inp[:, :out.shape[1]]) * inp[:, out.shape[1]:]))
    monkeypatch.setattr(ops, "moe_sum", lambda inp, out, *a, **k: out.copy_(inp.sum(1)))

    def fp8_quant(A, A_scale, per_act_token, block_shape=None):
        rows = A.float().reshape(A.shape[0], -1, block_shape[1]) if block_shape else A.float()
        dims = (-1,) if block_shape or per_act_token else tuple(range(A.dim()))
        s = rows.abs().amax(dim=dims, keepdim=True).clamp(min=1e-12) / 448.0
        q = (rows / s).to(torch.float8_e4m3fn).reshape(A.shape)
        return q, (s.reshape(A.shape[0], -1) if block_shape else s.reshape(-1, 1)
                   if per_act_token else s.reshape(1))
    monkeypatch.setattr(mu, "_fp8_quantize", fp8_quant)
    launches = Launches(fm.fused_moe_kernel)
    monkeypatch.setattr(fm, "fused_moe_kernel", launches)

    def run(fn, *args):
        fn(*args)
        return launches
    return run


# --- the call binds to vLLM's real signatures -------------------------------------------

@pytest.mark.parametrize("dtype", SCHEMES)
@pytest.mark.parametrize("ep", [1, 2])
def test_the_call_binds_to_vllms_fused_experts(vllm, dtype, ep):
    fm, qc = vllm
    p = _problem(dtype, ep)
    w = _weights(p)
    fn = get("vllm").prepare(p, w)
    x, tw, ti = _inputs(p)
    w1, w2 = (w.quant.w1, w.quant.w2) if p.is_fp8 else (w.w1, w.w2)
    bound = inspect.signature(fm.fused_experts).bind(x, w1, w2, tw, ti, **fn.call_kwargs)
    a = bound.arguments
    assert a["apply_router_weight_on_input"] is False and a["global_num_experts"] == p.experts
    if ep > 1:  # EP through vLLM's expert map: global -> local, -1 remote
        assert torch.equal(a["expert_map"], p.expert_map("cpu"))
        assert (a["expert_map"] == -1).sum() == p.experts - p.local_experts
    else:
        assert a["expert_map"] is None
    q = a["quant_config"]
    assert (q is None) == (not p.is_fp8)
    if p.is_fp8:
        assert isinstance(q, qc.FusedMoEQuantConfig) and q.use_fp8_w8a8
        sig = inspect.signature(qc.fp8_w8a8_moe_quant_config)
        sig.bind(**vb.quant_kwargs(dtype, w.quant.w1_scale, w.quant.w2_scale))


def test_llama4_routes_the_weight_on_the_input(vllm):
    p = make_problem("custom:H=256,I=256,E=4,k=1,router=llama4", 3, "bf16", 1, 1, 0)
    fn = get("vllm").prepare(p, _weights(p))
    assert fn.call_kwargs["apply_router_weight_on_input"] is True


def test_a_call_vllm_does_not_take_is_refused_naming_its_signature(vllm):
    fm, _ = vllm
    with pytest.raises(TypeError, match="does not take moe-lab's call.*signature is"):
        vb.bind_call(fm.fused_experts, (None,) * 5, dict(expert_mask=None))


# --- the Triton path, pinned under the seeds' environment -------------------------------

@pytest.mark.parametrize("dtype", SCHEMES)
def test_the_triton_kernels_run_under_the_seeds_aiter_settings(vllm, run_vllm, monkeypatch,
                                                               dtype):
    """VLLM_ROCM_USE_AITER=1 and VLLM_ROCM_USE_AITER_MOE=1, on a platform vLLM takes for
    ROCm: vLLM's own switch says aiter's fused MoE is on, and the backend still launches
    vLLM's Triton fused_moe_kernel twice (gemm1, gemm2) and nothing of aiter's."""
    from vllm import _aiter_ops
    from vllm.platforms import current_platform
    for k, v in SEED_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(type(current_platform), "is_rocm", classmethod(lambda cls: True))
    ops = _aiter_ops.rocm_aiter_ops
    ops.refresh_env_variables()
    assert ops._AITER_ENABLED and ops._FMOE_ENABLED  # the layer would route to aiter
    called = []
    for name in ("fused_moe", "asm_moe_tkw1", "fused_topk"):
        if hasattr(ops, name):
            monkeypatch.setattr(ops, name, lambda *a, _n=name, **k: called.append(_n))
    p = _problem(dtype)
    fn = get("vllm").prepare(p, _weights(p))
    launches = run_vllm(fn, *_inputs(p))
    assert called == []
    assert len(launches) == 2
    g1, g2 = launches
    assert g1["MUL_ROUTED_WEIGHT"] is False and g2["MUL_ROUTED_WEIGHT"] is True
    assert g1["use_fp8_w8a8"] is p.is_fp8 and g2["use_fp8_w8a8"] is p.is_fp8
    assert os.environ.get("VLLM_USE_DEEP_GEMM_E8M0") == "0"
    from vllm.utils.deep_gemm import is_deep_gemm_e8m0_used
    assert is_deep_gemm_e8m0_used() is False
    ops.refresh_env_variables()


# --- FP8 scales in the layout vLLM's kernel reads ---------------------------------------

@pytest.mark.parametrize("dtype", ["fp8-tensor", "fp8-channel", "fp8-block128"])
@pytest.mark.parametrize("ep", [1, 2])
def test_fp8_scales_reach_the_kernel_where_it_reads_them(run_vllm, dtype, ep):
    """Each weight scale the kernel loads (its pointer arithmetic, with the strides vLLM's
    launcher passes) is moe-lab's scale of that expert, output channel and K block."""
    p = _problem(dtype, ep)
    w = _weights(p)
    launches = run_vllm(get("vllm").prepare(p, w), *_inputs(p))
    assert len(launches) == 2  # gemm1 and gemm2: zip() over fewer would check fewer
    for launch, want, q in zip(launches, (w.quant.w1_scale, w.quant.w2_scale),
                               (w.quant.w1, w.quant.w2)):
        assert launch["b_ptr"] is q and q.dtype == torch.float8_e4m3fn
        s = launch["b_scale_ptr"]
        flat = s.flatten()
        E, N, K = q.shape
        se, sn, sk = launch["stride_bse"], launch["stride_bsn"], launch["stride_bsk"]
        for e in range(E):
            for n in (0, N // 2 + 1, N - 1):
                for k in (0, K - 1):
                    if dtype == "fp8-tensor":  # the kernel loads b_scale_ptr[expert]
                        got, exp = flat[e], want[e]
                    elif dtype == "fp8-channel":  # + expert * stride_bse + n * stride_bsn
                        got, exp = flat[e * se + n * sn], want[e, n]
                    else:  # + n // group_n * stride_bsn + k // group_k * stride_bsk
                        assert (launch["group_n"], launch["group_k"]) == (128, 128)
                        got = flat[e * se + n // 128 * sn + k // 128 * sk]
                        exp = want[e, n // 128, k // 128]
                    assert got == exp
        assert launch["per_channel_quant"] is (dtype == "fp8-channel")
        if dtype == "fp8-block128":
            assert launch["BLOCK_SIZE_K"] <= 128  # one scale block per K step


# --- vLLM's own configuration lookup ----------------------------------------------------

@pytest.mark.parametrize("model", SEED_MODELS)
@pytest.mark.parametrize("dtype", SCHEMES)
@pytest.mark.parametrize("ep", [1, 8])
def test_config_file_names_are_vllms(vllm, monkeypatch, model, dtype, ep):
    fm, qc = vllm
    p = make_problem(model, 64, dtype, 8, ep, 0)
    block = [128, 128] if dtype == "fp8-block128" else None
    torch_dtype = torch.float32 if dtype == "fp32" else torch.bfloat16
    want_dtype = qc._get_config_dtype_str(torch_dtype, use_fp8_w8a8=p.is_fp8)
    assert vb.config_dtype(p) == want_dtype
    name = fm.get_config_file_name(p.local_experts, p.inter, want_dtype, block)
    # moe-lab's tuned files (moe-lab tune) carry vLLM's name for the same shard
    assert file_names(p.local_experts, p.inter, "NVIDIA H200", dtype)["gemm1"] == name
    shipped = fm.get_moe_configs(p.local_experts, p.inter, want_dtype, *(block or (None, None)))
    assert (vb.config_choice(p, fm) == name) == (shipped is not None)
    assert vb.config_choice(p, fm) in (name, "default")


def test_the_row_names_the_config_vllm_used_and_its_version(vllm, run_vllm, monkeypatch,
                                                            tmp_path):
    fm, _ = vllm
    p = make_problem("deepseek-r1", 64, "fp8-block128", 8, 1, 0)  # E=256, N=256: shipped
    fn = get("vllm").prepare(p, _weights(_problem("fp8-block128")))
    name = fm.get_config_file_name(256, 256, "fp8_w8a8", [128, 128])
    assert fn.row_facts == dict(config_file=name, backend_version="vllm 0.26.0")
    # a user's tuned folder comes first, as vLLM reads it
    (tmp_path / name).write_text("{}")
    monkeypatch.setenv("VLLM_TUNED_CONFIG_FOLDER", str(tmp_path))
    assert vb.config_choice(p, fm) == str(tmp_path / name)
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")
    assert vb.config_choice(p, fm).startswith("default")


def test_the_launch_uses_the_shipped_entry_for_its_token_count(vllm, run_vllm):
    """The kernel runs with the entry of vLLM's shipped file nearest the token count."""
    fm, _ = vllm
    p = _problem("bf16", model="custom:H=256,I=256,E=8,k=2", tokens=5)
    fn = get("vllm").prepare(p, _weights(p))
    launches = run_vllm(fn, *_inputs(p))
    file = fn.row_facts["config_file"]
    want = (fm.get_default_config(5, 8, 512, 256, 2, None) if file == "default" else
            min(fm.get_moe_configs(8, 256, None).items(), key=lambda kv: abs(kv[0] - 5))[1])
    got = {k: launches[0][k] for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "GROUP_SIZE_M")}
    assert got == {k: want[k] for k in got}


# --- moe-lab backends says what is missing ----------------------------------------------

def test_available_says_what_is_missing(vllm, monkeypatch):
    ok, why = get("vllm").available()  # the package is here, a GPU platform is not
    assert not ok and "no CUDA or ROCm platform" in why and "pynvml" in why
    monkeypatch.setattr(vb, "vllm_version", lambda: "0.25.1")
    ok, why = get("vllm").available()
    assert not ok and "0.25.1" in why and vb.OLDEST in why
    monkeypatch.setattr(vb, "vllm_version", lambda: None)
    ok, why = get("vllm").available()
    assert not ok and "not installed" in why and "pip install vllm==0.26.0" in why
    from moe_lab.commands.backends import table
    row = next(r for r in table("cpu") if r["backend"] == "vllm")
    assert row["available"] is False and "not installed" in row["reason"]
