"""AMD aiter's tuned fused-MoE table as a run: every table row a row or a counted skip,
shapes matched to presets and shardings only where one fits, cu_num named only where a
vendor source says so, a malformed table refused in one line with nothing written, and
the committed import equal to what the importer makes now."""
import csv
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from moe_lab.importers import aiter_tables as at
from moe_lab.cli import main
from moe_lab.commands.import_aiter import write_run
from moe_lab.core.devices import DEVICE_SPECS
from moe_lab.core.errors import UsageError
from moe_lab.core.problems import PRESETS, make_problem
from moe_lab.cost.roofline import cost, expected_experts_hit, floor_us
from moe_lab.storage.store import open_run

ROOT = Path(__file__).resolve().parent.parent
BASE = dict(cu_num=304, token=64, model_dim=7168, inter_dim=256, expert=256, topk=8,
            act_type="ActivationType.Silu", dtype="torch.bfloat16",
            q_dtype_a="torch.bfloat16", q_dtype_w="torch.bfloat16", q_type="QuantType.No",
            use_g1u1=1, doweight_stage1=0, block_m=32, ksplit=0, us1=100.0,
            kernelName1="k_stage1", err1="0.0%", us2=50.0, kernelName2="k_stage2",
            err2="0.1%", us=150.0, run_1stage=0, tflops=1.0, bw=2.0)
FP8 = dict(q_dtype_a="torch.float8_e4m3fnuz", q_dtype_w="torch.float8_e4m3fnuz")


def write_table(path: Path, rows: list[dict], columns=at.TABLE_COLUMNS) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(dict(BASE, **r))
    return path


def wheel():
    try:
        return at.installed_table()
    except UsageError:
        pytest.skip("amd-aiter is not installed: no tuned_fmoe.csv to read")


@pytest.fixture(scope="module")
def real():
    path, version = wheel()
    rows, kernels, manifest, run_id = at.prepare()
    return path, version, pd.DataFrame(rows), pd.DataFrame(kernels), manifest, run_id


def test_every_row_of_the_wheels_table_is_a_row_or_a_counted_skip(real):
    path, version, res, kernels, manifest, run_id = real
    with open(path, newline="") as f:
        n = sum(1 for _ in csv.DictReader(f))
    assert len(res) + len(manifest["skipped"]) == n == manifest["counts"]["table_rows"]
    assert sum(manifest["counts"]["by_status"].values()) == len(res)
    not_ok = res[res["status"] != "ok"]
    assert sum(manifest["counts"]["not_ok_by_reason"].values()) == len(not_ok)
    # the frame and its ok rows are not empty (an all() over no rows passes); whether the
    # wheel's table has not-ok rows is the wheel's (amd-aiter is not pinned): the synthetic
    # table of test_a_table_of_ones_own_rows_statuses_skips_kernels_and_roofline covers them
    assert len(res) > 0 and (res["status"] == "ok").any()
    assert not_ok["error"].notna().all() and res.loc[res["status"] == "ok", "error"].isna().all()
    assert res["point_id"].is_unique and set(kernels["point_id"]) <= set(res["point_id"])
    assert run_id == "aiter-tuned-fmoe-" + version.replace(".", "-")
    assert (res["backend"] == "aiter").all() and (res["mode"] == "aiter-tuner").all()
    assert (res["routing"] == "aiter-tuner").all() and (res["ep_rank"] == 0).all()
    assert res["measured_at"].eq(f"measured by AMD's tuner before amd-aiter {version}").all()
    assert manifest["source"]["path"] == "aiter/configs/tuned_fmoe.csv"
    assert "not by moe-lab" in manifest["source"]["measured_by"]


def test_the_wheels_times_are_amds_times_row_for_row(real):
    path, _, res, kernels, _, _ = real
    table = pd.read_csv(path)
    table["table_line"] = range(2, len(table) + 2)
    both = res.merge(table, on="table_line", suffixes=("", "_t"))
    assert len(both) == len(res)
    assert len(res) > 0  # `both` is not empty: an all() over no rows passes
    timed = both[both["status"] != "failed"]
    assert len(timed) > 0
    assert (timed["median_us"] == timed["us"]).all()
    assert (timed["kernel_us"] == timed["us1"] + timed["us2"]).all()
    assert (both["stage1_us"] == both["us1"]).all() and (both["stage2_us"] == both["us2"]).all()
    assert (both["tokens"] == both["token"]).all() and (both["tflops"] == both["tflops_t"]).all()
    g1 = kernels[kernels["phase"] == "gemm1"].merge(both, on="point_id")
    assert len(g1) > 0  # stage-1 kernels matched to rows: none would check nothing
    assert (g1["kernel"] == g1["kernelName1"]).all() and (g1["total_us"] == g1["us1"]).all()
    failed = both[both["status"] == "failed"]
    assert failed["median_us"].isna().all()  # a time the table does not have is not made up


def test_deepseek_r1_tp8_rows_are_matched_and_each_cu_num_named_only_from_a_vendor(real):
    _, _, res, _, manifest, _ = real
    ds = res[(res["hidden"] == 7168) & (res["inter"] == 256) & (res["local_experts"] == 256)
             & (res["topk"] == 8)]
    assert len(ds) > 0
    assert (ds["model"] == "deepseek-r1").all() and (ds["tp"] == 8).all() and (ds["ep"] == 1).all()
    for r in res.drop_duplicates(["hidden", "inter", "local_experts", "topk"]).itertuples():
        fits = [(n, tp, ep) for n, m in PRESETS.items() if (m.hidden, m.topk) == (r.hidden, r.topk)
                for tp, ep in [(m.intermediate // r.inter, 1), (m.experts // r.local_experts,) * 2]
                if make_fit(m, r, tp, ep)]
        if len(set(fits)) == 1:
            assert (r.model, r.tp, r.ep) == fits[0]
        else:
            assert r.model.startswith("custom:") and pd.isna(r.tp) and r.note
    ep = res[res["ep"] > 1]
    for r in ep.itertuples():  # an EP shape, if the table has one: E/ep experts, the full I
        m = PRESETS[r.model]
        assert r.local_experts * r.ep == m.experts and r.inter == m.intermediate
    names = {80: "AMD GPU with 80 CUs", 256: "AMD Instinct MI355X (256 CUs; MI350X has the same "
             "count)", 304: "AMD Instinct MI300X (304 CUs; MI325X has the same count)"}
    # ok rows on a GPU with a spec: the roofline check below has rows to check
    assert ((res["status"] == "ok")
            & res["cu_num"].map(lambda c: manifest["devices"][str(c)]["spec"] is not None)).any()
    for cu, g in res.groupby("cu_num"):
        assert (g["device"] == names.get(cu, f"AMD GPU with {cu} CUs")).all()
        assert manifest["devices"][str(cu)]["rows"] == len(g)
        assert manifest["devices"][str(cu)]["source"]
        spec = manifest["devices"][str(cu)]["spec"]
        ok = g[g["status"] == "ok"]
        if spec is None:
            assert g["roof_us"].isna().all() and g["note"].str.contains("no roofline").all()
        else:
            assert ok["roof_us"].gt(0).all() and ok["pct_of_roof"].between(0, 100).all()


def make_fit(m, r, tp, ep) -> bool:
    if tp < 1:
        return False
    if ep == 1:
        return m.experts == r.local_experts and m.intermediate == r.inter * tp
    return m.intermediate == r.inter and m.experts == r.local_experts * ep


def test_shapes_match_a_preset_and_sharding_only_where_exactly_one_fits():
    assert at.match_shape(7168, 256, 256, 8) == dict(model="deepseek-r1", tp=8, ep=1, note="")
    assert at.match_shape(7168, 512, 256, 8)["tp"] == 4
    assert at.match_shape(4096, 192, 128, 8)["model"] == "qwen3-235b-a22b"
    assert at.match_shape(2048, 192, 128, 8)["model"] == "qwen3-30b-a3b"
    assert at.match_shape(4096, 1792, 8, 2)["model"] == "mixtral-8x7b"
    ep = at.match_shape(7168, 2048, 32, 8)
    assert (ep["model"], ep["tp"], ep["ep"]) == ("deepseek-r1", 8, 8) and "T*k/ep" in ep["note"]
    # Scout TP1 and Maverick TP8+EP8 hold the same shape: neither is chosen
    amb = at.match_shape(5120, 8192, 16, 1)
    assert amb["model"] == "custom:H=5120,I=8192,E=16,k=1" and amb["tp"] is None
    assert "llama4-scout-16e TP1" in amb["note"] and "llama4-maverick-128e TP8+EP8" in amb["note"]
    shared = at.match_shape(7168, 256, 257, 9)
    assert shared["model"] == "custom:H=7168,I=256,E=257,k=9" and shared["tp"] is None
    assert "deepseek-r1 TP8 with its shared expert fused" in shared["note"]
    assert at.match_shape(6144, 4096, 8, 2)["model"] == "custom:H=6144,I=4096,E=8,k=2"


def test_quant_schemes_and_err_columns():
    assert at.quant_scheme("QuantType.No", "torch.bfloat16") == ("bf16", "bf16", None)
    assert at.quant_scheme("QuantType.per_Tensor", "torch.float8_e4m3fn") == \
        ("fp8-tensor", "fp8", "per-tensor")
    assert at.quant_scheme("QuantType.per_Token", "torch.float8_e4m3fnuz")[0] == "fp8-channel"
    assert at.quant_scheme("QuantType.per_1x128", "torch.float8_e4m3fnuz") == \
        ("fp8-block128", "fp8", "block:128")
    assert at.quant_scheme("QuantType.per_Tensor", "torch.int8") == ("int8-tensor", None, None)
    assert at.parse_err("16.7%") == pytest.approx(0.167) and at.parse_err("0") == 0.0
    assert math.isnan(at.parse_err("n/a"))


def synthetic(tmp_path):
    rows = [
        dict(),                                                     # 2: MI300X bf16 ok
        dict(q_type="QuantType.per_1x128", **FP8),                  # 3: fp8 block, fp8 peak
        dict(cu_num=80),                                            # 4: no vendor name
        dict(token=128, us=0.0),                                    # 5: no time -> failed
        dict(token=256, err2="16.7%", us2=60.0, us=160.0),          # 6: err -> incorrect
        dict(),                                                     # 7: duplicate of 2
        dict(inter_dim=2048, expert=32, token=16),                  # 8: DeepSeek EP8
        dict(token=32, run_1stage=1, us2=0.0, us=100.0, kernelName2="Null", err2="0"),  # 9
        dict(token=512, us1="", us=""),                             # 10: missing times
    ]
    return write_table(tmp_path / "tuned_fmoe.csv", rows)


def test_a_table_of_ones_own_rows_statuses_skips_kernels_and_roofline(tmp_path):
    rows, kernels, manifest, run_id = at.prepare(synthetic(tmp_path))
    res, k = pd.DataFrame(rows).set_index("table_line"), pd.DataFrame(kernels)
    assert len(res) + len(manifest["skipped"]) == 9 and manifest["skipped"][0]["line"] == 7
    assert "line 2" in manifest["skipped"][0]["reason"] and run_id.startswith("aiter-tuned-fmoe-")
    assert res.loc[2, "device"].startswith("AMD Instinct MI300X") and res.loc[2, "status"] == "ok"
    spec = DEVICE_SPECS["mi300x"]
    p = make_problem("custom:H=7168,I=256,E=256,k=8", 64)
    c = cost(p, experts_hit=expected_experts_hit(256, 8, 64), pairs=64 * 8)
    assert res.loc[2, "roof_us"] == pytest.approx(floor_us(c, spec, "bf16"))
    assert res.loc[2, "pct_of_roof"] == pytest.approx(100 * res.loc[2, "roof_us"] / 150.0)
    c8 = cost(p, weight_dtype="fp8", scales="block:128",
              experts_hit=expected_experts_hit(256, 8, 64), pairs=64 * 8)
    assert res.loc[3, "dtype"] == "fp8-block128"
    assert res.loc[3, "roof_us"] == pytest.approx(floor_us(c8, spec, "fp8"))
    assert "gemm fp8" in res.loc[3, "roof_basis"]
    assert res.loc[4, "device"] == "AMD GPU with 80 CUs" and math.isnan(res.loc[4, "roof_us"])
    assert "no vendor spec for AMD GPU with 80 CUs" in res.loc[4, "note"]
    assert res.loc[5, "status"] == "failed" and math.isnan(res.loc[5, "median_us"])
    assert "us is '0.0'" in res.loc[5, "error"]
    assert res.loc[6, "status"] == "incorrect" and res.loc[6, "median_us"] == 160.0
    assert "err2 16.7%" in res.loc[6, "error"]
    assert (res.loc[8, "model"], res.loc[8, "tp"], res.loc[8, "ep"]) == ("deepseek-r1", 8, 8)
    assert res.loc[8, "pairs"] == 16 * 8  # the tuner routes every pair to the row's experts
    assert res.loc[9, "status"] == "ok" and res.loc[9, "kernel_us"] == 100.0
    one = k[k["point_id"] == res.loc[9, "point_id"]]
    assert list(one["phase"]) == ["gemm1"] and one["stage"].iloc[0].startswith("1-stage")
    two = k[k["point_id"] == res.loc[2, "point_id"]]
    assert list(two["kernel"]) == ["k_stage1", "k_stage2"] and list(two["total_us"]) == [100, 50]
    assert res.loc[10, "status"] == "failed" and "us1 is ''" in res.loc[10, "error"]
    assert manifest["counts"]["by_status"] == {"failed": 2, "incorrect": 1, "ok": 5}


def test_the_verb_writes_a_run_and_does_not_overwrite_one(tmp_path, capsys):
    table, out = synthetic(tmp_path), tmp_path / "runs" / "mine"
    assert main(["import-aiter", "--file", str(table), "--out", str(out)]) == 0
    run = open_run(out)
    assert len(run.results) == 8 and len(run.kernels) and run.manifest["run_id"] == "mine"
    assert run.manifest["command"] == f"moe-lab import-aiter --file {table} --out {out}"
    assert run.manifest["source"]["version"] is None  # not the wheel's table
    capsys.readouterr()
    assert main(["import-aiter", "--file", str(table), "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["import-aiter", "--file", str(table), "--out", str(out), "--force",
                 "--max-err", "0.5"]) == 0
    assert (open_run(out).results["status"] == "incorrect").sum() == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["mine"]  # no temporary folders


def _bad_tables(tmp_path):
    rows = [dict(), dict(token=16)]
    yield "missing column", write_table(tmp_path / "a.csv", rows,
                                        [c for c in at.TABLE_COLUMNS if c != "expert"])
    yield "bad number", write_table(tmp_path / "b.csv", [dict(), dict(token="abc")])
    binary = tmp_path / "c.csv"
    binary.write_bytes(bytes(range(256)) * 8)
    yield "binary", binary
    yield "missing file", tmp_path / "nope.csv"
    empty = tmp_path / "d.csv"
    empty.write_text(",".join(at.TABLE_COLUMNS) + "\n")
    yield "no rows", empty


@pytest.mark.parametrize("case", ["missing column", "bad number", "binary", "missing file",
                                  "no rows"])
def test_a_malformed_table_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, case):
    path = dict(_bad_tables(tmp_path))[case]
    out = tmp_path / "runs" / "x"
    assert main(["import-aiter", "--file", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("moe-lab: error: ") and str(path.name) in err
    assert not out.exists() and not (tmp_path / "runs").exists()
    want = {"missing column": "missing column expert", "bad number": "line 3: token is 'abc'",
            "binary": "binary", "missing file": "no such file", "no rows": "no rows"}[case]
    assert want in err


def test_the_committed_run_is_what_the_importer_makes_now(tmp_path):
    _, version = wheel()
    committed = ROOT / "data" / "runs" / at.default_run_id(version)
    if not committed.is_dir():
        pytest.skip(f"no committed import for amd-aiter {version} ({committed.name})")
    old = open_run(committed)
    rows, kernels, manifest, run_id = at.prepare()
    new = open_run(write_run(tmp_path / run_id, rows, kernels, manifest))
    drop = ["git_commit"]  # the commit that ran the import, not a property of the table
    pd.testing.assert_frame_equal(old.results.drop(columns=drop), new.results.drop(columns=drop))
    pd.testing.assert_frame_equal(old.kernels, new.kernels)
    for key in ("counts", "devices", "source", "skipped", "measured_at", "config"):
        assert old.manifest[key] == json.loads(json.dumps(new.manifest[key])), key
    assert old.manifest["command"].split()[:2] == ["moe-lab", "import-aiter"]
    assert old.manifest["environment"]["git_dirty"] is False  # made from a clean checkout
    assert old.results["git_commit"].nunique() == 1 and old.results["git_commit"].notna().all()
