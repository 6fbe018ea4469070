import pytest
import torch

from moe_lab.core.problems import (PRESETS, SEED_MODELS, ProblemError, default_token_grid,
                              make_problem, parse_model, parse_tokens)

# (H, I, E, k, shared, MoE layers, router) from each model's config.json (issue 2 table)
EXPECTED = {
    "llama4-scout-16e": (5120, 8192, 16, 1, 1, 48, "llama4"),
    "llama4-maverick-128e": (5120, 8192, 128, 1, 1, 24, "llama4"),
    "deepseek-r1": (7168, 2048, 256, 8, 1, 58, "deepseek"),
    "qwen3-235b-a22b": (4096, 1536, 128, 8, 0, 94, "softmax"),
    "qwen3-30b-a3b": (2048, 768, 128, 8, 0, 48, "softmax"),
    "mixtral-8x7b": (4096, 14336, 8, 2, 0, 32, "softmax"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_preset_numbers(name):
    m = PRESETS[name]
    assert (m.hidden, m.intermediate, m.experts, m.topk, m.shared_experts, m.moe_layers,
            m.router) == EXPECTED[name]


def test_deepseek_router_details_and_llama_weight_on_input():
    ds = PRESETS["deepseek-r1"]
    assert (ds.n_group, ds.topk_group, ds.routed_scaling) == (8, 4, 2.5)
    assert PRESETS["llama4-scout-16e"].weight_on_input
    assert not PRESETS["qwen3-235b-a22b"].weight_on_input
    assert set(SEED_MODELS) <= set(PRESETS)


def test_tp_shards_intermediate_ep_shards_experts():
    tp = make_problem("deepseek-r1", 4, tp=8)
    assert (tp.inter, tp.local_experts, tp.expert_map()) == (256, 256, None)
    ep = make_problem("deepseek-r1", 4, tp=8, ep=8, ep_rank=3)
    assert (ep.inter, ep.local_experts) == (2048, 32)
    emap = ep.expert_map()
    assert emap.dtype == torch.int32 and emap.shape == (256,)
    assert (emap[96:128] == torch.arange(32, dtype=torch.int32)).all()
    assert (emap[:96] == -1).all() and (emap[128:] == -1).all()


@pytest.mark.parametrize("kw", [dict(tp=8, ep=4), dict(tp=8, ep=8, ep_rank=8), dict(tp=3),
                                dict(tokens=0)])
def test_impossible_sharding_is_a_clear_error(kw):
    args = dict(tokens=4) | kw
    with pytest.raises(ProblemError):
        make_problem("deepseek-r1", args.pop("tokens"), **args)


def test_custom_model():
    m = parse_model("custom:H=4096,I=14336,E=8,k=2")
    assert (m.hidden, m.intermediate, m.experts, m.topk, m.router) == (4096, 14336, 8, 2, "softmax")
    l4 = parse_model("custom:H=64,I=32,E=4,k=1,router=llama4")
    assert l4.weight_on_input
    for bad in ["custom:H=1,I=2", "custom:H=a,I=2,E=2,k=1", "nosuchmodel", "custom:H=8,I=8,E=2,k=3",
                "custom:H=8,I=8,E=4,k=2,router=llama4", "custom:H=8,I=8,E=4,k=1,zz=1"]:
        with pytest.raises(ProblemError):
            parse_model(bad)


def test_token_grids():
    assert default_token_grid() == [2 ** i for i in range(14)]
    assert parse_tokens("1-8") == [1, 2, 4, 8]
    assert parse_tokens("1,64,1024") == [1, 64, 1024]
    for bad in ["", "a", "0", "8-1"]:
        with pytest.raises(ProblemError):
            parse_tokens(bad)


def test_model_lists_keep_custom_specs_whole():
    from moe_lab.core.problems import split_models
    assert split_models("deepseek-r1,custom:H=64,I=32,E=8,k=2,qwen3-30b-a3b") == [
        "deepseek-r1", "custom:H=64,I=32,E=8,k=2", "qwen3-30b-a3b"]
