"""moe_lab.backends._aiter_dispatch against the installed amd-aiter wheel, on the CPU.

Expectations come from the wheel itself: its tuned_fmoe.csv read with pandas here, and its
real dispatcher functions (fused_moe.py get_padded_M, get_block_size_M, get_2stage_cfgs)
compiled from the wheel's source with only the GPU queries (get_cu_num, get_gfx) and the
kernel entry points stubbed."""
import ast
import enum
import functools
import logging
import os
import re
import types
from dataclasses import dataclass
from typing import Callable

import pandas as pd
import pytest
import torch

from moe_lab import cli
from moe_lab.backends import _aiter_dispatch as ad
from moe_lab.backends.aiter_ck import AiterCKBackend
from moe_lab.backends.aiter_triton import aiter_root
from moe_lab.core.problems import make_problem

ROOT = aiter_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason="amd-aiter is not installed")
CSV = os.path.join(ROOT or "", "configs", "tuned_fmoe.csv")
META = os.path.join(os.path.dirname(ROOT or ""), "aiter_meta")
CODEGEN = os.path.join(META, "csrc", "ck_gemm_moe_2stages_codegen")
GFX = {304: "gfx942", 80: "gfx942", 256: "gfx950"}


def _enum_members(name):
    src = open(os.path.join(META, "csrc", "include", "aiter_enum.h")).read()
    body = re.search(r"enum class %s[^{]*\{([^}]*)\}" % name, src).group(1)
    return [re.match(r"\s*(\w+)", i).group(1) for i in body.split(",") if i.strip()]


Act = enum.Enum("ActivationType", {n: i for i, n in enumerate(_enum_members("ActivationType"))}) \
    if ROOT else None
Quant = enum.Enum("QuantType", {n: i for i, n in enumerate(_enum_members("QuantType"))}) \
    if ROOT else None


def _entry(name):
    """A stand-in for one of aiter's kernel entry points (never called here)."""
    def fn(*a, **k):
        raise AssertionError(f"{name} called")
    fn.__name__ = name
    return fn


ENTRY = types.SimpleNamespace(**{n: _entry(n) for n in (
    "fmoe", "fmoe_g1u1", "fmoe_int8_g1u0", "fmoe_fp8_blockscale_g1u1", "ck_moe_stage1_fwd",
    "ck_moe_stage2_fwd")})


@functools.lru_cache(maxsize=None)
def real(cu_num: int, gfx: str, csv: str = CSV):
    """aiter's own dispatcher code for a GPU with cu_num CUs of arch gfx."""
    tree = ast.parse(open(os.path.join(ROOT, "fused_moe.py")).read())
    funcs = {"nextPow2", "get_padded_M", "get_block_size_M", "get_2stage_cfgs"}
    names = {"BLOCK_SIZE_M", "cfg_2stages", "fused_moe_1stage_dict", "quant_remap"}
    body = [n for n in tree.body
            if (isinstance(n, ast.FunctionDef) and n.name in funcs)
            or (isinstance(n, ast.ClassDef) and n.name == "MOEMetadata")
            or (isinstance(n, ast.Assign) and {getattr(t, "id", None) for t in n.targets} & names)]
    assert len(body) == len(funcs) + len(names) + 1
    fp8 = {"gfx942": torch.float8_e4m3fnuz, "gfx950": torch.float8_e4m3fn}[gfx]
    dtypes = types.SimpleNamespace(bf16=torch.bfloat16, fp16=torch.float16, fp8=fp8,
                                   i8=torch.int8, fp4x2=torch.float4_e2m1fn_x2,
                                   i4x2=torch.int4, fp32=torch.float32, i32=torch.int32)
    ns = dict(__name__="aiter_fused_moe_real", os=os, functools=functools, torch=torch,
              dataclass=dataclass, Callable=Callable, aiter=ENTRY, ActivationType=Act,
              QuantType=Quant, dtypes=dtypes, AITER_CONFIG_FMOE_FILE=csv, bd_dir="/nonexistent",
              mp_lock=None, get_cu_num=lambda: cu_num, get_gfx=lambda: gfx,
              logger=logging.getLogger("aiter-real-under-test"),
              **{n: _entry(n) for n in ("fused_moe_1stage", "asm_stage1", "cktile_moe_stage1",
                                         "cktile_moe_stage2")})
    exec(compile(ast.Module(body, type_ignores=[]), os.path.join(ROOT, "fused_moe.py"), "exec"), ns)
    return types.SimpleNamespace(**ns, fp8=fp8)


def _obj(s: str):
    """aiter's key string back to the object whose str() it is."""
    cls, _, member = s.partition(".")
    return {"ActivationType": Act, "QuantType": Quant}[cls][member] if cls != "torch" \
        else getattr(torch, member)


def real_metadata(key: dict, csv: str = CSV):
    r = real(key["cu_num"], GFX.get(key["cu_num"], "gfx942"), csv)
    return r.get_2stage_cfgs(key["token"], key["model_dim"], key["inter_dim"], key["expert"],
                             key["topk"], _obj(key["dtype"]), _obj(key["q_dtype_a"]),
                             _obj(key["q_dtype_w"]), _obj(key["q_type"]), bool(key["use_g1u1"]),
                             _obj(key["act_type"]), bool(key["doweight_stage1"]), 0, 0, None, None)


def csv_rows(**where) -> pd.DataFrame:
    df = pd.read_csv(CSV)
    for col, val in where.items():
        df = df[df[col] == val]
    return df


def bf16_key_filter(prob, cu_num, token):
    return dict(cu_num=cu_num, token=token, model_dim=prob.hidden, inter_dim=prob.inter,
                expert=prob.local_experts, topk=prob.topk, act_type="ActivationType.Silu",
                dtype="torch.bfloat16", q_dtype_a="torch.bfloat16", q_dtype_w="torch.bfloat16",
                q_type="QuantType.No", use_g1u1=1, doweight_stage1=0)


# ------------------------------------------------------------------ the tuned-table lookup
def test_key_columns_are_get_2stage_cfgs_set_index():
    fdef = next(n for n in ast.parse(open(os.path.join(ROOT, "fused_moe.py")).read()).body
                if isinstance(n, ast.FunctionDef) and n.name == "get_2stage_cfgs")
    call = next(n for n in ast.walk(fdef) if isinstance(n, ast.Call)
                and getattr(n.func, "attr", "") == "set_index")
    assert tuple(ast.literal_eval(call.args[0])) == ad.KEY_COLUMNS
    assert ad.table_path() == CSV  # no AITER_CONFIG_FMOE, no model_configs/*tuned_fmoe*


@pytest.mark.parametrize("model,cu_num,tokens", [
    ("deepseek-r1", 256, 16), ("deepseek-r1", 256, 64), ("deepseek-r1", 256, 1024),
    ("deepseek-r1", 80, 64), ("deepseek-r1", 80, 512),
    ("qwen3-235b-a22b", 256, 64), ("qwen3-235b-a22b", 256, 512), ("qwen3-235b-a22b", 80, 128)])
def test_lookup_returns_the_csv_row_for_the_key(model, cu_num, tokens):
    prob = make_problem(model, tokens, "bf16", 8)
    rows = csv_rows(**bf16_key_filter(prob, cu_num, tokens))
    assert len(rows) == 1, "the seed key is in the wheel's table"
    want = rows.iloc[0]
    d = ad.dispatch(prob, cu_num)
    assert d.row_index == rows.index[0] and d.row is not None
    assert (d.block_m, d.ksplit, d.stages) == (want.block_m, want.ksplit, 2)
    assert d.kernels == (want.kernelName1, want.kernelName2)
    assert d.us == (want.us1, want.us2) and d.paths == ("ck", "ck")


def test_mi300x_has_no_tuned_row_so_every_seed_takes_the_default():
    """The wheel's tuned_fmoe.csv has rows for cu_num 80 and 256 only: on MI300X/MI325X
    (304 CUs) aiter's lookup misses for every shape and get_block_size_M picks block_m."""
    assert csv_rows(cu_num=304).empty and set(csv_rows().cu_num) == {80, 256}
    r = real(304, "gfx942")
    for model in ("deepseek-r1", "qwen3-235b-a22b", "llama4-scout-16e"):
        for t in (1, 64, 300, 4096):
            prob = make_problem(model, t, "bf16", 8)
            d = ad.dispatch(prob, 304)
            padded = r.get_padded_M(t)
            assert d.row is None and d.key["token"] == padded
            assert d.block_m == r.get_block_size_M(padded, prob.topk, prob.local_experts, prob.inter)
            assert d.kernels == ("", "") and d.stages == 2 and "get_block_size_M" in d.reason


@pytest.mark.parametrize("tokens,bucket", [(1, 16), (3, 16), (17, 32), (100, 128), (513, 1024),
                                            (1024, 1024), (5000, 1024)])
def test_a_token_count_absent_from_the_table_uses_the_padded_bucket(tokens, bucket):
    """get_padded_M: 1..16 -> 16, < 1024 -> next power of two, else 1024; then an exact
    match on that bucket (no nearest-row search)."""
    assert real(256, "gfx950").get_padded_M(tokens) == ad.padded_tokens(tokens) == bucket
    prob = make_problem("deepseek-r1", tokens, "bf16", 8)
    assert csv_rows(**bf16_key_filter(prob, 256, tokens)).empty or tokens == bucket
    rows = csv_rows(**bf16_key_filter(prob, 256, bucket))
    d = ad.dispatch(prob, 256)
    assert d.row_index == rows.index[0] and d.kernels == (rows.iloc[0].kernelName1,
                                                          rows.iloc[0].kernelName2)


def test_block_size_m_is_aiters_get_block_size_M():
    for cu in (304, 256, 80):
        r = real(cu, GFX[cu])
        for token in (16, 32, 64, 128, 256, 512, 1024):
            for topk, expert, inter in ((8, 256, 256), (8, 32, 2048), (8, 128, 192),
                                        (1, 16, 1024), (2, 8, 1792), (8, 128, 96)):
                assert ad.block_size_m(token, topk, expert, inter, cu) == \
                    r.get_block_size_M(token, topk, expert, inter)


def _keys_to_try():
    """Every key of the shipped table, plus each moved to a token bucket or a GPU the
    table lacks (the fallback paths, 1-stage included, for every dtype/quant combination)."""
    df = pd.read_csv(CSV)
    keys = [dict(zip(ad.KEY_COLUMNS, r)) for r in df[list(ad.KEY_COLUMNS)].itertuples(index=False)]
    combos = {tuple(k[c] for c in ad.KEY_COLUMNS if c not in ("cu_num", "token")): k for k in keys}
    extra = []
    for k in combos.values():
        for cu in (304, 256, 80):
            for token in (16, 64, 512, 1024):
                extra.append(dict(k, cu_num=cu, token=token))
    return keys + extra


def test_dispatch_agrees_with_aiters_get_2stage_cfgs_on_every_key():
    table = ad.load_table(CSV)
    seen = set()
    for i, key in enumerate(_keys_to_try()):
        gfx = GFX[key["cu_num"]]
        if "fnuz" in key["q_dtype_w"] and gfx == "gfx950" or \
                "e4m3fn" in key["q_dtype_w"] and "fnuz" not in key["q_dtype_w"] and gfx == "gfx942":
            continue  # a dtype that arch's aiter never builds a key with
        ours = ad.dispatch_key(key, gfx, table)
        meta = real_metadata(key)
        assert (ours.row is not None) or i >= len(table), key  # the table's own keys hit
        seen.add((ours.row is not None, ours.paths))
        assert (ours.block_m, ours.ksplit, bool(meta.run_1stage)) == \
            (meta.block_m, meta.ksplit, ours.stages == 1), key
        kw1 = meta.stage1.keywords.get("kernelName", "")
        assert ours.kernels[0] == kw1, key
        if ours.stages == 2:
            assert ours.kernels[1] == meta.stage2.keywords.get("kernelName", ""), key
            func = {"ck": "ck_moe_stage1_fwd", "asm": "asm_stage1"}[ours.paths[0]]
            assert meta.stage1.func.__name__ == func, key
            assert meta.stage2.func.__name__ == "ck_moe_stage2_fwd", key
        else:
            assert meta.stage1.func.__name__ == "fused_moe_1stage" and meta.stage2 is None
    # tuned and default, 1-stage, asm+CK and CK+CK all compared
    assert {(h, p) for h in (True, False) for p in (("asm-1stage",), ("asm", "ck"), ("ck", "ck"))} <= seen


# ------------------------------------------------------------ CK tiles, from the wheel's code
def test_heuristic_tiles_are_gen_instances_templates():
    tree = ast.parse(open(os.path.join(CODEGEN, "gen_instances.py")).read())
    strings = {t.id: ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
               for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}
    table = next(n.value for n in tree.body if isinstance(n, ast.Assign)
                 and getattr(n.targets[0], "id", "") == "heuristic_dispatch_dict")
    used = {k.value: [e.id for e in v.elts] for k, v in zip(table.keys, table.values)}
    pat = re.compile(r"block_m == (\d+)\)\s*\{\{\s*return ck_moe_stage(\d)_gemm<[^>]*?, "
                     r"V(\d), (\d+), (\d+), (\d+), (\d+)/sizeof")
    checked = set()
    for gfx, tag in (("gfx942", "a16w16"), ("gfx950", "a16w16_gfx950")):
        for stage, name in zip((1, 2), used[tag]):
            got = {int(bm): (int(v), int(bs), int(m), int(n), int(kb))
                   for bm, st, v, bs, m, n, kb in pat.findall(strings[name]) if int(st) == stage}
            assert got == ad.HEURISTIC_TILES[(gfx, stage)], (gfx, stage)
            checked.add((gfx, stage))
    # zip() over a short or empty dispatch list would compare nothing: every (gfx, stage)
    # of ours is one the wheel's table was read for
    assert checked == set(ad.HEURISTIC_TILES), (used, checked)


def test_named_tiles_are_the_wheels_a16w16_instance_lists():
    tree = ast.parse(open(os.path.join(CODEGEN, "gemm_moe_ck2stages_common.py")).read())
    lists = {n.targets[0].id: [tuple(ast.literal_eval(a) for a in c.args) for c in n.value.values]
             for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict)
             and getattr(n.targets[0], "id", "").startswith("a16w16_gemm")}
    named = set()
    for (gfx, stage), tiles in ad.CK_TILES.items():
        name = f"a16w16_gemm{stage}_kernels_list" + ("_gfx950" if gfx == "gfx950" else "")
        assert tiles == lists[name]
        named.add(name)
    assert named == set(lists)  # each of the wheel's a16w16 lists was compared (none skipped)


def test_ck_rejects_n_or_k_not_divisible_by_the_tile_in_the_wheels_code():
    dev = open(os.path.join(META, "3rdparty", "composable_kernel", "include", "ck",
                            "tensor_operation", "gpu", "device", "impl", "device_moe_gemm.hpp")).read()
    assert "if(arg.N % NPerBlock != 0 || arg.K % KPerBlock != 0)" in dev
    cu = open(os.path.join(CODEGEN, "gemm_moe_ck2stages.cu")).read()
    s1, s2 = cu.split("void ck_moe_stage2(")
    assert "int N = w1.size(1) / 2;" in s1 and "int K = hidden_states.size(-1);" in s1
    assert "int N = w2.size(1);" in s2 and "int K = inter_states.size(-1);" in s2
    common = open(os.path.join(CODEGEN, "gemm_moe_ck2stages_common.cuh")).read()
    assert "GemmSpecialization::Default" in common and "not support this GEMM problem" in common


def test_every_tuned_bf16_kernel_is_a_listed_instance_that_accepts_its_shape():
    rows = csv_rows(q_type="QuantType.No")
    assert len(rows) > 0, f"no QuantType.No row in {CSV}: nothing to check"
    for i, r in rows.iterrows():
        gfx = GFX[r.cu_num]
        t1, t2 = ad.tile_from_name(r.kernelName1, gfx), ad.tile_from_name(r.kernelName2, gfx)
        assert t1 and t2 and (t1.stage, t2.stage) == (1, 2) and t1.m == t2.m == r.block_m, i
        assert ad.ck_shape_ok(r.model_dim, r.inter_dim, (t1, t2))[0], i


# ------------------------------------------------------------------------------ supports()
def test_qwen3_30b_tp8_fails_at_every_block_m():
    prob = make_problem("qwen3-30b-a3b", 64, "bf16", 8)
    assert prob.inter == 96
    for gfx in ad.GFX_SUPPORTED:
        for bm in (32, 64, 128, 256):
            tiles = [ad.heuristic_tile(s, bm, gfx, 2) for s in (1, 2)]
            assert not ad.ck_shape_ok(prob.hidden, prob.inter, tiles)[0]
        for stage in (1, 2):  # no named instance either: every N and K tile is 64 or 128
            assert all(96 % (t[2] if stage == 1 else t[3]) for t in ad.CK_TILES[(gfx, stage)])
    for cu in (304, 256, 80):
        for t in (1, 64, 1024):
            ok, why = ad.ck_supports(make_problem("qwen3-30b-a3b", t, "bf16", 8), GFX[cu], cu)
            assert not ok and "needs N (inter = 96) %" in why and "block_m" in why


def test_qwen3_235b_tp8_fails_when_the_default_block_m_is_64_or_more():
    prob = make_problem("qwen3-235b-a22b", 64, "bf16", 8)
    assert prob.inter == 192
    for bm in (32, 64, 128):  # gfx942's heuristic: stage-1 NPerBlock 64 at 32, 128 above
        assert ad.ck_shape_ok(prob.hidden, prob.inter,
                              [ad.heuristic_tile(s, bm, "gfx942", 2) for s in (1, 2)])[0] == (bm == 32)
    r = real(304, "gfx942")
    seen = set()
    for t in (1, 64, 100, 128, 256, 512, 1024, 4096):
        p = make_problem("qwen3-235b-a22b", t, "bf16", 8)
        bm = r.get_block_size_M(r.get_padded_M(t), 8, 128, 192)
        ok, why = ad.ck_supports(p, "gfx942", 304)
        seen.add(bm)
        assert ok == (bm < 64), (t, bm, why)
        if not ok:
            assert f"block_m {bm}" in why and "inter = 192" in why and "% 128 == 0" in why
    assert seen == {32, 64, 128}
    # MI355X: every bucket has a tuned row, whose named kernels (N tile 64) accept 192
    assert all(ad.ck_supports(make_problem("qwen3-235b-a22b", t, "bf16", 8), "gfx950", 256)[0]
               for t in (1, 128, 4096))


def test_a_problem_aiter_can_run_is_supported_and_other_archs_are_not():
    for cu in (304, 256, 80):
        for model, ep in (("deepseek-r1", 1), ("deepseek-r1", 8), ("llama4-scout-16e", 1)):
            for t in (1, 256, 4096):
                assert ad.ck_supports(make_problem(model, t, "bf16", 8, ep), GFX[cu], cu) == (True, "")
    ok, why = ad.ck_supports(make_problem("deepseek-r1", 4, "bf16", 8), "gfx90a", 104)
    assert not ok and "gfx90a" in why and "no entry" in why


def _fake_rocm(monkeypatch, arch, cus):
    monkeypatch.setattr(torch.version, "hip", "6.4.0", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i=0: types.SimpleNamespace(
        gcnArchName=arch, multi_processor_count=cus))
    monkeypatch.delenv("CU_NUM", raising=False)


@pytest.mark.parametrize("arch,cus,model,tokens,ok", [
    ("gfx942:sramecc+:xnack-", 304, "deepseek-r1", 64, True),
    ("gfx942:sramecc+:xnack-", 304, "qwen3-30b-a3b", 64, False),
    ("gfx942:sramecc+:xnack-", 304, "qwen3-235b-a22b", 64, True),
    ("gfx942:sramecc+:xnack-", 304, "qwen3-235b-a22b", 128, False),
    ("gfx950:sramecc+:xnack-", 256, "qwen3-235b-a22b", 128, True),
    ("gfx90a:sramecc+:xnack-", 104, "deepseek-r1", 64, False),
    ("gfx1100", 48, "deepseek-r1", 64, False)])
def test_backend_supports_reads_the_rocm_device(monkeypatch, arch, cus, model, tokens, ok):
    _fake_rocm(monkeypatch, arch, cus)
    prob = make_problem(model, tokens, "bf16", 8)
    got, why = AiterCKBackend().supports(prob, "cuda")
    assert got == ok and (ok or why)
    if arch.startswith(("gfx942", "gfx950")):
        assert (got, why) == ad.ck_supports(prob, arch, cus)


def test_backend_supports_takes_cu_num_like_aiter_and_refuses_off_rocm(monkeypatch):
    prob = make_problem("qwen3-235b-a22b", 128, "bf16", 8)
    _fake_rocm(monkeypatch, "gfx942:sramecc+:xnack-", 304)
    assert not AiterCKBackend().supports(prob, "cuda")[0]
    monkeypatch.setenv("CU_NUM", "80")  # aiter's get_cu_num reads it first: MI308X's rows
    assert AiterCKBackend().supports(prob, "cuda") == (True, "")
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    ok, why = AiterCKBackend().supports(prob, "cuda")
    assert not ok and "ROCm" in why
    assert not AiterCKBackend().supports(prob, "cpu")[0]


# ------------------------------------------------------------------- moe-lab profile --explain
def test_profile_explain_prints_the_tuned_row_without_a_gpu(capsys, monkeypatch):
    import moe_lab.api as api  # the verb imports api.profile when it runs (--help loads no torch)
    monkeypatch.setattr(api, "profile", lambda *a, **k: pytest.fail("--explain profiled"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: pytest.fail("--explain asked for a GPU"))
    prob = make_problem("deepseek-r1", 64, "bf16", 8)
    rows = csv_rows(**bf16_key_filter(prob, 256, 64))
    rc = cli.main(["profile", "--explain", "--model", "deepseek-r1", "--tokens", "64",
                   "--tp", "8", "--cu-num", "256"])
    out = capsys.readouterr().out
    assert rc == 0
    assert f"tuned row #{rows.index[0]} " in out and f"line {rows.index[0] + 2}" in out
    assert rows.iloc[0].kernelName1 in out and rows.iloc[0].kernelName2 in out
    assert f"{rows.iloc[0].us1:.1f} us" in out and "block_m 32" in out
    assert "MI355X" in out and "CK shape check: ok" in out


def test_profile_explain_default_gpu_and_an_unsupported_shape(capsys):
    rc = cli.main(["profile", "--explain", "--model", "qwen3-235b-a22b", "--tokens", "128",
                   "--tp", "8"])
    out = capsys.readouterr().out
    assert rc == 0 and "MI300X" in out and "304 CUs" in out and "no tuned row" in out
    assert "block_m 64 from get_block_size_M" in out and "unsupported" in out
    rc = cli.main(["profile", "--explain", "--model", "deepseek-r1", "--tokens", "64",
                   "--tp", "8", "--ep", "8", "--cu-num", "100"])
    assert rc == 2 and "100 CUs" in capsys.readouterr().err
