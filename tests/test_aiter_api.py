"""The `aiter` (CK/asm) adapter cannot run here (no ROCm GPU), so it is checked against
the real installed `amd-aiter` package: its `fused_moe` signature read from the source,
its real `shuffle_weight`, and the enum names compiled into its pybind module."""
import ast
import enum
import importlib.util
import os
import re
import sys
import types
from typing import Optional

import pytest
import torch

from moe_lab.backends import Weights
from moe_lab.backends.aiter_ck import (AiterCKBackend, SHUFFLE_LAYOUT, expert_mask_from_map,
                                       fused_moe_kwargs, shuffle_ok)
from moe_lab.backends.aiter_triton import aiter_root, load_aiter_triton
from moe_lab.check import make_inputs, make_weights
from moe_lab.problems import PRESETS, SEED_MODELS, make_problem

ROOT = aiter_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason="amd-aiter is not installed")


def _real_fused_moe_def() -> ast.FunctionDef:
    tree = ast.parse(open(os.path.join(ROOT, "fused_moe.py")).read())
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "fused_moe")


def _real_enum_values(name: str) -> list[str]:
    meta = os.path.join(os.path.dirname(ROOT), "aiter_meta", "csrc", "include", "aiter_enum.h")
    src = open(meta).read()
    body = re.search(r"enum class %s[^{]*\{([^}]*)\}" % name, src).group(1)
    return [re.match(r"\s*(\w+)", item).group(1) for item in body.split(",") if item.strip()]


def _load_real_shuffle():
    spec = importlib.util.spec_from_file_location("aiter_real_shuffle",
                                                  os.path.join(ROOT, "ops", "shuffle.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # shuffle.py imports only torch
    return mod.shuffle_weight


def test_kwargs_match_real_fused_moe_signature():
    fdef = _real_fused_moe_def()
    params = [a.arg for a in fdef.args.args]
    n_required = len(params) - len(fdef.args.defaults)
    enums = (types.SimpleNamespace(Silu="Silu"), types.SimpleNamespace(No="No"))
    prob = make_problem("llama4-scout-16e", 4, tp=8, ep=8)
    kw = fused_moe_kwargs(prob, None, None, None, None, None, enums)
    assert set(kw) <= set(params), f"not parameters of aiter fused_moe: {set(kw) - set(params)}"
    assert set(params[:n_required]) <= set(kw), "a required aiter parameter is not passed"
    assert kw["doweight_stage1"] is True  # Llama-4 routes the weight on the input
    assert fused_moe_kwargs(make_problem("deepseek-r1", 4, tp=8), None, None, None, None, None,
                            enums)["doweight_stage1"] is False


def test_enum_members_exist_in_real_aiter():
    assert "Silu" in _real_enum_values("ActivationType")
    assert "No" in _real_enum_values("QuantType")


@pytest.mark.parametrize("model", SEED_MODELS)
@pytest.mark.parametrize("ep", [1, 8])
def test_supports_agrees_with_real_shuffle_weight(model, ep):
    """Our support check says yes exactly when aiter's real shuffle_weight accepts both
    weight shapes (run on meta tensors: the real code, no memory)."""
    shuffle = _load_real_shuffle()
    prob = make_problem(model, 8, "bf16", 8, ep, 0)
    shapes = [(1, 2 * prob.inter, prob.hidden), (1, prob.hidden, prob.inter)]
    real_ok = True
    for s in shapes:
        try:
            out = shuffle(torch.empty(s, dtype=torch.bfloat16, device="meta"), layout=SHUFFLE_LAYOUT)
            assert out.shape == s
        except AssertionError:
            real_ok = False
    ours = all(shuffle_ok(s, 2)[0] for s in shapes)
    assert ours == real_ok


@pytest.mark.parametrize("shape", [(1, 48, 96), (1, 64, 40), (1, 24, 64)])
def test_shuffle_constraint_matches_real_code_on_odd_shapes(shape):
    shuffle = _load_real_shuffle()
    try:
        shuffle(torch.empty(shape, dtype=torch.bfloat16, device="meta"), layout=SHUFFLE_LAYOUT)
        real_ok = True
    except AssertionError:
        real_ok = False
    assert shuffle_ok(shape, 2)[0] == real_ok


def test_expert_mask_from_expert_map():
    prob = make_problem("deepseek-r1", 4, tp=8, ep=8, ep_rank=2)
    mask = expert_mask_from_map(prob.expert_map())
    assert mask.dtype == torch.int32 and mask.shape == (256,)
    assert mask.sum() == 32 and mask[64:96].all() and mask[:64].sum() == 0
    assert expert_mask_from_map(None) is None


@pytest.fixture
def fake_rocm_aiter(monkeypatch):
    """Only the ROCm GPU is faked: `fused_moe` is a function with the REAL signature,
    compiled from aiter's source with its body replaced by a recorder; shuffle_weight is
    aiter's real function; the enums carry the real member names and values."""
    calls = []
    fdef = _real_fused_moe_def()
    fdef.body = [ast.parse("return __record__(dict(locals()))").body[0]]
    fdef.decorator_list = []
    Act = enum.Enum("ActivationType", {n: i - 1 for i, n in enumerate(_real_enum_values("ActivationType"))})
    Quant = enum.Enum("QuantType", {n: i for i, n in enumerate(_real_enum_values("QuantType"))})

    def record(kw):
        calls.append(kw)
        return torch.zeros_like(kw["hidden_states"])
    ns = dict(torch=torch, Optional=Optional, ActivationType=Act, QuantType=Quant,
              __record__=record)
    exec(compile(ast.Module([fdef], type_ignores=[]), "aiter/fused_moe.py", "exec"), ns)
    aiter = types.ModuleType("aiter")
    aiter.ActivationType, aiter.QuantType = Act, Quant
    fm = types.ModuleType("aiter.fused_moe")
    fm.fused_moe = ns["fused_moe"]
    ops = types.ModuleType("aiter.ops")
    sh = types.ModuleType("aiter.ops.shuffle")
    sh.shuffle_weight = _load_real_shuffle()
    for name, mod in [("aiter", aiter), ("aiter.fused_moe", fm), ("aiter.ops", ops),
                      ("aiter.ops.shuffle", sh)]:
        monkeypatch.setitem(sys.modules, name, mod)
    return calls, Act, Quant


@pytest.mark.parametrize("model,ep", [("llama4-scout-16e", 8), ("qwen3-30b-a3b", 1)])
def test_prepare_and_call_bind_to_real_signature(fake_rocm_aiter, model, ep):
    calls, Act, Quant = fake_rocm_aiter
    prob = make_problem(model, 5, "bf16", 8, ep, 0)
    if model.startswith("llama4"):  # keep the test small: same code path, fewer experts
        prob = make_problem("custom:H=64,I=32,E=16,k=1,router=llama4", 5, "bf16", 8, 8, 1)
    w = make_weights(prob, "cpu", 0)
    inp = make_inputs(prob, "cpu", 1)
    fn = AiterCKBackend().prepare(prob, w)
    fn(inp.x, inp.topk_weights.half(), inp.topk_ids.long())  # adapter fixes dtypes
    (kw,) = calls
    assert kw["hidden_states"] is inp.x
    assert kw["topk_weight"].dtype == torch.float32 and kw["topk_ids"].dtype == torch.int32
    shuffle = _load_real_shuffle()
    assert torch.equal(kw["w1"], shuffle(w.w1, layout=(16, 16)))
    assert torch.equal(kw["w2"], shuffle(w.w2, layout=(16, 16)))
    assert kw["activation"] is Act.Silu and kw["quant_type"] is Quant.No
    assert kw["doweight_stage1"] == prob.weight_on_input
    if prob.ep > 1:
        assert torch.equal(kw["expert_mask"], (prob.expert_map() > -1).int())
    else:
        assert kw["expert_mask"] is None


def test_aiter_triton_loader_imports_real_modules_on_cpu():
    moe_op, align = load_aiter_triton()
    assert moe_op.__file__.startswith(ROOT) and align.__file__.startswith(ROOT)
    import inspect
    params = list(inspect.signature(moe_op.fused_moe).parameters)
    assert params[:11] == ["A", "B", "C", "A_scale", "B_scale", "B_zp", "topk_weights",
                           "topk_ids", "sorted_token_ids", "expert_ids", "num_tokens_post_padded"]
    assert list(inspect.signature(align.moe_align_block_size_triton).parameters) == [
        "topk_ids", "num_experts", "block_size", "sorted_token_ids", "expert_ids",
        "num_tokens_post_pad"]
    assert hasattr(moe_op, "_fused_moe_kernel")
