import pytest
import torch

from moe_lab.core.problems import PRESETS, ProblemError, parse_model
from moe_lab.core.routing import (deepseek_router, expert_load, make_routing, parse_routing,
                             softmax_router)


@pytest.mark.parametrize("model", sorted(PRESETS))
@pytest.mark.parametrize("kind", ["uniform", "balanced", "zipf:1.2", "hot:0.5"])
def test_shapes_dtypes_and_distinct_choices(model, kind):
    spec = PRESETS[model]
    w, ids, logits = make_routing(spec, 37, kind, seed=1)
    assert ids.shape == w.shape == (37, spec.topk)
    assert ids.dtype == torch.int32 and w.dtype == torch.float32
    assert ids.min() >= 0 and ids.max() < spec.experts
    assert torch.isfinite(w).all() and (w > 0).all()
    # a token never picks the same expert twice
    assert all(len(set(r)) == spec.topk for r in ids.tolist())


def test_deterministic_from_seed():
    spec = PRESETS["deepseek-r1"]
    a = make_routing(spec, 16, "zipf:1.0", seed=5)
    b = make_routing(spec, 16, "zipf:1.0", seed=5)
    c = make_routing(spec, 16, "zipf:1.0", seed=6)
    assert torch.equal(a[1], b[1]) and torch.equal(a[0], b[0])
    assert not torch.equal(a[1], c[1])


def test_balanced_is_exact():
    spec = PRESETS["qwen3-235b-a22b"]
    _, ids, _ = make_routing(spec, 64, "balanced")
    load = expert_load(ids, spec.experts)
    assert load.shape == (spec.experts,)  # a load per expert: all() of an empty one passes
    assert (load == 64 * 8 // 128).all()


def _top_share(spec, s, T=2048):
    _, ids, _ = make_routing(spec, T, f"zipf:{s}", seed=2)
    load = expert_load(ids, spec.experts).float()
    return (load.max() / load.sum()).item()


def test_zipf_skew_increases_with_s():
    spec = PRESETS["qwen3-235b-a22b"]
    shares = [_top_share(spec, s) for s in (0.0, 0.5, 1.0, 1.5, 2.0)]
    assert shares == sorted(shares) and shares[-1] > 3 * shares[0]


def test_hot_fraction_goes_to_one_expert():
    spec = PRESETS["mixtral-8x7b"]
    _, ids, _ = make_routing(spec, 1000, "hot:0.7", seed=3)
    hot = torch.mode(ids[:, 0]).values
    assert (ids[:, 0] == hot).float().mean() >= 0.7


def test_softmax_router_renormalises():
    w, ids = softmax_router(torch.randn(10, 128), 8)
    assert torch.allclose(w.sum(-1), torch.ones(10))


def test_llama4_router_is_sigmoid_of_top_logit():
    spec = PRESETS["llama4-maverick-128e"]
    w, ids, logits = make_routing(spec, 9, "uniform", seed=4)
    assert torch.equal(ids[:, 0].long(), logits.argmax(-1))
    assert torch.allclose(w[:, 0], torch.sigmoid(logits.max(-1).values))


def test_deepseek_group_selection():
    torch.manual_seed(0)
    T, E, G, keep = 64, 256, 8, 4
    logits = torch.randn(T, E)
    bias = torch.randn(E) * 0.1
    w, ids = deepseek_router(logits, 8, G, keep, bias, routed_scaling=2.5)
    scores = torch.sigmoid(logits) + bias
    for t in range(T):
        gs = scores[t].view(G, E // G)
        group_score = gs.sort(-1, descending=True).values[:, :2].sum(-1)
        allowed = set(group_score.argsort(descending=True)[:keep].tolist())
        chosen_groups = {int(e) // (E // G) for e in ids[t]}
        assert chosen_groups <= allowed
        # the chosen experts are the best 8 (biased) inside the allowed groups
        mask = torch.zeros(E, dtype=torch.bool)
        for g in allowed:
            mask[g * 32:(g + 1) * 32] = True
        best = set(scores[t].masked_fill(~mask, -1e9).topk(8).indices.tolist())
        assert set(ids[t].tolist()) == best
    # weights: unbiased sigmoid scores renormalised, times 2.5
    assert torch.allclose(w.sum(-1), torch.full((T,), 2.5))
    expected = torch.sigmoid(logits).gather(1, ids.long())
    expected = expected / expected.sum(-1, keepdim=True) * 2.5
    assert torch.allclose(w, expected)


@pytest.mark.parametrize("bad", ["", "zipf", "hot:2", "zipf:-1", "uniform:3", "pareto:1"])
def test_bad_routing_specs(bad):
    with pytest.raises(ProblemError):
        parse_routing(bad)


def test_custom_deepseek_router_runs():
    spec = parse_model("custom:H=64,I=32,E=16,k=4,router=deepseek")
    w, ids, _ = make_routing(spec, 8, "uniform")
    assert ids.shape == (8, 4)


@pytest.mark.parametrize("experts", [8, 16, 24, 64])
def test_a_custom_deepseek_router_routes_or_is_refused_at_the_spec(experts):
    """The README's `custom:H=4096,I=14336,E=8,k=2[,router=...deepseek]`: DeepSeek's group
    score is the sum of each group's two best experts, so its 8 groups need 2 experts each.
    E=8 was accepted and every point then failed ('selected index k out of range');
    now the spec is refused in one line, and what it accepts routes."""
    text = f"custom:H=64,I=32,E={experts},k=2,router=deepseek"
    if experts < 16:
        with pytest.raises(ProblemError, match="at least 2 experts in each of its 8 groups"):
            parse_model(text)
        return
    w, ids, _ = make_routing(parse_model(text), 8, "uniform")
    assert ids.shape == (8, 2)
