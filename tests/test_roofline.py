"""Cost model, floors and the roofline columns, against hand-computed cases."""
import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from moe_lab.cli import main
from moe_lab.core.problems import PRESETS, make_problem
from moe_lab import backends
from moe_lab.core.devices import DEVICE_SPECS, DeviceSpec, ceilings_for, device_slug, spec_for
from moe_lab.cost.roofline import (Cost, add_roofline_columns, bound, cost, expected_experts_hit,
                              floor_us, intensity, ridge_intensity, roof_bandwidth, roof_basis)
from moe_lab.core.routing import make_routing

UNIT = DeviceSpec("unit", "test", bf16_tflops=1.0, fp8_tflops=2.0, hbm_tb_s=1.0, l2_mb=0,
                  source="test")


def test_mixtral_tp2_one_token_reads_two_experts():
    p = make_problem("mixtral-8x7b", 1, "bf16", tp=2)
    assert (p.hidden, p.inter, p.experts, p.topk) == (4096, 7168, 8, 2)
    c = cost(p, ids=torch.tensor([[3, 5]], dtype=torch.int32))
    assert c.exact and c.experts_hit == 2
    assert c.weight_bytes == 2 * 3 * 4096 * 7168 * 2 == 352_321_536
    assert c.act_bytes == 2 * 4096 * 2  # x in, out
    assert c.bytes == c.weight_bytes + c.act_bytes
    # expectation at T=1 is exactly k experts
    assert cost(p).weight_bytes == 352_321_536


def test_flops_hand_case():
    p = make_problem("custom:H=64,I=32,E=4,k=2", 3)
    # 3 tokens x 2 slots, each: gemm1 2*(2I*H) + gemm2 2*(I*H)
    assert cost(p).flops == 3 * 2 * 2 * (2 * 32 * 64 + 32 * 64) == 73_728
    # exact ids give the same FLOPs without EP; the weight read counts distinct experts
    c = cost(p, ids=torch.tensor([[0, 1], [1, 0], [0, 1]], dtype=torch.int32))
    assert c.flops == 73_728 and c.experts_hit == 2
    assert c.weight_bytes == 2 * 3 * 64 * 32 * 2


def test_ep_shard_counts_only_local_experts():
    # DeepSeek-R1 TP8+EP8, rank 1 holds global experts 32..63, each with the full I
    p = make_problem("deepseek-r1", 2, "bf16", tp=8, ep=8, ep_rank=1)
    H, I = 7168, 2048
    assert (p.local_experts, p.inter) == (32, I)
    ids = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7],               # all remote
                        [32, 33, 34, 35, 100, 101, 102, 103]],  # 4 local
                       dtype=torch.int32)
    c = cost(p, ids=ids)
    assert c.experts_hit == 4 and c.pairs == 4
    assert c.weight_bytes == 4 * 3 * H * I * 2
    assert c.flops == 2 * 4 * 3 * I * H
    # the same ids seen from rank 0: 8 local experts, 8 pairs
    c0 = cost(make_problem("deepseek-r1", 2, "bf16", 8, 8, 0), ids=ids)
    assert (c0.experts_hit, c0.pairs) == (8, 8)
    # a rank no token routes to reads no weights and computes nothing
    c7 = cost(make_problem("deepseek-r1", 2, "bf16", 8, 8, 7), ids=ids)
    assert (c7.experts_hit, c7.flops, c7.weight_bytes) == (0, 0, 0)


def test_expected_ep_equals_tp_per_rank():
    """In expectation EP reads 1/ep of the experts at ep times the width: same per rank."""
    for t in (1, 64, 4096):
        a = cost(make_problem("qwen3-235b-a22b", t, "bf16", 8, 1))
        b = cost(make_problem("qwen3-235b-a22b", t, "bf16", 8, 8, 3))
        assert a.flops == pytest.approx(b.flops) and a.bytes == pytest.approx(b.bytes)


def test_expected_experts_formula_forms():
    for E, k, T in [(8, 2, 1), (128, 8, 7), (256, 8, 100)]:
        assert expected_experts_hit(E, k, T) == pytest.approx(E * (1 - ((E - k) / E) ** T))
    assert expected_experts_hit(8, 2, 1) == pytest.approx(2)
    assert expected_experts_hit(256, 8, 10**6) == pytest.approx(256)


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "deepseek-r1"])
@pytest.mark.parametrize("tokens", [1, 4, 16, 64])
def test_expected_experts_matches_monte_carlo_of_real_router(model, tokens):
    """The formula needs only that each expert is picked by a token with probability k/E
    and tokens are independent. Random iid N(0,1) logits through the model's own router
    give that by symmetry (experts are exchangeable), softmax and DeepSeek's grouped
    top-k alike, even though DeepSeek's picks inside a token are correlated (same group).
    So the Monte Carlo mean must match within its standard error. The number of distinct
    experts has variance <= E/4 (occupancy counts are negatively correlated), so with
    N=300 seeds the standard error is <= sqrt(E/4/300) ~ 0.46 experts for E=256; 4 standard
    errors (1.9 experts) or 3% of the mean, whichever is larger, is a safe bound."""
    spec = PRESETS[model]
    E, k, n = spec.experts, spec.topk, 300
    hits = [torch.unique(make_routing(spec, tokens, "uniform", seed)[1]).numel()
            for seed in range(n)]
    mean = sum(hits) / n
    want = expected_experts_hit(E, k, tokens)
    se = (sum((h - mean) ** 2 for h in hits) / (n - 1)) ** 0.5 / n ** 0.5
    assert abs(mean - want) <= max(4 * se, 0.03 * want, 1e-9), (mean, want, se)


def test_skewed_routing_hits_fewer_experts_than_uniform():
    """Real routers are not uniform: a skewed load reads fewer experts, so the uniform
    expectation is an upper bound on weight bytes for the same T."""
    spec = PRESETS["qwen3-30b-a3b"]
    zipf = sum(torch.unique(make_routing(spec, 16, "zipf:1.5", s)[1]).numel()
               for s in range(50)) / 50
    assert zipf < expected_experts_hit(spec.experts, spec.topk, 16) * 0.9


def test_floor_is_max_of_compute_and_memory():
    c = Cost(flops=2e12, bytes=1e12, weight_bytes=1e12, act_bytes=0, inter_bytes=0,
             experts_hit=1)
    assert floor_us(c, UNIT) == pytest.approx(2e6)  # 2 s of compute beats 1 s of memory
    assert bound(c, UNIT) == "compute"
    assert floor_us(c, UNIT, "fp8") == pytest.approx(1e6)  # fp8 peak is 2x: a tie
    c2 = Cost(flops=1e12, bytes=3e12, weight_bytes=3e12, act_bytes=0, inter_bytes=0,
              experts_hit=1)
    assert floor_us(c2, UNIT) == pytest.approx(3e6) and bound(c2, UNIT) == "memory"
    assert intensity(c2) == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        floor_us(c, UNIT, "fp32")


def test_backend_intermediates():
    p = make_problem("mixtral-8x7b", 4, "bf16", tp=2)
    T, k, H, I = 4, 2, 4096, 7168
    ideal = cost(p)
    assert ideal.inter_bytes == 0
    tri = cost(p, backend="aiter-triton")
    # c1 [T,k,2I], a [T,k,I], c2 [T,k,H], each written then read, bf16
    assert tri.inter_bytes == 2 * T * k * (2 * I + I + H) * 2
    assert tri.bytes == ideal.bytes + tri.inter_bytes
    ck = cost(p, backend="aiter")
    assert ck.inter_bytes == 2 * T * k * I * 2
    declared = [b for b in backends.names() if backends.backend_class(b).intermediates]
    assert set(declared) >= {"torch", "torch-grouped", "aiter-triton", "aiter", "vllm"}
    for b in declared:
        assert cost(p, backend=b).bytes > ideal.bytes
    with pytest.raises(ValueError, match="unknown backend"):
        cost(p, backend="nope")


def test_fp8_weights_add_scales():
    p = make_problem("mixtral-8x7b", 1, "bf16", tp=2)
    ids = torch.tensor([[0, 1]], dtype=torch.int32)
    H, I = 4096, 7168
    base = 2 * 3 * H * I
    assert cost(p, ids, weight_dtype="fp8").weight_bytes == base + 2 * 2 * 4
    assert cost(p, ids, weight_dtype="fp8", scales="per-channel").weight_bytes == \
        base + 2 * (2 * I + H) * 4
    tiles = (2 * I // 128) * (H // 128) + (H // 128) * (I // 128)
    assert cost(p, ids, weight_dtype="fp8", scales="block:128").weight_bytes == \
        base + 2 * tiles * 4


def test_device_specs_are_dense_and_sourced():
    assert set(DEVICE_SPECS) == {"mi300x", "mi325x", "mi355x", "h100-sxm", "h200-sxm", "b200"}
    for s in DEVICE_SPECS.values():
        assert s.source and s.fp8_tflops == pytest.approx(2 * s.bf16_tflops, rel=1e-3)
    assert DEVICE_SPECS["mi300x"].bf16_tflops == 1307.4
    assert DEVICE_SPECS["h200-sxm"].bf16_tflops == 989.4  # 1979 is with sparsity
    assert spec_for("NVIDIA H200") is DEVICE_SPECS["h200-sxm"]
    assert spec_for("NVIDIA H100 80GB HBM3") is DEVICE_SPECS["h100-sxm"]
    assert spec_for("AMD Instinct MI300X") is DEVICE_SPECS["mi300x"]
    assert spec_for("NVIDIA H200 NVL") is None  # PCIe part, lower peaks


def test_add_roofline_columns_pct_of_roof(tmp_path):
    p = make_problem("mixtral-8x7b", 1, "bf16", tp=2)
    roof = floor_us(cost(p), DEVICE_SPECS["h200-sxm"])
    df = pd.DataFrame([
        dict(model="mixtral-8x7b", tp=2, ep=1, ep_rank=0, dtype="bf16", backend="torch",
             tokens=1, median_us=2 * roof, experts_hit=2),
        dict(model="mixtral-8x7b", tp=2, ep=1, ep_rank=0, dtype="bf16", backend="vllm",
             tokens=1, median_us=float("nan"), experts_hit=float("nan")),
        dict(model="mixtral-8x7b", tp=2, ep=1, ep_rank=0, dtype="fp32", backend="torch",
             tokens=1, median_us=100.0, experts_hit=1),
    ])
    out = add_roofline_columns(df, "NVIDIA H200", data_dir=tmp_path)
    assert out.loc[0, "roof_us"] == pytest.approx(roof)
    assert out.loc[0, "pct_of_roof"] == pytest.approx(50.0)
    assert out.loc[0, "flops"] == 352_321_536
    assert out.loc[0, "backend_roof_us"] > out.loc[0, "roof_us"]
    assert math.isnan(out.loc[1, "pct_of_roof"])
    assert out.loc[1, "experts_hit"] == pytest.approx(2)  # NaN given -> expected
    assert out.loc[2, "experts_hit"] == 1 and math.isnan(out.loc[2, "roof_us"])  # no fp32 peak
    assert set(out["ceiling_source"]) == {"vendor"}
    assert list(out["roof_basis"]) == ["peak 4.8 TB/s, gemm 989.4 TFLOP/s (vendor)"] * 2 + [
        "peak 4.8 TB/s, no fp32 gemm peak (vendor)"]
    assert len(out) == len(df) and "pct_of_roof" not in df.columns


def test_ceilings_for_vendor_fallback(tmp_path):
    c = ceilings_for("NVIDIA H200", data_dir=tmp_path)
    assert c.source == "vendor" and c.tflops_bf16 == 989.4 and c.tb_s == 4.8


def test_roofline_cli_prints_one_row_per_token(capsys):
    rc = main(["roofline", "--model", "deepseek-r1", "--tokens", "1,64,1024", "--tp", "8",
               "--ep", "8", "--device-spec", "mi300x"])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0
    rows = [line for line in out if not line.startswith("#")]
    assert rows[0].split()[0] == "tokens" and len(rows) == 1 + 3
    assert [r.split()[0] for r in rows[1:]] == ["1", "64", "1024"]
    assert "vendor" in out[1] and "MI300X" in out[1]


@pytest.mark.parametrize("argv, needle", [
    (["--model", "nope", "--tokens", "1"], "unknown model"),
    (["--model", "deepseek-r1", "--tokens", "1", "--device-spec", "tpu9"], "valid: mi300x"),
    (["--model", "deepseek-r1", "--tokens", "x"], "tokens"),
])
def test_roofline_cli_bad_input_exits_2_one_line(capsys, argv, needle):
    assert main(["roofline"] + argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


# --- the roof's bandwidth: read where measured, else copy ----------------------------------

CEIL = Path(__file__).resolve().parent.parent / "data" / "ceilings"
H200_FILE = CEIL / "nvidia-h200.json"
# the first H200 measurement, from before the read bandwidth was measured
H200_OLD = CEIL / "history" / "nvidia-h200-20261129.json"


def _ceilings_dir(tmp_path, read_tb_s=None) -> Path:
    """The first committed H200 ceilings (no memory_read), with one added when read_tb_s,
    as `nvidia-h200.json` in a folder of their own."""
    obj = json.loads(H200_OLD.read_text())
    assert "memory_read" not in obj
    if read_tb_s is not None:
        n = 2**31
        obj["memory_read"] = dict(tb_per_s=read_tb_s, best_tb_per_s=read_tb_s, method="sum",
                                  buffer_bytes=n, calls=50, median_us=n / read_tb_s / 1e6)
    d = tmp_path / ("read" if read_tb_s else "copy")
    d.mkdir()
    (d / H200_FILE.name).write_text(json.dumps(obj))
    return d


def _row(tokens, median_us, dtype="bf16"):
    return dict(model="deepseek-r1", tp=8, ep=1, ep_rank=0, dtype=dtype, backend="torch",
                tokens=tokens, median_us=median_us)


def test_roof_basis_and_the_floor_follow_the_read_bandwidth(tmp_path):
    copy_dir, read_dir = _ceilings_dir(tmp_path), _ceilings_dir(tmp_path, 4.9)
    df = pd.DataFrame([_row(1, 50.0), _row(8192, 5000.0), _row(1, 50.0, "fp32")])
    a = add_roofline_columns(df, "NVIDIA H200", data_dir=copy_dir)
    b = add_roofline_columns(df, "NVIDIA H200", data_dir=read_dir)
    assert list(a["roof_basis"]) == ["copy 4.28 TB/s, gemm 793 TFLOP/s (measured)"] * 2 + [
        "copy 4.28 TB/s, no fp32 gemm peak (measured)"]
    assert list(b["roof_basis"]) == ["read 4.9 TB/s, gemm 793 TFLOP/s (measured)"] * 2 + [
        "read 4.9 TB/s, no fp32 gemm peak (measured)"]
    copy = json.loads(H200_OLD.read_text())["memory"]["tb_per_s"]
    # one token: memory bound on either; the floor is bytes over the bandwidth used
    assert a.loc[0, "bound"] == b.loc[0, "bound"] == "memory"
    nbytes = a.loc[0, "bytes"]
    assert b.loc[0, "bytes"] == nbytes
    assert a.loc[0, "roof_us"] == nbytes / (copy * 1e12) * 1e6
    assert b.loc[0, "roof_us"] == nbytes / (4.9 * 1e12) * 1e6
    assert b.loc[0, "roof_us"] / a.loc[0, "roof_us"] == pytest.approx(copy / 4.9, rel=1e-15)
    assert b.loc[0, "pct_of_roof"] < a.loc[0, "pct_of_roof"]
    # 8192 tokens: compute bound, the same floor
    assert a.loc[1, "bound"] == b.loc[1, "bound"] == "compute"
    assert a.loc[1, "roof_us"] == b.loc[1, "roof_us"]
    assert math.isnan(b.loc[2, "roof_us"])


def test_roof_bandwidth_of_each_kind_of_ceilings(tmp_path):
    c_copy = ceilings_for("NVIDIA H200", _ceilings_dir(tmp_path))
    c_read = ceilings_for("NVIDIA H200", _ceilings_dir(tmp_path, 4.9))
    assert roof_bandwidth(c_copy) == ("copy", c_copy.tb_s)
    assert roof_bandwidth(c_read) == ("read", 4.9)
    assert roof_bandwidth(DEVICE_SPECS["h200-sxm"]) == ("peak", 4.8)
    assert roof_bandwidth(ceilings_for("NVIDIA H200", tmp_path / "none")) == ("peak", 4.8)
    assert roof_basis(DEVICE_SPECS["h200-sxm"]) == "peak 4.8 TB/s, gemm 989.4 TFLOP/s (vendor)"
    assert roof_basis(c_read, "fp8") == "read 4.9 TB/s, gemm fp8 1339 TFLOP/s (measured)"
    # the ridge moves with the bandwidth: FLOP/byte where the roofs meet
    assert ridge_intensity(c_read) == c_read.tflops_bf16 / 4.9
    assert ridge_intensity(c_copy) == c_copy.tflops_bf16 / c_copy.tb_s
    with pytest.raises(TypeError):
        roof_bandwidth("h200-sxm")


def test_backend_intermediates_under_ep_count_local_pairs_and_all_slots():
    """Under EP a rank computes only its local (token, slot) pairs: flops and the torch
    loop's temporaries scale with them, while buffers sized [T, k, ...] (aiter-triton's c1/
    c2, torch-grouped's gathered rows) still cost every slot."""
    p = make_problem("custom:H=64,I=32,E=8,k=2", 3, "bf16", tp=4, ep=4, ep_rank=0)
    assert p.local_experts == 2  # experts 0 and 1 live here
    ids = torch.tensor([[0, 5], [1, 2], [7, 6]], dtype=torch.int32)  # two local pairs
    T, k, H, I = 3, 2, p.hidden, p.inter
    ideal = cost(p, ids)
    assert ideal.exact and ideal.pairs == 2 and ideal.experts_hit == 2
    assert ideal.flops == 2 * 2 * 3 * H * I
    loop = cost(p, ids, backend="torch")
    local = 2
    assert loop.inter_bytes == 2 * (local * H * 2 + local * 2 * I * 2 + local * I * 2
                                     + local * H * 2 + local * H * 4 + T * H * 4)
    tri = cost(p, ids, backend="aiter-triton")
    assert tri.inter_bytes == 2 * T * k * (2 * I + I + H) * 2
    # the expectation (no ids) is T*k/ep pairs; a row's exact count overrides it
    assert cost(p).pairs == T * k / 4 and cost(p, pairs=local).flops == ideal.flops


# --- `roofline` without --device-spec: the ceilings follow the data ------------------------

H100 = "NVIDIA H100 80GB HBM3"


def _ceilings_of(tmp_path, *names: str) -> Path:
    """A ceilings folder holding the committed H200 file as measured by each device named
    (the H100's: the same numbers relabelled), and nothing else."""
    d = tmp_path / "ceilings"
    d.mkdir()
    for name in names:
        obj = json.loads(H200_FILE.read_text())
        slug = device_slug(name)
        obj["device"].update(name=name, slug=slug)
        obj["manifest"]["device_name"] = name
        (d / f"{slug}.json").write_text(json.dumps(obj))
    return d


def _default_tables(capsys, monkeypatch, ceilings: Path, gpu: str | None) -> tuple[int, list, str]:
    """`roofline` with no --device-spec, `ceilings` as data/ceilings, `gpu` the GPU present
    (None: none): (exit code, the tables' header lines, stderr)."""
    import moe_lab.core.devices as core_devices
    monkeypatch.setattr(core_devices, "DEFAULT_CEILINGS_DIR", ceilings)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu is not None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: gpu)
    rc = main(["roofline", "--model", "deepseek-r1", "--tokens", "1,64", "--tp", "8"])
    out, err = capsys.readouterr()
    heads = [ln for ln in out.splitlines() if ln.startswith("# ") and " [" in ln]
    return rc, heads, err


@pytest.mark.parametrize("measured, other", [(H100, "H200"), ("NVIDIA H200", "H100")])
def test_without_a_gpu_the_default_is_each_device_with_measured_ceilings(
        capsys, monkeypatch, tmp_path, measured, other):
    rc, heads, _ = _default_tables(capsys, monkeypatch, _ceilings_of(tmp_path, measured), None)
    assert rc == 0 and len(heads) == 1
    assert heads[0].startswith(f"# {measured} [measured]: ") and other not in heads[0]


def test_without_a_gpu_two_measured_devices_give_two_tables(capsys, monkeypatch, tmp_path):
    rc, heads, _ = _default_tables(capsys, monkeypatch,
                                   _ceilings_of(tmp_path, H100, "NVIDIA H200"), None)
    assert rc == 0
    assert [h.split(" [")[0] for h in heads] == [f"# {H100}", "# NVIDIA H200"]
    assert all("[measured]" in h for h in heads)


def test_without_a_gpu_or_measured_ceilings_it_says_so_and_exits_2(capsys, monkeypatch, tmp_path):
    rc, heads, err = _default_tables(capsys, monkeypatch, _ceilings_of(tmp_path), None)
    assert rc == 2 and not heads
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "no measured ceilings" in lines[0] and "--device-spec" in lines[0]


@pytest.mark.parametrize("files, source", [((), "vendor"), (("NVIDIA H200",), "vendor"),
                                           ((H100,), "measured")])
def test_with_a_gpu_the_default_is_that_gpu(capsys, monkeypatch, tmp_path, files, source):
    # the H200's measured file never stands in for the H100 present
    rc, heads, _ = _default_tables(capsys, monkeypatch, _ceilings_of(tmp_path, *files), H100)
    assert rc == 0 and len(heads) == 1
    name = H100 if source == "measured" else DEVICE_SPECS["h100-sxm"].name
    assert heads[0].startswith(f"# {name} [{source}]: ") and "H200" not in heads[0]


def test_an_explicit_device_spec_wins_over_the_data(capsys, monkeypatch, tmp_path):
    import moe_lab.core.devices as core_devices
    monkeypatch.setattr(core_devices, "DEFAULT_CEILINGS_DIR", _ceilings_of(tmp_path, H100))
    assert main(["roofline", "--model", "deepseek-r1", "--tokens", "1", "--device-spec",
                 "h200-sxm"]) == 0
    heads = [ln for ln in capsys.readouterr().out.splitlines() if " [" in ln]
    assert heads == [f"# {DEVICE_SPECS['h200-sxm'].name} [vendor]: "
                     "peak 4.8 TB/s, gemm 989.4 TFLOP/s (vendor)"]


def test_help_says_what_the_device_spec_defaults_to():
    from moe_lab.cli import build_parser
    sub = next(a for a in build_parser(["roofline"])._actions
               if a.__class__.__name__ == "_SubParsersAction")
    text = " ".join(sub.choices["roofline"].format_help().split())
    assert "default: the GPU present" in text and "with no GPU, one table per device" in text
    assert "h200-sxm)" not in text  # the old fixed default
