"""torch-fp8 on the CPU: every expert's rows padded to cuBLASLt's FP8 alignment (16), and
the blockwise scale layout torch 2.11's sm90 kernel takes. The one GPU op is stood in (the
dequantised product each call asks for, in fp64, bf16 out), the padded loop is checked
against the unpadded one, and every call it makes is replayed on meta tensors through the
op's own checks (torch's meta functions of _scaled_mm / _scaled_mm_v2; on a meta tensor
they run the CUDA checks: row-major a, column-major b, K and N multiples of 16, and the
blockwise scales' shapes and strides)."""
import math

import pytest
import torch
import torch.nn.functional as F

from moe_lab.core import quant
from moe_lab.backends import get
from moe_lab.backends.torch_fp8 import ALIGN, scaled_mm_fn
from moe_lab.measuring.correctness import THRESHOLDS, make_inputs, make_weights, reference, rel_err
from moe_lab.core.problems import make_problem

ST = F.ScalingType


class StandIn:
    """torch._scaled_mm (tensor, row-wise) or, blocks=True, F.scaled_mm (BlockWise1x128 x
    BlockWise128x128, scale_b [L4, N/128] of which the first ceil(K/128) rows are read):
    (a * scale_a) @ (b * scale_b) in fp64, rounded to out_dtype."""
    def __init__(self, blocks=False):
        self.blocks, self.calls = blocks, []

    def __call__(self, a, b, sa, *rest, out_dtype=None, output_dtype=None):
        out_dtype = out_dtype or output_dtype
        self.calls.append((a, b, sa, rest, out_dtype))
        A, B = a.double(), b.double()
        if not self.blocks:
            (sb,) = rest
            return ((A * sa.double()) @ (B * sb.double())).to(out_dtype)
        ra, sb, rb = rest
        assert (ra, rb) == (ST.BlockWise1x128, ST.BlockWise128x128)
        K, N = b.shape
        kb = math.ceil(K / 128)
        sa_full = sa.double().repeat_interleave(128, 1)[:, :K]
        sb_full = sb[:kb].double().repeat_interleave(128, 0)[:K].repeat_interleave(128, 1)[:, :N]
        return ((A * sa_full) @ (B * sb_full)).to(out_dtype)


# (scheme, model, tp, ep, tokens): experts with 1..~20 rows, EP (remote pairs), Llama-4's
# router weight on the input; blocks with H = 384 and I = 256 (3 and 2 K-blocks: L4 = 4
# pads scale_b in both GEMMs)
CASES = [("fp8-tensor", "custom:H=256,I=256,E=8,k=2", 1, 1, 13),
         ("fp8-channel", "custom:H=256,I=256,E=8,k=2", 1, 1, 21),
         ("fp8-channel", "custom:H=256,I=256,E=8,k=2", 8, 8, 40),
         ("fp8-channel", "custom:H=256,I=256,E=4,k=1,router=llama4", 1, 1, 9),
         ("fp8-block128", "custom:H=384,I=256,E=8,k=2", 1, 1, 19),
         ("fp8-block128", "custom:H=384,I=256,E=8,k=2", 8, 8, 37)]


def _run(scheme, model, tp, ep, tokens, rows_align, mm=None):
    p = make_problem(model, tokens, scheme, tp, ep)
    w = make_weights(p, "cpu", 4)
    inp = make_inputs(p, "cpu", 8)
    if mm is None:
        mm = StandIn(blocks=scheme == "fp8-block128")
    out = scaled_mm_fn(p, w.quant, w.expert_map, mm=mm, rows_align=rows_align)(*inp.args())
    return p, w, inp, out, mm


@pytest.mark.parametrize("scheme,model,tp,ep,tokens", CASES)
def test_padded_rows_give_the_unpadded_loops_output(scheme, model, tp, ep, tokens):
    p, w, inp, padded, mm = _run(scheme, model, tp, ep, tokens, ALIGN)
    *_, plain, mm1 = _run(scheme, model, tp, ep, tokens, 1)
    assert padded.dtype == torch.bfloat16 and torch.isfinite(padded).all()
    assert torch.equal(padded, plain)  # rows are independent: padding changes no number
    assert rel_err(padded, reference(p, w, inp)) < THRESHOLDS[scheme]
    # the unpadded loop has experts whose rows cuBLASLt refuses; the padded one none,
    # and every A and scale pointer 16-byte aligned (gemm2's slices of the shared a)
    assert any(a.shape[0] % 16 for a, *_ in mm1.calls)
    assert len(mm.calls) == len(mm1.calls)
    for (a, b, sa, rest, _), (a1, *_) in zip(mm.calls, mm1.calls):
        assert a.shape[0] == -(-a1.shape[0] // ALIGN) * ALIGN and a.shape[1:] == a1.shape[1:]
        assert a.is_contiguous() and a.data_ptr() % 16 == 0
        assert sa.numel() == 1 or sa.data_ptr() % 16 == 0
        if scheme != "fp8-block128":  # the weight's scale too: cuBLASLt refused 4-byte
            # offsets into [E] per tensor on the H200 (h200-recheck-fp8-tensor-20261201)
            assert rest[0].data_ptr() % 16 == 0, (scheme, rest[0].storage_offset())


@pytest.mark.parametrize("scheme", ["fp8-tensor", "fp8-channel"])
def test_padding_with_the_cpus_own_scaled_mm(scheme):
    """torch 2.13's CPU build has _scaled_mm for per-tensor and row-wise scales: the
    backend itself (its padding included) against the reference and the unpadded loop."""
    args = (scheme, "custom:H=256,I=256,E=8,k=2", 8, 8, 29)
    p, w, inp, padded, _ = _run(*args, ALIGN, mm=torch._scaled_mm)
    *_, plain, _ = _run(*args, 1, mm=torch._scaled_mm)
    assert rel_err(padded, reference(p, w, inp)) < THRESHOLDS[scheme]
    torch.testing.assert_close(padded.float(), plain.float(), rtol=1e-2, atol=1e-2 * float(
        plain.float().abs().max()))
    out = get("torch-fp8").prepare(p, w)(*inp.args())
    assert torch.equal(out, padded)


def _meta(t):
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


@pytest.mark.parametrize("scheme,model,tp,ep,tokens",
                         [c for c in CASES if c[0] != "fp8-tensor" or c[4] == 13])
def test_every_call_passes_the_real_ops_meta_checks(scheme, model, tp, ep, tokens):
    *_, mm = _run(scheme, model, tp, ep, tokens, ALIGN)
    assert mm.calls, "the backend made no _scaled_mm call: nothing to replay"
    for a, b, sa, rest, out_dtype in mm.calls:
        if scheme == "fp8-block128":
            ra, sb, rb = rest
            out = F.scaled_mm(_meta(a), _meta(b), _meta(sa), ra, _meta(sb), rb,
                              output_dtype=out_dtype)
        else:
            out = torch._scaled_mm(_meta(a), _meta(b), _meta(sa), _meta(rest[0]),
                                   out_dtype=out_dtype)
        assert tuple(out.shape) == (a.shape[0], b.shape[1]) and out.dtype == torch.bfloat16


def test_the_meta_checks_refuse_the_block_layouts_probed_before():
    """torch 2.13's meta function of _scaled_mm_v2 checks the blockwise scales' strides, not
    only their shapes: each layout the backend tried on the H200 (row- or column-major
    scale_a, scale_b the transposed [N/128, K/128] scales, viewed or contiguous, unpadded)
    is refused, and so is a padded scale_b that is row-major; the backend's passes."""
    *_, mm = _run("fp8-block128", "custom:H=384,I=256,E=8,k=2", 1, 1, 19, ALIGN)
    a, b, sa, (ra, sb, rb), out_dtype = mm.calls[0]  # gemm1: K = 384, 3 K-blocks, L4 = 4
    M, K, N = a.shape[0], a.shape[1], b.shape[1]
    kb, nb = K // 128, N // 128
    assert kb == 3 and tuple(sb.shape) == (4, nb) and sb.stride() == (1, 4)
    assert tuple(sa.shape) == (M, kb) and sa.stride() == (1, M)
    w_scale = torch.rand(nb, kb)  # our [N/128, K/128] weight scales
    s_rows = torch.rand(M, kb)    # our [M, K/128] activation scales, row-major
    old = {"rows, view": (s_rows, w_scale.t()),
           "cols, view": (s_rows.t().contiguous().t(), w_scale.t()),
           "cols, contiguous": (s_rows.t().contiguous().t(), w_scale.t().contiguous()),
           "rows, contiguous": (s_rows, w_scale.t().contiguous()),
           "padded scale_b, row-major": (sa, sb.contiguous())}
    for name, (xa, xb) in old.items():
        with pytest.raises(RuntimeError, match="blockwise scaling"):
            F.scaled_mm(_meta(a), _meta(b), _meta(xa), ra, _meta(xb), rb, output_dtype=out_dtype)
    F.scaled_mm(_meta(a), _meta(b), _meta(sa), ra, _meta(sb), rb, output_dtype=out_dtype)
    # and the v1 op's checks too: a row-major b is refused
    *_, mm = _run("fp8-channel", "custom:H=256,I=256,E=8,k=2", 1, 1, 21, ALIGN)
    a, b, sa, (sb,), out_dtype = mm.calls[0]
    with pytest.raises(RuntimeError, match="col_major"):
        torch._scaled_mm(_meta(a), _meta(b.contiguous()), _meta(sa), _meta(sb),
                         out_dtype=out_dtype)


def test_padding_is_in_the_kernel_table():
    """The padding runs inside the timed call, in moe_lab.align ranges: its own phase."""
    from moe_lab.measuring.profiling import phase_table, profile_kernels
    p = make_problem("custom:H=256,I=256,E=4,k=2", 7, "fp8-channel", 1, 1)
    w, inp = make_weights(p, "cpu", 1), make_inputs(p, "cpu", 3)
    df = profile_kernels(get("torch-fp8").prepare(p, w), inp.args(), iters=1, device="cpu")
    t = phase_table(df).set_index("phase")
    assert t.loc["gemm1", "calls"] == t.loc["gemm2", "calls"] == 4
    # one range for the zero-row sources, one per expert's padded gather (the rest of
    # `align` is the routing's sort and counts)
    pad = df[df["kernel"] == "moe_lab.align"]
    assert len(pad) == 1 and pad["phase"].item() == "align" and pad["calls"].item() == 1 + 4


def test_block_scale_b_pads_the_k_blocks_to_4():
    from moe_lab.backends.torch_fp8 import block_scale_b
    s = torch.rand(3, 2, 5)  # [E, N/128, K/128]
    p = block_scale_b(s)
    assert p.shape == (3, 2, 8) and p.is_contiguous()
    assert torch.equal(p[..., :5], s) and not p[..., 5:].any()
    assert p[1].t().stride() == (1, 8)
    q, sw = quant.quantize_weight(torch.randn(1, 256, 384), "fp8-block128")
    assert block_scale_b(sw)[0].t().shape == (4, 2)
