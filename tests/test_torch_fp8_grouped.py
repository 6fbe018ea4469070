"""torch-fp8-grouped on the CPU, where torch._scaled_grouped_mm has no kernel: its layout,
padding, quantisation and combine run with a stand-in for the one GPU op (a per-group
loop of what the op computes, NaN in the rows it leaves unwritten), and every call it
makes is replayed on meta tensors through the real op's own argument checks."""
import pytest
import torch

from moe_lab.backends import get
from moe_lab.backends.torch_fp8_grouped import grouped_fp8_fn
from moe_lab.measuring.correctness import THRESHOLDS, make_inputs, make_weights, reference, rel_err
from moe_lab.core.problems import make_problem
from stand_ins import scaled_grouped_mm  # noqa: E402


class StandIn:
    """out[rows of group g] = (A * scale_a[:, None]) @ (B[g] * scale_b[g]) in bf16 for the
    rows of each group (offs: group ends); rows past the last group NaN (never written)."""
    def __init__(self):
        self.calls = []

    def __call__(self, a, b, scale_a, scale_b, offs=None, out_dtype=None):
        self.calls.append((a, b, scale_a, scale_b, offs, out_dtype))
        return scaled_grouped_mm(a, b, scale_a, scale_b, offs, out_dtype)


CASES = [("fp8-channel", "qwen3-30b-a3b", 8, 1, 13), ("fp8-tensor", "qwen3-30b-a3b", 8, 1, 3),
         ("fp8-channel", "qwen3-30b-a3b", 8, 8, 21),
         ("fp8-channel", "custom:H=256,I=256,E=4,k=1,router=llama4", 1, 1, 9)]


@pytest.mark.parametrize("scheme,model,tp,ep,tokens", CASES)
def test_matches_the_fp8_reference_with_the_op_stood_in(scheme, model, tp, ep, tokens):
    p = make_problem(model, tokens, scheme, tp, ep)
    w = make_weights(p, "cpu", 4)
    inp = make_inputs(p, "cpu", 8)
    mm = StandIn()
    out = grouped_fp8_fn(p, w.quant, w.expert_map, mm=mm)(*inp.args())
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    assert rel_err(out, reference(p, w, inp)) < THRESHOLDS[scheme]
    (a1, _, _, _, offs, _), (a2, *_) = mm.calls
    assert offs.numel() == p.local_experts  # a group end per local expert
    assert offs.dtype == torch.int32 and bool((offs % 16 == 0).all())  # aligned groups
    assert a1.shape[0] == a2.shape[0] == tokens * p.topk + p.local_experts * 15


@pytest.mark.parametrize("scheme", ["fp8-tensor", "fp8-channel"])
def test_llama4s_router_weight_rides_in_the_scales_not_a_pass_over_x(scheme):
    """Weight on the input (Llama-4, top-1): the fused glue quantises x itself and folds
    w_t into token t's row scale; the naive glue quantises x*w (scaled in fp32 first).
    Both match the reference."""
    p = make_problem("custom:H=256,I=256,E=4,k=1,router=llama4", 9, scheme, 1, 1)
    w, inp = make_weights(p, "cpu", 4), make_inputs(p, "cpu", 8)
    x, wt = inp.x, inp.topk_weights.reshape(-1).float()
    assert float(wt.min()) > 0 and not torch.allclose(wt, torch.ones_like(wt))
    for glue in ("fused", "naive"):
        mm = StandIn()
        fn = grouped_fp8_fn(p, w.quant, w.expert_map, mm=mm, glue=glue)
        out = fn(*inp.args())
        assert rel_err(out, reference(p, w, inp)) < THRESHOLDS[scheme], glue
        a1, _, sa, *_ = mm.calls[0]
        assert ("folded" if glue == "fused" else "fp32") in fn.glue.notes["router"]
        xin = x if glue == "fused" else (x.float() * wt[:, None]).to(x.dtype)
        xq, xs = fn.glue.quant(xin)
        xs = xs.reshape(-1).expand(x.shape[0])
        want_s = xs * wt if glue == "fused" else xs
        bits, rows = xq.view(torch.uint8), a1.view(torch.uint8)
        for t in range(x.shape[0]):  # token t's gemm1 row: its fp8 bits, its scale
            hit = (rows == bits[t]).all(1) & torch.isclose(sa, want_s[t], rtol=1e-6)
            assert bool(hit.any()), (glue, t)


@pytest.mark.parametrize("scheme", ["fp8-tensor", "fp8-channel"])
def test_every_call_passes_the_real_ops_argument_checks(scheme):
    p = make_problem("qwen3-30b-a3b", 5, scheme, 8, 1)
    w = make_weights(p, "cpu", 0)
    mm = StandIn()
    grouped_fp8_fn(p, w.quant, w.expert_map, mm=mm)(*make_inputs(p, "cpu", 1).args())
    assert len(mm.calls) == 2
    for a, b, sa, sb, offs, out_dtype in mm.calls:
        meta = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
                for t in (a, b, sa, sb, offs)]
        out = torch._scaled_grouped_mm(*meta[:4], offs=meta[4], out_dtype=out_dtype)
        assert tuple(out.shape) == (a.shape[0], b.shape[-1]) and out.dtype == torch.bfloat16
    # and the checks are real: a row-major B is refused
    a, b, sa, sb, offs, _ = mm.calls[0]
    bad = torch.empty(b.shape, dtype=b.dtype, device="meta")
    with pytest.raises(RuntimeError, match="column major"):
        torch._scaled_grouped_mm(torch.empty_strided(a.shape, a.stride(), dtype=a.dtype,
                                                     device="meta"), bad,
                                 sa.to("meta"), sb.to("meta"), offs=offs.to("meta"),
                                 out_dtype=torch.bfloat16)


def test_refuses_blocks_and_the_cpu():
    be = get("torch-fp8-grouped")
    assert not be.supports(make_problem("deepseek-r1", 4, "fp8-block128", 8, 1), "cuda")[0]
    ok, why = be.supports(make_problem("qwen3-30b-a3b", 4, "fp8-channel", 8, 1), "cpu")
    assert not ok and "CPU" in why
