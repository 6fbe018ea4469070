"""`torch-grouped-bmm`: torch-grouped with the other combine, for the A/B on a GPU: y put
back in slot order by one index_select and reduced over k by torch.bmm with the router
weights (fp32 accumulation inside the GEMM), instead of one embedding_bag. Everything
else is torch-grouped's (torch_grouped.py explains both)."""
from __future__ import annotations

from . import register
from .torch_grouped import INTERMEDIATES, TorchGroupedBackend


@register
class TorchGroupedBmmBackend(TorchGroupedBackend):
    name = "torch-grouped-bmm"
    description = "torch._grouped_mm grouped GEMMs, bf16 glue, bmm combine"
    label, color = "torch-grouped, bmm combine", "tab:cyan"
    combine = "bmm"
    intermediates = INTERMEDIATES["bmm"]
