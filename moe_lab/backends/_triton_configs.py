"""Launch configurations of Triton fused-MoE GEMMs: the search space `moe-lab tune` walks,
and the files they live in, in the format vLLM and aiter read.

A configuration is the kernel's launch keys: BLOCK_SIZE_M/N/K, GROUP_SIZE_M, num_warps,
num_stages. A config file maps the token count M (a string key) to one configuration, and
a caller picks the key nearest its M, as vLLM's `get_moe_configs` does:

    E=<local experts>,N=<intermediate per rank>,device_name=<torch name, _ for spaces>.json
        {"1": {"BLOCK_SIZE_M": 16, ...}, "64": {...}, ...}            gemm1 (x @ w1^T)
    E=...,N=...,device_name=..._down.json                             gemm2 (a @ w2^T)

The first file alone is what vLLM reads (it then uses it for both GEMMs); the `_down` file
holds the second GEMM's own choice. Both GEMMs of one call must share BLOCK_SIZE_M when
they share one token alignment; moe-lab aligns once per distinct BLOCK_SIZE_M, so they may
differ, and the tuner keeps gemm2's BLOCK_SIZE_M equal to gemm1's (one alignment).
"""
from __future__ import annotations

from ..core.config_files import nearest, read_table, write_table  # noqa: F401 (the file format)

SMEM_BYTES = 200 * 1024  # Hopper: 227 KB per block; keep room for the epilogue


def file_stem(local_experts: int, inter: int, device_name: str, dtype: str = "bf16") -> str:
    """vLLM's name; fp8 schemes add `,dtype=fp8_w8a8` and blocks `,block_shape=[128,128]`
    (vLLM's get_config_file_name), so bf16 and fp8 tunings never share a file."""
    stem = f"E={local_experts},N={inter},device_name={device_name.replace(' ', '_')}"
    if dtype.startswith("fp8"):
        stem += ",dtype=fp8_w8a8" + (",block_shape=[128,128]" if dtype == "fp8-block128" else "")
    return stem


def file_names(local_experts: int, inter: int, device_name: str,
               dtype: str = "bf16") -> dict[str, str]:
    stem = file_stem(local_experts, inter, device_name, dtype)
    return {"gemm1": f"{stem}.json", "gemm2": f"{stem}_down.json"}


def smem_bytes(cfg: dict, elem_bytes: int = 2) -> int:
    return (cfg["BLOCK_SIZE_M"] * cfg["BLOCK_SIZE_K"]
            + cfg["BLOCK_SIZE_K"] * cfg["BLOCK_SIZE_N"]) * elem_bytes * cfg["num_stages"]


def block_m_choices(rows_per_expert: float) -> list[int]:
    """BLOCK_SIZE_M worth trying when experts get this many rows on average: a tile much
    taller than an expert's rows computes padding."""
    if rows_per_expert <= 8:
        return [16]
    if rows_per_expert <= 32:
        return [16, 32]
    if rows_per_expert <= 128:
        return [32, 64]
    return [64, 128]


def gemm_space(rows_per_expert: float, block_m: int | None = None) -> list[dict]:
    """Candidates for one GEMM, pruned by rows per expert and shared memory: small tiles
    (M <= 32) with 4 warps and deep K; large tiles with 4 or 8 warps. `block_m` fixes
    BLOCK_SIZE_M (the second GEMM shares the first's alignment)."""
    out = []
    for bm in ([block_m] if block_m else block_m_choices(rows_per_expert)):
        small = bm <= 32
        for bn in ((32, 64, 128) if small else (64, 128, 256)):
            for bk in ((64, 128, 256) if small else (64, 128)):
                for warps in ((4,) if small else (4, 8)):
                    for stages in (3, 4):
                        cfg = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk,
                                   GROUP_SIZE_M=1 if small else 8, num_warps=warps,
                                   num_stages=stages)
                        if smem_bytes(cfg) <= SMEM_BYTES:
                            out.append(cfg)
    return out
