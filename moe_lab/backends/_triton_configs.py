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

The space (`gemm_space`) is every combination of the values below that can run, on an
H200 (Hopper, sm_90), in aiter's `_fused_moe_kernel` / `_fused_moe_silu_kernel`
(aiter/ops/triton/_triton_kernels/moe_op.py, moe_op_silu_fused.py); `limits` names the
limit a combination breaks:

  * shared memory: Triton's software pipeline holds `num_stages` copies of the A tile
    [BLOCK_SIZE_M, BLOCK_SIZE_K] and the B tile [BLOCK_SIZE_K, BLOCK_SIZE_N], so it needs
    (BLOCK_SIZE_M + BLOCK_SIZE_N) * BLOCK_SIZE_K * num_stages * element bytes (the count
    Triton's own matmul pruning uses); Hopper gives a block at most 227 KB (232448 bytes,
    the opt-in maximum). The element is 2 bytes for bf16/fp16 and 1 for the fp8 schemes
    (fp8-tensor: fused_moe quantises A into B's fp8 dtype itself; fp8-block128: A arrives
    in fp8). A combination over the limit fails to launch ("out of resources").
  * registers: the fp32 accumulator [BLOCK_SIZE_M, BLOCK_SIZE_N] lives in the block's
    registers, BLOCK_SIZE_M * BLOCK_SIZE_N / (32 * num_warps) per thread, and a thread
    holds at most 255. The fp8-block128 kernel also keeps each K step's dot product in its
    own fp32 tile before scaling it (`accumulator += tl.dot(a, b) * a_scale * b_scale`),
    so it needs twice that. A tile whose accumulators alone exceed 255 registers per
    thread cannot be held in registers at all (it spills every step).
  * fp8-block128: the kernel loads one activation and one weight scale per K step
    (`offs_ks = k * BLOCK_SIZE_K // group_k`, group_k = 128), so a K tile must lie within
    one 128-column scale block: 128 % BLOCK_SIZE_K == 0 (64 or 128). Weight scales are
    loaded per column (`offs_bn // group_n`), so BLOCK_SIZE_N is free.
  * BLOCK_SIZE_M and the token count: a token's top-k experts are distinct, so no expert
    receives more than T rows at T tokens. A tile of max(16, next power of two >= T) rows
    already holds every expert's rows in one block; a taller tile gives the same number of
    blocks, each with only more padding rows computed (16 is the smallest tile tl.dot
    takes). So at T tokens BLOCK_SIZE_M <= block_m_limit(T).

The search (moe_lab.measuring.tuning) times a coarse subset first (`is_coarse`: GROUP_SIZE_M and
num_stages at COARSE_GROUP_M / COARSE_STAGES, every other value) and then walks from each
token count's best to its neighbours (`neighbours`: one of FINE_KEYS changed), which
reaches the other GROUP_SIZE_M and num_stages values.
"""
from __future__ import annotations

import itertools

from ..core.config_files import nearest, read_table, write_table  # noqa: F401 (the file format)
from ..core.devices import file_device_name

SMEM_BYTES = 227 * 1024  # Hopper (H100/H200): the most shared memory one block can have
REGISTERS_PER_THREAD = 255  # the most registers a thread can hold (sm_90)
SCALE_BLOCK_K = 128  # fp8-block128: the K extent of one scale block (group_k)

BLOCK_SIZE_M = (16, 32, 64, 128, 256)
BLOCK_SIZE_N = (32, 64, 128, 256)
BLOCK_SIZE_K = (64, 128, 256)
GROUP_SIZE_M = (1, 16, 32, 64)
NUM_WARPS = (4, 8)
NUM_STAGES = (2, 3, 4, 5)
KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps",
        "num_stages")
VALUES = dict(zip(KEYS, (BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, NUM_WARPS,
                         NUM_STAGES)))
# the coarse pass: these values of GROUP_SIZE_M and num_stages (all of the others); the
# fine pass reaches the rest from each token count's best
COARSE_GROUP_M = (1, 16)
COARSE_STAGES = (3, 4)
# what the fine pass changes, one at a time (BLOCK_SIZE_M is the coarse pass's choice: it
# also sets the alignment gemm2 shares)
FINE_KEYS = ("GROUP_SIZE_M", "num_stages", "num_warps", "BLOCK_SIZE_N", "BLOCK_SIZE_K")


def file_stem(local_experts: int, inter: int, device_name: str, dtype: str = "bf16") -> str:
    """vLLM's name; fp8 schemes add `,dtype=fp8_w8a8` and blocks `,block_shape=[128,128]`
    (vLLM's get_config_file_name), so bf16 and fp8 tunings never share a file."""
    stem = f"E={local_experts},N={inter},device_name={file_device_name(device_name)}"
    if dtype.startswith("fp8"):
        stem += ",dtype=fp8_w8a8" + (",block_shape=[128,128]" if dtype == "fp8-block128" else "")
    return stem


def file_names(local_experts: int, inter: int, device_name: str,
               dtype: str = "bf16") -> dict[str, str]:
    stem = file_stem(local_experts, inter, device_name, dtype)
    return {"gemm1": f"{stem}.json", "gemm2": f"{stem}_down.json"}


def smem_bytes(cfg: dict, elem_bytes: int = 2) -> int:
    """Shared memory of the pipelined A and B tiles (module doc)."""
    return (cfg["BLOCK_SIZE_M"] * cfg["BLOCK_SIZE_K"]
            + cfg["BLOCK_SIZE_K"] * cfg["BLOCK_SIZE_N"]) * elem_bytes * cfg["num_stages"]


def accumulator_registers(cfg: dict, block_quant: bool = False) -> float:
    """fp32 registers per thread the accumulator tile(s) need (module doc)."""
    tiles = 2 if block_quant else 1
    return tiles * cfg["BLOCK_SIZE_M"] * cfg["BLOCK_SIZE_N"] / (32 * cfg["num_warps"])


def block_m_limit(tokens: int) -> int:
    """The tallest useful BLOCK_SIZE_M at `tokens` tokens: max(16, next power of two >= T)
    (module doc: no expert has more than T rows)."""
    return max(16, 1 << max(int(tokens) - 1, 0).bit_length())


def limits(cfg: dict, elem_bytes: int = 2, block_quant: bool = False,
           tokens: int | None = None) -> list[str]:
    """The limits (module doc) `cfg` breaks, in words; [] when it can run."""
    out = []
    smem = smem_bytes(cfg, elem_bytes)
    if smem > SMEM_BYTES:
        out.append(f"shared memory {smem} B > {SMEM_BYTES} B")
    regs = accumulator_registers(cfg, block_quant)
    if regs > REGISTERS_PER_THREAD:
        out.append(f"accumulator {regs:.0f} registers/thread > {REGISTERS_PER_THREAD}")
    if block_quant and SCALE_BLOCK_K % cfg["BLOCK_SIZE_K"]:
        out.append(f"BLOCK_SIZE_K {cfg['BLOCK_SIZE_K']} spans more than one "
                   f"{SCALE_BLOCK_K}-column scale block")
    if tokens is not None and cfg["BLOCK_SIZE_M"] > block_m_limit(tokens):
        out.append(f"BLOCK_SIZE_M {cfg['BLOCK_SIZE_M']} > {block_m_limit(tokens)}, the "
                   f"tallest useful tile at {tokens} tokens")
    return out


def full_grid() -> list[dict]:
    """Every combination of the listed values (before any limit)."""
    return [dict(zip(KEYS, v)) for v in itertools.product(*(VALUES[k] for k in KEYS))]


def gemm_space(tokens: int | None = None, block_m: int | None = None, elem_bytes: int = 2,
               block_quant: bool = False) -> list[dict]:
    """Every configuration of one GEMM that can run (module doc), at `tokens` tokens
    (None: any token count, no BLOCK_SIZE_M limit); `block_m` fixes BLOCK_SIZE_M (the
    second GEMM shares the first's alignment). Ordered by the keys, BLOCK_SIZE_M first."""
    return [c for c in full_grid()
            if (block_m is None or c["BLOCK_SIZE_M"] == block_m)
            and not limits(c, elem_bytes, block_quant, tokens)]


def is_coarse(cfg: dict) -> bool:
    """In the coarse pass (module doc)."""
    return cfg.get("GROUP_SIZE_M") in COARSE_GROUP_M and cfg.get("num_stages") in COARSE_STAGES
