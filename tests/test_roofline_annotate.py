"""`moe-lab roofline --annotate RUN`: derived roofline columns recomputed with the
committed measured ceilings; the measurements themselves are untouched."""

from moe_lab.cli import main
from moe_lab.storage.store import RunStore, open_run, point_id


def test_annotate_uses_measured_ceilings_and_keeps_measurements(tmp_path):
    store = RunStore(tmp_path / "r")
    store.write_manifest({"environment": {"device_name": "NVIDIA H200"}})
    rows = []
    for t, us in [(1, 120.0), (64, 800.0)]:
        d = dict(model="deepseek-r1", tp=8, ep=8, ep_rank=0, dtype="bf16", backend="aiter-triton",
                 mode="graph", tokens=t, routing="uniform", status="ok", error="", median_us=us,
                 p10_us=us, p90_us=us, n=10, experts_hit=1 if t == 1 else 20)
        d["point_id"] = point_id(d)
        rows.append(d)
    store.append(rows, [])
    assert main(["roofline", "--annotate", str(tmp_path / "r")]) == 0
    run = open_run(tmp_path / "r")
    manifest, res = run.manifest, run.results
    assert manifest["roofline"]["ceiling_source"] == "measured"
    assert list(res["median_us"]) == [120.0, 800.0]
    assert (res["ceiling_source"] == "measured").all()
    one = res[res.tokens == 1].iloc[0]
    # 1 expert x 3 x 7168 x 2048 x 2 bytes of weights dominate at one token
    assert one["bytes"] >= 3 * 7168 * 2048 * 2
    assert abs(one["pct_of_roof"] - 100 * one["roof_us"] / 120.0) < 1e-9
    assert res["roof_us"].gt(0).all()


def test_annotate_bad_dir_exits_2(tmp_path, capsys):
    assert main(["roofline", "--annotate", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
