"""The torch reference against an independent dense formulation, and every backend that
can run on the CPU against the reference."""
import pytest
import torch
import torch.nn.functional as F

from moe_lab import backends
from moe_lab.backends.torch_ref import torch_moe
from moe_lab.measuring.correctness import check_problem, make_inputs, make_weights, rel_err, reference
from moe_lab.core.problems import make_problem
from moe_lab.core.routing import make_routing


def dense_moe(x, w1, w2, tw, ids, lo, hi, weight_on_input):
    """Every expert on every token (fp64), combined through a dense gate matrix.
    Experts outside [lo, hi) belong to other EP ranks and get gate 0."""
    T, E = x.shape[0], w1.shape[0]
    inter = w1.shape[1] // 2
    gates = torch.zeros(T, E, dtype=torch.float64)
    gates.scatter_add_(1, ids.long(), tw.double())
    gates[:, :lo] = 0
    gates[:, hi:] = 0
    x = x.double()
    out = torch.zeros(T, x.shape[1], dtype=torch.float64)
    for e in range(E):
        g = gates[:, e:e + 1]
        xin = x * g if weight_on_input else x
        h = xin @ w1[e].double().t()
        y = (F.silu(h[:, :inter]) * h[:, inter:]) @ w2[e].double().t()
        out += y * (g != 0) if weight_on_input else y * g
    return out


CASES = [
    # (model, tokens, tp, ep, ep_rank)
    ("custom:H=48,I=40,E=8,k=2", 13, 1, 1, 0),
    ("custom:H=48,I=40,E=8,k=2", 13, 4, 4, 2),
    ("custom:H=64,I=24,E=16,k=4,router=deepseek", 9, 2, 2, 1),
    ("custom:H=32,I=16,E=4,k=1,router=llama4", 11, 1, 1, 0),
    ("custom:H=32,I=16,E=4,k=1,router=llama4", 11, 4, 4, 3),
]


@pytest.mark.parametrize("model,T,tp,ep,rank", CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_reference_equals_dense_formulation(model, T, tp, ep, rank, seed):
    prob = make_problem(model, T, "fp32", tp, ep, rank)
    g = torch.Generator().manual_seed(seed)
    E, I, H = prob.experts, prob.inter, prob.hidden
    W1 = torch.randn(E, 2 * I, H, generator=g, dtype=torch.float64) / H ** 0.5
    W2 = torch.randn(E, H, I, generator=g, dtype=torch.float64) / I ** 0.5
    x = torch.randn(T, H, generator=g, dtype=torch.float64)
    tw, ids, _ = make_routing(prob.model, T, "uniform", seed)
    lo, hi = prob.first_local_expert, prob.first_local_expert + prob.local_experts
    out = torch_moe(x, W1[lo:hi], W2[lo:hi], tw, ids, prob.expert_map(), prob.weight_on_input,
                    compute_dtype=torch.float64)
    want = dense_moe(x, W1, W2, tw, ids, lo, hi, prob.weight_on_input)
    assert torch.allclose(out, want, rtol=1e-10, atol=1e-12)
    if ep > 1:  # the shard really dropped remote experts' contributions
        full = dense_moe(x, W1, W2, tw, ids, 0, E, prob.weight_on_input)
        assert not torch.allclose(out, full)


def test_ep_shards_sum_to_the_unsharded_layer():
    T, base = 10, "custom:H=32,I=16,E=8,k=2"
    g = torch.Generator().manual_seed(0)
    W1 = torch.randn(8, 32, 32, generator=g, dtype=torch.float64)
    W2 = torch.randn(8, 32, 16, generator=g, dtype=torch.float64)
    x = torch.randn(T, 32, generator=g, dtype=torch.float64)
    full_p = make_problem(base, T, "fp32")
    tw, ids, _ = make_routing(full_p.model, T, "uniform", 3)
    full = torch_moe(x, W1, W2, tw, ids, compute_dtype=torch.float64)
    total = torch.zeros_like(full)
    for r in range(4):
        p = make_problem(base, T, "fp32", 4, 4, r)
        lo = p.first_local_expert
        total += torch_moe(x, W1[lo:lo + 2], W2[lo:lo + 2], tw, ids, p.expert_map(),
                           compute_dtype=torch.float64)
    assert torch.allclose(total, full)


@pytest.mark.parametrize("model,T,tp,ep,rank", CASES)
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_cpu_backends_pass_check(model, T, tp, ep, rank, dtype):
    prob = make_problem(model, T, dtype, tp, ep, rank)
    rows = {r["backend"]: r for r in check_problem(prob, backends.names(), "cpu", seed=11)}
    assert rows["torch"]["status"] == "ok"
    assert rows["torch-grouped"]["status"] == "ok"
    assert rows["torch-grouped"]["max_rel_err"] <= rows["torch"]["threshold"]
    # GPU-only backends say why instead of pretending
    assert rows["aiter"]["status"] == "unavailable" and "ROCm" in rows["aiter"]["error"]
    assert rows["aiter-triton"]["status"] in ("unavailable", "unsupported")


def test_check_catches_a_wrong_backend():
    """A backend that drops the router weight must be reported incorrect, not ok."""
    prob = make_problem("custom:H=32,I=16,E=8,k=2", 16, "bf16")
    w = make_weights(prob, "cpu", 0)
    inp = make_inputs(prob, "cpu", 1)
    ref = reference(prob, w, inp)
    wrong = torch_moe(inp.x, w.w1, w.w2, torch.ones_like(inp.topk_weights), inp.topk_ids)
    assert rel_err(wrong, ref) > 0.05
    nan = torch.full_like(ref, float("nan"))
    assert rel_err(nan, ref) == float("inf")


def test_a_point_whose_inputs_cannot_be_made_says_why_on_every_row(monkeypatch):
    """The weights drawn, the inputs failing (a router that cannot route them, an OOM):
    each backend's row names that error, never `KeyError: 'inp'` (what `moe-lab check`
    printed as its '(reference)' line: the half-drawn point's facts were read)."""
    from moe_lab.measuring import correctness

    def broken(*a, **k):
        raise RuntimeError("inputs cannot be made")
    monkeypatch.setattr(correctness, "make_inputs", broken)
    prob = make_problem("custom:H=32,I=16,E=8,k=2", 4, "bf16")
    rows = check_problem(prob, ["torch", "torch-grouped"], "cpu", seed=3)
    assert [r["status"] for r in rows] == ["failed", "failed"]
    assert all("inputs cannot be made" in r["error"] for r in rows), [r["error"] for r in rows]


def test_backend_registry_names_match_design():
    assert {"torch", "torch-grouped", "aiter", "aiter-triton", "vllm"} <= set(backends.names())
    for b in backends.all_backends():
        ok, why = b.available()
        assert isinstance(ok, bool) and (ok or why), f"{b.name} unavailable without a reason"


def test_ep_check_inputs_always_give_the_shard_work():
    """T=1 under EP8: the single token must hit a local expert, else the check is empty."""
    for seed in range(20):
        prob = make_problem("custom:H=32,I=16,E=16,k=1,router=llama4", 1, "bf16", 8, 8, 5)
        inp = make_inputs(prob, "cpu", seed)
        local = prob.expert_map()[inp.topk_ids.long()]
        assert (local >= 0).any()
        w = make_weights(prob, "cpu", seed)
        assert reference(prob, w, inp).abs().max() > 0
