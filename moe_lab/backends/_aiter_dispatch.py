"""Which kernels aiter's CK/asm `fused_moe` would run for a problem, without a GPU.

Our own code, mirroring the installed `amd-aiter` wheel (0.1.7.post2.dev18; line numbers
are of that wheel's files, `aiter/` and `aiter_meta/` in site-packages):

* aiter/fused_moe.py `fused_moe_` (l.170-242) builds the key and calls `get_2stage_cfgs`
  with `get_padded_M(M)` (l.484-492): 1..16 tokens -> 16, below 1024 -> the next power of
  two, 1024 and up -> 1024. `expert` is w1.shape[0] (the LOCAL experts, `get_inter_dim`),
  `use_g1u1` is w1.shape[1] == 2*inter (always for our gate+up weights).
* `get_2stage_cfgs` (l.505-728) reads the tuned CSV (`AITER_CONFIG_FMOE_FILE`, chosen by
  aiter/jit/core.py `get_config_file`), `set_index` on 13 key columns and `.to_dict("index")`,
  then `cfg_2stages.get(keys)`: an EXACT match of (cu_num, padded token, model_dim,
  inter_dim, expert, topk, str(activation), str(dtype), str(q_dtype_a), str(q_dtype_w),
  str(q_type), use_g1u1, doweight_stage1). cu_num is `get_cu_num()` (chip_info.py: the
  CU_NUM environment variable, else rocminfo's "Compute Unit"). No nearest token, no other
  cu_num: a miss is a miss (unless AITER_ONLINE_TUNE=1, which tunes on the spot: not
  mirrored). This wheel's tuned_fmoe.csv has rows for cu_num 80 (MI308X) and 256
  (MI355X/MI350X) only, so on MI300X/MI325X (304) every shape takes the default below.
* On a miss (l.598-629): 1-stage only if the combination is in `fused_moe_1stage_dict[gfx]`
  (never for g1u1 bf16/fp16 unquantised) and a token rule holds; otherwise 2-stage with
  `block_m = get_block_size_M(token, topk, expert, inter_dim)` (l.433-447: of 32/64/128 the
  one with the fewest rounds of 128-wide tiles over the CUs, then the least idle CUs), and
  empty kernel names, which the C++ side resolves with its block_m heuristic.
* Empty or unknown kernel names (aiter_meta/csrc/ck_gemm_moe_2stages_codegen/
  gemm_moe_ck2stages.cu `moe_dispatch`) go to `moe_stage{1,2}_heuristic_dispatch`, generated
  from gen_instances.py `A16W16_A8W8_gemm{1,2}[_gfx950]_heuristic_dispatch`: a fixed tile
  per block_m (HEURISTIC_TILES below). Named kernels are the instances listed in
  gemm_moe_ck2stages_common.py (`a16w16_gemm{1,2}_kernels_list[_gfx950]`, CK_TILES below).
* CK's `DeviceMoeGemm::IsSupportedArgument` (3rdparty/composable_kernel/.../
  device_moe_gemm.hpp l.431, GemmSpecialization::Default) rejects N % NPerBlock or
  K % KPerBlock, and ck_moe_stage1_gemm then throws "wrong! device_gemm with the specified
  compilation parameters does not support this GEMM problem". Stage 1 has N = inter,
  K = hidden; stage 2 has N = hidden, K = inter (gemm_moe_ck2stages.cu).
"""
from __future__ import annotations

import functools
import glob
import os
import re
from dataclasses import dataclass

from ..core.devices import fp8_format_of_arch
from .aiter_triton import aiter_root

# get_2stage_cfgs's set_index columns, in its order
KEY_COLUMNS = ("cu_num", "token", "model_dim", "inter_dim", "expert", "topk", "act_type",
               "dtype", "q_dtype_a", "q_dtype_w", "q_type", "use_g1u1", "doweight_stage1")
CU_GFX = {304: "gfx942", 228: "gfx942", 80: "gfx942", 64: "gfx942", 256: "gfx950"}
CU_GPU = {304: "MI300X/MI325X", 228: "MI300A", 80: "MI308X", 64: "MI308X",
          256: "MI355X/MI350X"}
GFX_SUPPORTED = ("gfx942", "gfx950")  # the keys of fused_moe.py's fused_moe_1stage_dict
BLOCK_SIZE_M = 32  # fused_moe.py l.29
TORCH_DTYPE = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "i8": "torch.int8",
               "fp4x2": "torch.float4_e2m1fn_x2", "i4x2": "torch.int4", "u32": "torch.uint32"}
FP8 = {g: f"torch.float8_{fp8_format_of_arch(g)}" for g in GFX_SUPPORTED}  # utility/dtypes.py

# fused_moe.py l.451-472 fused_moe_1stage_dict: (act, q_type, dtype, q_dtype_a, q_dtype_w, g1u1)
_ONE_STAGE = {
    "gfx942": [("Silu", "No", "bf16", "bf16", "bf16", False),
               ("Silu", "No", "fp16", "fp16", "fp16", False),
               ("Gelu", "per_Token", "bf16", "fp8", "i4x2", True),
               ("Silu", "per_1x32", "bf16", "fp4x2", "fp4x2", True),
               ("Silu", "per_Token", "bf16", "i8", "i8", True),
               ("Gelu", "per_Token", "bf16", "i8", "i8", True),
               ("Silu", "per_Token", "bf16", "fp8", "fp8", True),
               ("Gelu", "per_Token", "bf16", "fp8", "fp8", True),
               ("Silu", "per_1x128", "bf16", "fp8", "fp8", True),
               ("Silu", "per_Token", "bf16", "i8", "i8", False),
               ("Gelu", "per_Token", "bf16", "i8", "i8", False)],
    "gfx950": [("Silu", "per_1x32", "bf16", "fp4x2", "fp4x2", True),
               ("Silu", "per_1x128", "bf16", "fp8", "fp8", True)],
}

# gen_instances.py heuristic templates, bf16/fp16 and fp8/i8 (A16W16_A8W8_*): block_m ->
# (pipeline version, BLOCK_SIZE, MPerBlock, NPerBlock, KPerBlock in BYTES of A: "/sizeof(A)")
HEURISTIC_TILES = {
    ("gfx942", 1): {32: (1, 256, 32, 64, 128), 64: (3, 256, 64, 128, 256),
                    128: (3, 256, 128, 128, 128), 256: (3, 256, 256, 128, 128)},
    ("gfx942", 2): {32: (1, 256, 32, 64, 128), 64: (3, 256, 64, 128, 128),
                    128: (3, 256, 128, 128, 128), 256: (3, 256, 256, 128, 128)},
    ("gfx950", 1): {32: (1, 256, 32, 64, 128), 64: (1, 256, 64, 64, 128),
                    128: (3, 256, 128, 128, 128), 256: (3, 256, 256, 128, 128)},
    ("gfx950", 2): {32: (1, 256, 32, 128, 256), 64: (1, 256, 64, 128, 256),
                    128: (3, 256, 128, 128, 128), 256: (3, 256, 256, 128, 128)},
}
# gemm_moe_ck2stages_common.py a16w16 instance lists (the names the lookup table holds):
# (BLOCK_SIZE, MPerBlock, NPerBlock, KPerBlock, MWaves, NWaves, pipeline version)
CK_TILES = {
    ("gfx942", 1): [(256, 32, 64, 128, 1, 4, 1), (256, 32, 64, 64, 1, 4, 1),
                    (256, 64, 64, 128, 1, 4, 1), (256, 64, 64, 64, 1, 4, 1),
                    (256, 128, 64, 64, 1, 4, 1), (256, 64, 128, 128, 1, 4, 3),
                    (256, 64, 128, 64, 1, 4, 3), (256, 128, 128, 128, 1, 4, 3),
                    (256, 128, 128, 64, 1, 4, 3), (256, 256, 128, 64, 1, 4, 3)],
    ("gfx942", 2): [(256, 32, 64, 128, 1, 4, 1), (256, 64, 64, 128, 1, 4, 1),
                    (256, 128, 64, 64, 1, 4, 1), (256, 256, 64, 64, 1, 4, 1),
                    (256, 64, 128, 128, 1, 4, 3), (256, 128, 128, 64, 1, 4, 3),
                    (256, 256, 128, 64, 1, 4, 3), (256, 32, 64, 64, 1, 4, 1),
                    (256, 64, 128, 64, 1, 4, 3)],
    ("gfx950", 1): [(256, 32, 64, 128, 1, 4, 1), (256, 32, 64, 64, 1, 4, 1),
                    (256, 64, 64, 128, 1, 4, 1), (256, 64, 64, 64, 1, 4, 1),
                    (256, 128, 64, 64, 1, 4, 1), (256, 128, 128, 64, 1, 4, 3),
                    (256, 256, 128, 64, 1, 4, 3)],
    ("gfx950", 2): [(256, 32, 128, 128, 1, 4, 1), (256, 64, 128, 128, 1, 4, 1),
                    (256, 128, 128, 64, 1, 4, 1), (256, 256, 128, 64, 1, 4, 1),
                    (256, 128, 128, 64, 1, 4, 3), (256, 256, 128, 64, 1, 4, 3)],
}
_CK_NAME = re.compile(r"moe_ck2stages_gemm([12])_(\d+)x(\d+)x(\d+)x(\d+)_(\d+)x(\d+)_\w*?_v(\d)_")


@dataclass(frozen=True)
class Tile:
    """One CK GEMM instance's tile: what IsSupportedArgument divides N and K by."""
    stage: int
    block_size: int
    m: int
    n: int
    k: int
    version: int
    source: str  # "named" (a tuned kernel name) or "heuristic" (block_m's default)

    def label(self) -> str:
        return f"{self.block_size}x{self.m}x{self.n}x{self.k} v{self.version}"


@dataclass
class Dispatch:
    """What aiter's fused_moe would do for one problem on one GPU."""
    cu_num: int
    gfx: str
    key: dict
    row_index: int | None  # 0-based data row of the tuned table (file line = index + 2)
    row: dict | None
    stages: int  # 1 or 2
    block_m: int
    ksplit: int
    kernels: tuple  # per stage; "" = resolved by the C++ block_m heuristic
    paths: tuple  # per stage: "ck", "asm", "asm-1stage", "cktile"
    us: tuple | None  # per stage, from the tuned row
    tiles: tuple = ()  # CK tiles per stage (bf16/fp16 and 8-bit only)
    reason: str = ""
    table: str = ""


# ------------------------------------------------------------- aiter's rules, mirrored
def next_pow2(n: int) -> int:  # fused_moe.py nextPow2
    return 1 if n <= 0 else 1 << (n - 1).bit_length()


def padded_tokens(m: int) -> int:
    """fused_moe.py get_padded_M: the token count the tuned table is keyed by."""
    if 1 <= m <= 16:
        return 16
    if m < 1024:
        return next_pow2(m)
    return 1024


def block_size_m(token: int, topk: int, expert: int, inter_dim: int, cu_num: int) -> int:
    """fused_moe.py get_block_size_M (its get_cu_num() passed in)."""
    tile_n = 128
    tg_n = (inter_dim + tile_n - 1) // tile_n
    cand = []
    for el in (32, 64, 128):
        max_num_tokens = token * topk + expert * el - topk
        tg_num = tg_n * (max_num_tokens + el - 1) // el
        rounds = (tg_num + cu_num - 1) // cu_num
        empty = cu_num - tg_num % cu_num
        cand.append((rounds, empty, el))
    return sorted(cand, key=lambda x: x[:2])[0][-1]


def table_path() -> str:
    """aiter/jit/core.py get_config_file("AITER_CONFIG_FMOE", ..., "tuned_fmoe"): the env
    variable's files, else configs/tuned_fmoe.csv plus configs/model_configs/*tuned_fmoe*."""
    root = aiter_root()
    if root is None:
        raise ImportError("amd-aiter is not installed (pip install amd-aiter)")
    env = os.environ.get("AITER_CONFIG_FMOE")
    if env:
        return env
    default = os.path.join(root, "configs", "tuned_fmoe.csv")
    extra = [p for p in sorted(glob.glob(os.path.join(root, "configs", "model_configs",
                                                      "*tuned_fmoe*")))
             if os.path.isfile(p) and "untuned" not in p]
    return os.pathsep.join([default] + extra)


def load_table(path: str | None = None):
    """The tuned table as aiter reads it; several files are merged the way
    core.py update_config_files does (concatenate, keep the fastest `us` per untuned key)."""
    path = path or table_path()
    stamp = tuple(os.path.getmtime(p) if os.path.exists(p) else 0 for p in path.split(os.pathsep))
    return _load_table(path, stamp)


@functools.lru_cache(maxsize=4)
def _load_table(path: str, _stamp):
    import pandas as pd
    paths = path.split(os.pathsep)
    frames = [pd.read_csv(p) for p in paths if os.path.exists(p)]
    df = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    if len(frames) > 1:
        untuned = os.path.join(aiter_root(), "configs", "untuned_fmoe.csv")
        keys = list(pd.read_csv(untuned, nrows=0).columns) if os.path.exists(untuned) else None
        df = df.sort_values("us").drop_duplicates(subset=keys, keep="first").reset_index(drop=True)
    return df


def gfx_for(cu_num: int, gfx: str | None = None) -> str:
    if gfx:
        return gfx.split(":")[0]
    if cu_num not in CU_GFX:
        raise ValueError(f"no known AMD GPU has {cu_num} CUs; give its gfx arch too")
    return CU_GFX[cu_num]


def dtype_names(dtype: str, quant: str, gfx: str) -> tuple[str, str, str, str]:
    """(dtype, q_dtype_a, q_dtype_w, q_type) as str() prints them in aiter's key.
    quant: "No" (weights in `dtype`) or "<QuantType member>:<fp8|i8>", e.g. per_Token:fp8."""
    dt = TORCH_DTYPE[dtype]
    if quant in ("No", "none", ""):
        return dt, dt, dt, "QuantType.No"
    qt, _, wd = quant.partition(":")
    qt = {"per_128x128": "per_1x128"}.get(qt, qt)  # fused_moe.py quant_remap
    w = FP8[gfx] if wd == "fp8" else TORCH_DTYPE[wd]
    return dt, w, w, f"QuantType.{qt}"


def problem_key(problem, cu_num: int, gfx: str, quant: str = "No", activation: str = "Silu") -> dict:
    """The 13 key values fused_moe_ would build for this problem (get_2stage_cfgs `keys`).
    An FP8 scheme is bf16 activations with its QuantType (the backend's, _aiter_fp8); a
    dtype aiter has no path for is a ValueError (was: a KeyError, a traceback)."""
    from ._aiter_fp8 import CK_QUANT
    dtype = problem.dtype
    if dtype in CK_QUANT and quant in ("No", "none", ""):
        dtype, quant = "bf16", f"{CK_QUANT[dtype]}:fp8"
    if dtype not in ("bf16", "fp16"):
        raise ValueError(f"aiter's fused_moe has no {dtype} path (bf16, fp16 and the FP8 "
                         f"schemes {', '.join(CK_QUANT)})")
    dt, qa, qw, qt = dtype_names(dtype, quant, gfx)
    return dict(cu_num=cu_num, token=padded_tokens(problem.tokens), model_dim=problem.hidden,
                inter_dim=problem.inter, expert=problem.local_experts, topk=problem.topk,
                act_type=f"ActivationType.{activation}", dtype=dt, q_dtype_a=qa, q_dtype_w=qw,
                q_type=qt, use_g1u1=True, doweight_stage1=bool(problem.weight_on_input))


def find_row(table, key: dict):
    """Exact match on every key column (what `.to_dict('index').get(keys)` does)."""
    mask = None
    for col in KEY_COLUMNS:
        m = table[col] == (int(key[col]) if isinstance(key[col], bool) else key[col])
        mask = m if mask is None else mask & m
    hits = table.index[mask]
    if len(hits) > 1:  # aiter's to_dict("index") would refuse a duplicated key
        raise ValueError(f"tuned table has {len(hits)} rows for one key {key}")
    return (int(hits[0]), table.loc[hits[0]].to_dict()) if len(hits) else (None, None)


def _short(s: str) -> str:
    return s.split(".")[-1]


def _fallback(key: dict, gfx: str) -> tuple[bool, int, str]:
    """get_2stage_cfgs when no row matches: (run_1stage, block_m, why)."""
    act, qt = _short(key["act_type"]), _short(key["q_type"])
    names = {v: k for k, v in TORCH_DTYPE.items()} | {FP8[gfx]: "fp8"}
    combo = (act, qt, names.get(key["dtype"]), names.get(key["q_dtype_a"]),
             names.get(key["q_dtype_w"]), bool(key["use_g1u1"]))
    one = False
    if not key["doweight_stage1"] and combo in _ONE_STAGE[gfx]:
        if qt == "per_1x128":
            one = key["inter_dim"] % 256 == 0
        elif qt == "per_Token" and combo[4] in ("i8", "fp8"):
            one = key["token"] > 32
        elif qt != "per_1x32":
            one = key["token"] < 256
    if one:
        return True, BLOCK_SIZE_M, "1-stage (fused_moe_1stage_dict) with BLOCK_SIZE_M"
    if qt == "per_1x128":
        return False, 64, "2-stage, block_m 64 (per_1x128)"
    bm = block_size_m(key["token"], key["topk"], key["expert"], key["inter_dim"], key["cu_num"])
    return False, bm, f"2-stage, block_m {bm} from get_block_size_M"


def tile_from_name(name: str, gfx: str, listed: bool = True) -> Tile | None:
    """The tile of a named CK kernel; with `listed`, only if the arch's bf16/fp16 instance
    list has it (else aiter prints "ck kernel not found" and uses the heuristic)."""
    m = _CK_NAME.match(name or "")
    if not m:
        return None
    st, bs, mm, n, k, mw, nw, ver = (int(g) for g in m.groups())
    if listed and (bs, mm, n, k, mw, nw, ver) not in CK_TILES[(gfx, st)]:
        return None
    return Tile(st, bs, mm, n, k, ver, "named")


def heuristic_tile(stage: int, block_m: int, gfx: str, a_bytes: int) -> Tile | None:
    t = HEURISTIC_TILES[(gfx, stage)].get(block_m)
    return None if t is None else Tile(stage, t[1], t[2], t[3], t[4] // a_bytes, t[0], "heuristic")


def dispatch(problem, cu_num: int, gfx: str | None = None, quant: str = "No",
             activation: str = "Silu", table=None) -> Dispatch:
    """What fused_moe would use for `problem` on a GPU with `cu_num` CUs (gfx from cu_num
    unless given): the tuned row or the fallback, block_m, kernels and CK tiles."""
    gfx = gfx_for(cu_num, gfx)
    if gfx not in GFX_SUPPORTED:
        raise ValueError(f"aiter's fused_moe dispatcher has no entry for {gfx} "
                         f"(fused_moe_1stage_dict covers {', '.join(GFX_SUPPORTED)})")
    return dispatch_key(problem_key(problem, cu_num, gfx, quant, activation), gfx, table)


def dispatch_key(key: dict, gfx: str, table=None) -> Dispatch:
    """get_2stage_cfgs for one key (KEY_COLUMNS, values as aiter's str()s them)."""
    cu_num, activation = key["cu_num"], _short(key["act_type"])
    path = None
    if table is None:
        path = table_path()
        table = load_table(path)
    idx, row = find_row(table, key)
    qt = _short(key["q_type"])
    if row is not None:
        one, bm, ksplit = bool(row.get("run_1stage", 0)), int(row["block_m"]), int(row["ksplit"])
        k1 = "" if str(row["kernelName1"]) == "nan" else str(row["kernelName1"])
        k2 = "" if str(row["kernelName2"]) == "nan" else str(row["kernelName2"])
        why = f"tuned row #{idx} (token {key['token']})"
    else:
        one, bm, why = _fallback(key, gfx)
        ksplit, k1, k2 = 0, "", ""
        none = not (table["cu_num"] == cu_num).any()
        why = (f"no tuned row ({'the table has no row at all' if none else 'no row for this key'}"
               f" for cu_num {cu_num}) -> aiter's default: {why}")
    if one:
        return Dispatch(cu_num, gfx, key, idx, row, 1, bm, ksplit, (k1,), ("asm-1stage",),
                        (row["us1"],) if row else None, (), why, path or "")
    wd = key["q_dtype_w"]
    if key["dtype"] in (TORCH_DTYPE["bf16"], TORCH_DTYPE["fp16"]) and qt == "per_1x32" \
            and activation == "Swiglu":
        bm = 16 if key["token"] < 2048 else 32  # cktile branch
        paths = ("cktile", "cktile")
    elif "ck2stages" in k1 or (qt == "per_1x128" and key["doweight_stage1"]) or wd in (
            TORCH_DTYPE["bf16"], TORCH_DTYPE["fp16"], TORCH_DTYPE["u32"], TORCH_DTYPE["fp4x2"]):
        paths = ("ck", "ck")
    else:  # asm stage 1; stage 2 needs block_m in 32/64/128
        paths = ("asm", "ck")
        if bm not in (32, 64, 128):
            bm = ([b for b in (32, 64, 128) if bm < b] + [128])[0]
    tiles = []
    a_bytes = 2 if key["q_dtype_a"] in (TORCH_DTYPE["bf16"], TORCH_DTYPE["fp16"]) else 1
    if a_bytes == 2 or qt in ("per_Token", "per_Tensor"):
        for st, name, p in ((1, k1, paths[0]), (2, k2, paths[1])):
            if p != "ck":
                continue
            t = tile_from_name(name, gfx, listed=a_bytes == 2)
            tiles.append(t or heuristic_tile(st, bm, gfx, a_bytes))
    us = (row["us1"], row["us2"]) if row else None
    return Dispatch(cu_num, gfx, key, idx, row, 2, bm, ksplit, (k1, k2), paths, us,
                    tuple(t for t in tiles if t is not None), why, path or "")


# ---------------------------------------------------------------- the CK shape rule
def ck_shape_ok(hidden: int, inter: int, tiles) -> tuple[bool, str]:
    """device_moe_gemm.hpp IsSupportedArgument: N % NPerBlock == 0 and K % KPerBlock == 0,
    stage 1 (N = inter, K = hidden), stage 2 (N = hidden, K = inter)."""
    for t in tiles:
        n, k = (inter, hidden) if t.stage == 1 else (hidden, inter)
        for what, dim, blk in (("N", n, t.n), ("K", k, t.k)):
            if dim % blk:
                names = {("N", 1): "inter", ("K", 1): "hidden", ("N", 2): "hidden", ("K", 2): "inter"}
                return False, (f"CK stage {t.stage} tile {t.label()} needs {what} "
                               f"({names[(what, t.stage)]} = {dim}) % {blk} == 0")
    return True, ""


def ck_supports(problem, gfx: str, cu_num: int, table=None) -> tuple[bool, str]:
    """Would aiter's fused_moe run `problem` (bf16/fp16, unquantised) on this GPU, or would
    the CK kernel it dispatches to throw? Pure: no GPU needed."""
    gfx = gfx.split(":")[0]
    if gfx not in GFX_SUPPORTED:
        return False, (f"{gfx}: aiter's fused_moe dispatcher has no entry for this arch "
                       f"(fused_moe_1stage_dict covers {', '.join(GFX_SUPPORTED)} only)")
    d = dispatch(problem, cu_num, gfx, table=table)
    ok, why = ck_shape_ok(problem.hidden, problem.inter, d.tiles)
    if not ok:
        src = (f"tuned row #{d.row_index}" if d.row is not None else
               f"no tuned row for cu_num {cu_num}, get_block_size_M")
        return False, f"{why}, and aiter picks block_m {d.block_m} here ({src}, {d.gfx})"
    return True, ""


def explain(problem, cu_num: int, gfx: str | None = None, table=None) -> str:
    """One paragraph for `moe-lab profile --explain`."""
    d = dispatch(problem, cu_num, gfx, table=table)
    gpu = CU_GPU.get(cu_num, "GPU")
    head = (f"{problem.model.name} {problem.sharding}, {problem.tokens} tokens, {gpu} "
            f"({cu_num} CUs, {d.gfx}): ")
    if d.row is not None:
        where = os.path.basename(d.table.split(os.pathsep)[0]) if d.table else "tuned table"
        head += f"tuned row #{d.row_index} ({where} line {d.row_index + 2}, token {d.key['token']}): "
    else:
        head += d.reason + ": "
    parts = []
    for i, (name, path) in enumerate(zip(d.kernels, d.paths)):
        t = next((t for t in d.tiles if t.stage == i + 1), None)
        desc = name or (f"CK heuristic {t.label()}" if t else f"{path} default")
        if name and t:
            desc += f" [{t.label()}]"
        if d.us is not None:
            desc += f" {float(d.us[i]):.1f} us"
        parts.append(f"stage{i + 1} {desc}")
    text = head + ", ".join(parts)
    if d.row is not None:
        text += f", block_m {d.block_m}" + (" (1-stage)" if d.stages == 1 else " (2-stage)")
    if problem.dtype in ("bf16", "fp16"):
        ok, why = ck_supports(problem, d.gfx, cu_num, table=table)
        text += "\nCK shape check: " + ("ok" if ok else f"unsupported: {why}")
    return text
