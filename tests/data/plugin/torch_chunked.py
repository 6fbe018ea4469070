"""`torch-chunked`: a tunable CPU backend for the tuner's tests. The reference loop, each
GEMM done over the expert's rows in chunks of CHUNK rows (a Python loop per chunk), so its
configurations have really different costs: CHUNK=1 runs one tiny matmul per row, CHUNK=64
one per 64 rows. A chunk over 64 rows fails the way a GPU launch out of shared memory does."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import Backend, Weights, register

MAX_CHUNK = 64


def _chunked(a: torch.Tensor, w: torch.Tensor, chunk: int) -> torch.Tensor:
    if chunk > MAX_CHUNK:
        raise RuntimeError(f"out of resource: CHUNK={chunk} rows exceed the {MAX_CHUNK}-row scratch")
    return torch.cat([a[i:i + chunk] @ w.t() for i in range(0, a.shape[0], chunk)]) \
        if a.shape[0] else a.new_zeros(0, w.shape[0])


@register
class TorchChunkedBackend(Backend):
    name = "torch-chunked"
    description = "per-expert loop, GEMMs in chunks of CHUNK rows (tunable, for tests)"
    tunable = True
    not_capturable = "reads expert token counts on the host"

    def default_config(self, problem):
        return {"gemm1": {"CHUNK": 2}, "gemm2": {"CHUNK": 2}}

    def config_space(self, problem):
        return {s: [{"CHUNK": c} for c in (1, 4, 16, 64, 128)] for s in ("gemm1", "gemm2")}

    def config_files(self, problem, device_name):
        stem = f"E={problem.local_experts},N={problem.inter},device_name={device_name.replace(' ', '_')}"
        return {"gemm1": f"{stem}.json", "gemm2": f"{stem}_down.json"}

    def prepare(self, problem, weights: Weights, config=None):
        from moe_lab.storage.configs import nearest
        config = config or self.default_config(problem)

        def chunk(stage, T):
            c = config[stage]
            return (nearest(c, T) if all(isinstance(k, int) for k in c) else c)["CHUNK"]

        def fn(x, topk_weights, topk_ids):
            T, k = topk_ids.shape
            c1, c2 = chunk("gemm1", T), chunk("gemm2", T)
            ids = topk_ids.long()
            if weights.expert_map is not None:
                ids = weights.expert_map.long()[ids]
            out = torch.zeros(T, x.shape[1], dtype=torch.float32)
            inter = weights.w2.shape[2]
            for e in range(weights.w1.shape[0]):
                tok, slot = (ids == e).nonzero(as_tuple=True)
                if not len(tok):
                    continue
                h = _chunked(x[tok], weights.w1[e], c1)
                a = F.silu(h[:, :inter]) * h[:, inter:]
                y = _chunked(a, weights.w2[e], c2).float() * topk_weights[tok, slot, None].float()
                out.index_add_(0, tok, y)
            return out.to(x.dtype)
        return fn
