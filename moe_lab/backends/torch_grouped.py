"""`torch-grouped`: sort tokens by expert, two `torch._grouped_mm` calls (CUTLASS on Hopper).

No host synchronisation: offsets are computed on the device, so the call can be captured
in a CUDA graph. Rows routed to remote experts (EP) sort last, past the final offset,
and are zeroed before the combine.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import Backend, Weights, register


@register
class TorchGroupedBackend(Backend):
    name = "torch-grouped"
    description = "torch._grouped_mm grouped GEMMs (CUTLASS on Hopper)"
    label, color = "torch-grouped", "tab:blue"
    # everything sized for all T*k sorted rows
    intermediates = [("gathered x", "all", "H", "act"), ("gemm1 out h", "all", "2I", "act"),
                     ("act out a", "all", "I", "act"), ("gemm2 out y fp32", "all", "H", 4),
                     ("fp32 accumulator", "tokens", "H", 4)]

    def available(self):
        if not hasattr(torch, "_grouped_mm"):
            return False, f"torch {torch.__version__} has no torch._grouped_mm (needs >= 2.8)"
        return True, ""

    def supports(self, problem, device):
        if str(device).startswith("cuda"):
            if problem.dtype != "bf16":
                return False, "torch._grouped_mm on GPU takes bf16 only"
            if torch.version.hip is None and torch.cuda.is_available():
                major, _ = torch.cuda.get_device_capability()
                if major < 9:
                    return False, f"torch._grouped_mm needs sm90+ on NVIDIA (this is sm{major}x)"
        # torch._grouped_mm checks 16-byte aligned strides on every device (the CPU fallback too)
        esz = problem.torch_dtype.itemsize
        if (problem.hidden * esz) % 16 or (problem.inter * esz) % 16:
            return False, (f"torch._grouped_mm needs 16-byte rows: H*{esz} and I*{esz} must be "
                           f"multiples of 16 (H={problem.hidden}, I={problem.inter})")
        return True, ""

    def prepare(self, problem, weights: Weights):
        E_local = weights.w1.shape[0]
        inter = problem.inter
        woi = problem.weight_on_input
        w1t = weights.w1.transpose(-2, -1)  # [E, H, 2I], column-major view, no copy
        w2t = weights.w2.transpose(-2, -1)  # [E, I, H]
        emap = weights.expert_map.long() if weights.expert_map is not None else None

        def fn(x, topk_weights, topk_ids):
            T, k = topk_ids.shape
            local = emap[topk_ids.long()] if emap is not None else topk_ids.long()
            key = torch.where(local < 0, E_local, local).reshape(-1)
            order = torch.argsort(key, stable=True)
            counts = torch.zeros(E_local + 1, dtype=torch.int32, device=x.device)
            counts.index_add_(0, key, torch.ones_like(key, dtype=torch.int32))
            offs = torch.cumsum(counts[:E_local], 0, dtype=torch.int32)
            tok = order // k
            w_sorted = topk_weights.reshape(-1)[order].float()
            xs = x[tok]
            if woi:
                xs = (xs.float() * w_sorted[:, None]).to(x.dtype)
            h = torch._grouped_mm(xs, w1t, offs=offs)
            a = F.silu(h[:, :inter]) * h[:, inter:]
            y = torch._grouped_mm(a, w2t, offs=offs)
            valid = (key[order] < E_local)[:, None]
            scale = torch.ones_like(w_sorted) if woi else w_sorted
            y = torch.where(valid, y.float() * scale[:, None], 0.0)
            out = torch.zeros(T, x.shape[1], dtype=torch.float32, device=x.device)
            out.index_add_(0, tok, y)
            return out.to(x.dtype)
        return fn
