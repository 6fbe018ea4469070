"""moe-lab's own glue kernels (Triton), for the steps where aiter ships none for this GPU or
ours is the faster (moe_lab.glue says which and why): SiLU*mul, the combine, and the
1x128 group quantisers of fp8-block128 (alone and fused with SiLU*mul), and the align
(sort by expert, pad to BLOCK_M). `KERNELS` maps a glue step to its kernel (align: its
three); empty without Triton."""
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

    # --- align: sort (token, slot) pairs by expert, each expert padded to BLOCK_M ----------
    # Three kernels, none with a serial loop over the pairs (aiter's
    # moe_align_block_size_triton runs one program per expert over numel/E pairs each, which
    # under EP, with E_local + 1 experts, is a serial walk of ~1000 pairs per program):
    #   count  one program per CHUNK pairs: the EP map applied (remote -> the sentinel
    #          expert n_exp - 1), a histogram of the chunk's experts -> counts[p, :]
    #   scan   one program: per expert the total, padded to BLOCK_M; the padded starts;
    #          per (chunk, expert) where the chunk's pairs of that expert begin
    #   place  one program per chunk: the chunk's pairs sorted by (expert, index), each
    #          written to its slot; then a share of the blocks: expert id (-1 for the EP
    #          sentinel and for every block past the end) and the padding slots filled
    #          with numel (slots past num_tokens_post_padded are left unwritten)
    # The order inside an expert is the pairs' order (chunk, then index in the chunk), as a
    # stable sort gives and as aiter's kernels give: the same sorted_token_ids, bit for bit.
    @triton.jit
    def _align_experts(ids_ptr, emap_ptr, offs, m, sentinel, HAS_MAP: tl.constexpr,
                       E_PAD: tl.constexpr):
        """The aligned expert of each pair at offs (the EP map applied: remote -> the
        sentinel n_exp - 1); E_PAD - 1, a bin no expert has, where m is false."""
        e = tl.load(ids_ptr + offs, mask=m, other=0).to(tl.int32)
        if HAS_MAP:
            loc = tl.load(emap_ptr + e, mask=m, other=0).to(tl.int32)
            e = tl.where(loc < 0, sentinel, loc)
        return tl.where(m, e, E_PAD - 1)  # the last bin holds no expert (E_PAD > n_exp)

    @triton.jit
    def _align_count(ids_ptr, emap_ptr, counts_ptr, p, numel, sentinel, HAS_MAP: tl.constexpr,
                     CHUNK: tl.constexpr, E_PAD: tl.constexpr):
        offs = p * CHUNK + tl.arange(0, CHUNK)
        e = _align_experts(ids_ptr, emap_ptr, offs, offs < numel, sentinel, HAS_MAP, E_PAD)
        tl.store(counts_ptr + p * E_PAD + tl.arange(0, E_PAD), tl.histogram(e, E_PAD))

    @triton.jit
    def _align_scan(counts_ptr, adj_ptr, start_ptr, end_ptr, npp_ptr, n_chunks, n_exp, block_m,
                    P_PAD: tl.constexpr, E_PAD: tl.constexpr):
        pr = tl.arange(0, P_PAD)[:, None]
        er = tl.arange(0, E_PAD)[None, :]
        m = (pr < n_chunks) & (er < n_exp)
        c = tl.load(counts_ptr + pr * E_PAD + er, mask=m, other=0)
        tot = tl.sum(c, axis=0)                                   # [E_PAD] pairs per expert
        padded = (tot + block_m - 1) // block_m * block_m
        end_pad = tl.cumsum(padded, axis=0)
        start = end_pad - padded                                  # padded start per expert
        before = tl.cumsum(c, axis=0) - c                         # this expert, earlier chunks
        in_chunk = tl.cumsum(c, axis=1) - c                       # earlier experts, this chunk
        # slot of a chunk's j-th pair in (expert, index) order: adj[p, e] + j
        tl.store(adj_ptr + pr * E_PAD + er, start[None, :] + before - in_chunk, mask=m)
        ev = tl.arange(0, E_PAD)
        tl.store(start_ptr + ev, start)
        tl.store(end_ptr + ev, start + tot)                       # end of the real pairs
        tl.store(npp_ptr, tl.sum(padded, axis=0))

    @triton.jit
    def _align_place(ids_ptr, emap_ptr, adj_ptr, start_ptr, end_ptr, npp_ptr, sorted_ptr,
                     eids_ptr, p, numel, sentinel, n_exp, n_blocks, blocks_per_prog,
                     HAS_MAP: tl.constexpr, SENTINEL_REMOTE: tl.constexpr, CHUNK: tl.constexpr,
                     E_PAD: tl.constexpr, BLOCK_M: tl.constexpr, BB: tl.constexpr):
        j = tl.arange(0, CHUNK)
        offs = p * CHUNK + j
        e = _align_experts(ids_ptr, emap_ptr, offs, offs < numel, sentinel, HAS_MAP, E_PAD)
        key = tl.sort(e * CHUNK + j)          # (expert, index in the chunk), ascending
        se = key // CHUNK
        valid = se < E_PAD - 1
        slot = tl.load(adj_ptr + p * E_PAD + se, mask=valid, other=0) + j
        tl.store(sorted_ptr + slot, p * CHUNK + key % CHUNK, mask=valid)
        # this program's share of the blocks
        total = tl.load(npp_ptr)
        ev = tl.arange(0, E_PAD)
        starts = tl.load(start_ptr + ev)
        live = ev < n_exp
        first = p * blocks_per_prog
        for b0 in range(first, first + blocks_per_prog, BB):
            b = b0 + tl.arange(0, BB)
            mine = (b < first + blocks_per_prog) & (b < n_blocks)
            in_range = mine & (b * BLOCK_M < total)
            # the block's expert: how many experts start at or before its first slot, less 1
            x = tl.sum(((starts[None, :] <= (b * BLOCK_M)[:, None]) & live[None, :]).to(tl.int32),
                       axis=1) - 1
            x = tl.maximum(x, 0)
            eid = x
            if SENTINEL_REMOTE:
                eid = tl.where(x == sentinel, -1, x)
            # every block of the buffer: -1 past the end, as a buffer filled with -1 reads
            tl.store(eids_ptr + b, tl.where(in_range, eid, -1), mask=mine)
            real_end = tl.load(end_ptr + x, mask=in_range, other=0)
            s = (b * BLOCK_M)[:, None] + tl.arange(0, BLOCK_M)[None, :]
            tl.store(sorted_ptr + s, numel, mask=in_range[:, None] & (s >= real_end[:, None]))

    @triton.jit
    def _moe_lab_moe_align_block_size_count_kernel(
            ids_ptr, emap_ptr, counts_ptr, numel, sentinel, HAS_MAP: tl.constexpr,
            CHUNK: tl.constexpr, E_PAD: tl.constexpr):
        _align_count(ids_ptr, emap_ptr, counts_ptr, tl.program_id(0), numel, sentinel, HAS_MAP,
                     CHUNK, E_PAD)

    @triton.jit
    def _moe_lab_moe_align_block_size_scan_kernel(
            counts_ptr, adj_ptr, start_ptr, end_ptr, npp_ptr, n_chunks, n_exp, block_m,
            P_PAD: tl.constexpr, E_PAD: tl.constexpr):
        _align_scan(counts_ptr, adj_ptr, start_ptr, end_ptr, npp_ptr, n_chunks, n_exp, block_m,
                    P_PAD, E_PAD)

    @triton.jit
    def _moe_lab_moe_align_block_size_place_kernel(
            ids_ptr, emap_ptr, adj_ptr, start_ptr, end_ptr, npp_ptr, sorted_ptr, eids_ptr,
            numel, sentinel, n_exp, n_blocks, blocks_per_prog, HAS_MAP: tl.constexpr,
            SENTINEL_REMOTE: tl.constexpr, CHUNK: tl.constexpr, E_PAD: tl.constexpr,
            BLOCK_M: tl.constexpr, BB: tl.constexpr):
        _align_place(ids_ptr, emap_ptr, adj_ptr, start_ptr, end_ptr, npp_ptr, sorted_ptr,
                     eids_ptr, tl.program_id(0), numel, sentinel, n_exp, n_blocks,
                     blocks_per_prog, HAS_MAP, SENTINEL_REMOTE, CHUNK, E_PAD, BLOCK_M, BB)

    # One chunk (few pairs): the three steps in one program, one launch instead of three.
    # The counts, padded starts and slots stay in registers (one chunk: no cross-chunk
    # scan); adj and the starts go to global memory once, for the pairs' gather after one
    # barrier. Each expert then writes its own blocks' id and padding slots (a tile of
    # ET experts x at most MAXB blocks, x BLOCK_M slots), instead of every block searching
    # the experts' starts ([blocks, experts] compares and reductions, the cost that grew
    # with E squared); blocks past the end get -1.
    @triton.jit
    def _moe_lab_moe_align_block_size_one_kernel(
            ids_ptr, emap_ptr, adj_ptr, start_ptr, end_ptr, npp_ptr, sorted_ptr, eids_ptr,
            numel, sentinel, n_exp, n_blocks, HAS_MAP: tl.constexpr,
            SENTINEL_REMOTE: tl.constexpr, CHUNK: tl.constexpr, E_PAD: tl.constexpr,
            BLOCK_M: tl.constexpr, BB: tl.constexpr, ET: tl.constexpr, MAXB: tl.constexpr):
        j = tl.arange(0, CHUNK)
        e = _align_experts(ids_ptr, emap_ptr, j, j < numel, sentinel, HAS_MAP, E_PAD)
        ev = tl.arange(0, E_PAD)
        c = tl.where(ev < n_exp, tl.histogram(e, E_PAD), 0)      # pairs per expert
        padded = (c + BLOCK_M - 1) // BLOCK_M * BLOCK_M
        start = tl.cumsum(padded, axis=0) - padded                # padded start per expert
        tl.store(adj_ptr + ev, start - (tl.cumsum(c, axis=0) - c))  # slot of sorted pair j: adj + j
        tl.store(start_ptr + ev, start)
        tl.store(end_ptr + ev, start + c)
        total = tl.sum(padded, axis=0)
        tl.store(npp_ptr, total)
        tl.debug_barrier()
        # the pairs, sorted by (expert, index), each to its slot
        key = tl.sort(e * CHUNK + j)
        se = key // CHUNK
        valid = se < E_PAD - 1
        slot = tl.load(adj_ptr + se, mask=valid, other=0) + j
        tl.store(sorted_ptr + slot, key % CHUNK, mask=valid)
        # each expert's blocks: its id (-1 for the EP sentinel), its padding slots = numel
        kb = tl.arange(0, MAXB)[None, :]
        pj = tl.arange(0, BLOCK_M)[None, :]
        for e0 in range(0, n_exp, ET):
            et = e0 + tl.arange(0, ET)
            live = et < n_exp
            st = tl.load(start_ptr + et, mask=live, other=0)
            en = tl.load(end_ptr + et, mask=live, other=0)
            pend = (st + (en - st + BLOCK_M - 1) // BLOCK_M * BLOCK_M)[:, None]
            eid = et
            if SENTINEL_REMOTE:
                eid = tl.where(et == sentinel, -1, et)
            b = (st // BLOCK_M)[:, None] + kb
            tl.store(eids_ptr + b, eid[:, None] + kb * 0, mask=live[:, None] & (b * BLOCK_M < pend))
            s = en[:, None] + pj
            tl.store(sorted_ptr + s, numel + pj * 0, mask=live[:, None] & (s < pend))
        # every block past the end: -1, as a buffer filled with -1 reads
        for b0 in range(0, n_blocks, BB):
            bl = b0 + tl.arange(0, BB)
            tl.store(eids_ptr + bl, tl.full([BB], -1, tl.int32),
                     mask=(bl < n_blocks) & (bl * BLOCK_M >= total))

    # The sparse case (no EP map, pairs * 4 <= experts: few pairs, most experts idle): no
    # sort at all. Block b holds pair b alone, padded with numel, and its expert is that
    # pair's (expert_ids is topk_ids itself): one launch instead of three, and the GEMMs
    # run the same number of blocks a sort would give when every pair's expert differs.
    # vLLM's Triton path does the same for this case (inside its GEMM kernel, which aiter's
    # cannot); one program per pair, program 0 writing the padded count.
    @triton.jit
    def _moe_lab_moe_align_block_size_small_kernel(sorted_ptr, npp_ptr, numel,
                                                   BLOCK_M: tl.constexpr):
        p = tl.program_id(0)
        j = tl.arange(0, BLOCK_M)
        tl.store(sorted_ptr + p * BLOCK_M + j, tl.where(j == 0, p, numel))
        if p == 0:
            tl.store(npp_ptr, numel * BLOCK_M)

    @triton.jit
    def _moe_lab_moe_sum_rows_kernel(y_ptr, pos_ptr, w_ptr, out_ptr, hidden, pad,
                                     stride_yr, stride_yh, stride_or, stride_oh,
                                     K: tl.constexpr, HAS_W: tl.constexpr,
                                     BLOCK_H: tl.constexpr):
        """out[t] = sum_j w[t, j] * y[pos[t, j]] over a BLOCK_H slice, fp32 in registers,
        rounded once; a slot whose pos is >= pad (remote, padding) adds exactly 0 and its
        row is never read. The combine of the sorted-rows backends (torch-grouped,
        torch-fp8-grouped) in one pass, as vLLM's and SGLang's unpermute-and-reduce do."""
        t = tl.program_id(0)
        h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
        m = h < hidden
        acc = tl.zeros([BLOCK_H], dtype=tl.float32)
        for j in tl.static_range(K):
            p = tl.load(pos_ptr + t * K + j).to(tl.int64)
            ok = (tl.zeros([BLOCK_H], dtype=tl.int64) + p) < pad  # a vector mask
            v = tl.load(y_ptr + p * stride_yr + h * stride_yh, mask=m & ok,
                        other=0.0).to(tl.float32)
            if HAS_W:
                v = v * tl.load(w_ptr + t * K + j).to(tl.float32)
            acc += v
        tl.store(out_ptr + t.to(tl.int64) * stride_or + h * stride_oh,
                 acc.to(out_ptr.dtype.element_ty), mask=m)

    KERNELS = {"act": _moe_lab_silu_and_mul_kernel, "combine": _moe_lab_moe_sum_kernel,
               "combine_rows": _moe_lab_moe_sum_rows_kernel,
               "quant": _moe_lab_group_quant_kernel,
               "act_quant": _moe_lab_act_mul_and_group_quant_kernel,
               "align": (_moe_lab_moe_align_block_size_count_kernel,
                         _moe_lab_moe_align_block_size_scan_kernel,
                         _moe_lab_moe_align_block_size_place_kernel),
               "align_one": _moe_lab_moe_align_block_size_one_kernel,
               "align_small": _moe_lab_moe_align_block_size_small_kernel}
else:
    KERNELS = {}
