"""moe-lab's own glue kernels (Triton), for the steps where aiter ships none for this GPU or
ours is the faster (moe_lab.glue says which and why): SiLU*mul, the combine, and the
1x128 group quantisers of fp8-block128 (alone and fused with SiLU*mul). `KERNELS` maps a
glue step to its kernel; empty without Triton."""
from __future__ import annotations

try:
    import triton
    import triton.language as tl
except ImportError:  # moe-lab runs without Triton; the fused glue then falls back
    triton = tl = None

if triton is not None:
    @triton.jit
    def _moe_lab_silu_and_mul_kernel(g_ptr, out_ptr, rows, inter, stride_gr, stride_gc,
                                     stride_or, stride_oc, BLOCK_R: tl.constexpr,
                                     BLOCK_I: tl.constexpr):
        """out[r, c] = silu(g[r, c]) * g[r, inter + c] for a BLOCK_R x BLOCK_I tile: both
        halves read once, the product in fp32, rounded once to out's dtype."""
        r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]
        c = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)[None, :]
        mask = (r < rows) & (c < inter)
        src = g_ptr + r.to(tl.int64) * stride_gr + c * stride_gc
        gate = tl.load(src, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(src + inter * stride_gc, mask=mask, other=0.0).to(tl.float32)
        a = gate / (1.0 + tl.exp(-gate)) * up
        tl.store(out_ptr + r.to(tl.int64) * stride_or + c * stride_oc,
                 a.to(out_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _moe_lab_moe_sum_kernel(c_ptr, out_ptr, hidden, stride_ct, stride_ck, stride_ch,
                                stride_ot, stride_oh, K: tl.constexpr, BLOCK_H: tl.constexpr):
        """out[t, h] = sum_j c[t, j, h] for one token and BLOCK_H columns: the k rows read
        once each, accumulated in fp32 registers, one store in out's dtype."""
        t = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
        mask = h < hidden
        src = c_ptr + t * stride_ct + h * stride_ch
        acc = tl.zeros([BLOCK_H], dtype=tl.float32)
        for j in tl.static_range(K):
            acc += tl.load(src + j * stride_ck, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + t * stride_ot + h * stride_oh, acc.to(out_ptr.dtype.element_ty),
                 mask=mask)

    @triton.jit
    def _group_quant_tile(v, q_ptr, s_ptr, r, c, rows, cols, stride_qr, stride_qc, stride_sr,
                          stride_sc, BLOCK_R: tl.constexpr, G: tl.constexpr,
                          GROUP_: tl.constexpr, FP8_MAX: tl.constexpr):
        """Quantise an fp32 tile v [BLOCK_R, G*GROUP_] (masked lanes 0) per GROUP_ columns
        as moe_lab.quant does: scale = max(amax, 1e-12) / FP8_MAX, q = clamp(v / scale)."""
        v3 = tl.reshape(v, [BLOCK_R, G, GROUP_])
        scale = tl.maximum(tl.max(tl.abs(v3), axis=2), 1e-12) / FP8_MAX
        q = tl.reshape(tl.clamp(v3 / scale[:, :, None], -FP8_MAX, FP8_MAX), [BLOCK_R, G * GROUP_])
        tl.store(q_ptr + r.to(tl.int64) * stride_qr + c * stride_qc,
                 q.to(q_ptr.dtype.element_ty), mask=(r < rows) & (c < cols))
        gs = tl.program_id(1) * G + tl.arange(0, G)[None, :]
        tl.store(s_ptr + r.to(tl.int64) * stride_sr + gs * stride_sc, scale,
                 mask=(r < rows) & (gs < tl.cdiv(cols, GROUP_)))

    @triton.jit
    def _moe_lab_group_quant_kernel(x_ptr, q_ptr, s_ptr, rows, cols, stride_xr, stride_xc,
                                    stride_qr, stride_qc, stride_sr, stride_sc,
                                    BLOCK_R: tl.constexpr, G: tl.constexpr,
                                    GROUP_: tl.constexpr, FP8_MAX: tl.constexpr):
        """fp8-block128 activation quantisation of x [rows, cols]: BLOCK_R rows x G groups
        of GROUP_ columns per program, x read once, fp8 values and fp32 scales written."""
        r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]
        c = tl.program_id(1) * (G * GROUP_) + tl.arange(0, G * GROUP_)[None, :]
        v = tl.load(x_ptr + r.to(tl.int64) * stride_xr + c * stride_xc,
                    mask=(r < rows) & (c < cols), other=0.0).to(tl.float32)
        _group_quant_tile(v, q_ptr, s_ptr, r, c, rows, cols, stride_qr, stride_qc, stride_sr,
                          stride_sc, BLOCK_R, G, GROUP_, FP8_MAX)

    @triton.jit
    def _moe_lab_act_mul_and_group_quant_kernel(g_ptr, q_ptr, s_ptr, rows, inter, stride_gr,
                                                stride_gc, stride_qr, stride_qc, stride_sr,
                                                stride_sc, BLOCK_R: tl.constexpr,
                                                G: tl.constexpr, GROUP_: tl.constexpr,
                                                FP8_MAX: tl.constexpr):
        """silu(g[:, :inter]) * g[:, inter:] in fp32, quantised as above, one pass over g."""
        r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]
        c = tl.program_id(1) * (G * GROUP_) + tl.arange(0, G * GROUP_)[None, :]
        mask = (r < rows) & (c < inter)
        src = g_ptr + r.to(tl.int64) * stride_gr + c * stride_gc
        gate = tl.load(src, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(src + inter * stride_gc, mask=mask, other=0.0).to(tl.float32)
        _group_quant_tile(gate / (1.0 + tl.exp(-gate)) * up, q_ptr, s_ptr, r, c, rows, inter,
                          stride_qr, stride_qc, stride_sr, stride_sc, BLOCK_R, G, GROUP_,
                          FP8_MAX)

    KERNELS = {"act": _moe_lab_silu_and_mul_kernel, "combine": _moe_lab_moe_sum_kernel,
               "quant": _moe_lab_group_quant_kernel,
               "act_quant": _moe_lab_act_mul_and_group_quant_kernel}
else:
    KERNELS = {}
