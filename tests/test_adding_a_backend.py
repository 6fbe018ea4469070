"""README's "Adding a backend", followed literally: a copy of the package with one new
file in moe_lab/backends/ and nothing else edited. The backend then shows in
`moe-lab backends`, is checked and timed into a sweep row, gets its own roofline bytes from
its declared intermediates, and has its declared colour and label in a figure."""
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent("""
    import io, contextlib, json, math
    import moe_lab as ml
    from moe_lab.cli import main
    from moe_lab.plots import kernel_time
    from moe_lab.cost.roofline import add_roofline_columns
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["backends"]) == 0
    listed = [ln.split()[0] for ln in out.getvalue().splitlines()[1:]]
    df = ml.measure("custom:H=64,I=32,E=8,k=2", tokens=[1, 8], tp=1, dtype="bf16",
                    backends="torch,torch-bf16-loop", device="cpu", run="run",
                    rep_ms=2, warmup_ms=1)
    mine = df[df["backend"] == "torch-bf16-loop"]
    ann = add_roofline_columns(df, "NVIDIA H200")
    ann_mine = ann[ann["backend"] == "torch-bf16-loop"]
    fig = kernel_time.fig_time_vs_tokens(ml.open_run("run"))
    legend = {t.get_text(): h for leg in fig.legends for t, h in zip(leg.get_texts(), leg.legend_handles)}
    label = next(k for k in legend if k.startswith("torch loop (bf16 GEMMs)"))
    print(json.dumps(dict(
        listed=listed, statuses=list(mine["status"]), errs=list(mine["max_rel_err"]),
        medians=list(mine["median_us"]),
        backend_bytes=list(ann_mine["backend_bytes"]), ideal_bytes=list(ann_mine["bytes"]),
        label=label, color=legend[label].get_color())))
""")


def test_one_new_file_is_all_a_backend_takes(tmp_path):
    pkg = tmp_path / "moe_lab"
    shutil.copytree(ROOT / "moe_lab", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "tests" / "data" / "plugin" / "torch_bf16_loop.py",
                pkg / "backends" / "torch_bf16_loop.py")
    (tmp_path / "data").mkdir()
    shutil.copytree(ROOT / "data" / "ceilings", tmp_path / "data" / "ceilings")
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env={"PYTHONPATH": str(tmp_path),
                                                      "PATH": "/usr/bin:/bin",
                                                      "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    import json
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert "torch-bf16-loop" in got["listed"]
    assert got["statuses"] == ["ok", "ok"]  # checked against the reference, then timed
    assert all(e < 2e-2 for e in got["errs"]) and all(m > 0 for m in got["medians"])
    # its declared intermediates: more bytes than the ideal fused kernel, per point
    assert len(got["backend_bytes"]) == len(got["ideal_bytes"]) == 2  # zip over none passes
    assert all(b > i for b, i in zip(got["backend_bytes"], got["ideal_bytes"]))
    assert got["color"] == "tab:olive"
    # and without the file, the same package does not know it (the test is not vacuous)
    (pkg / "backends" / "torch_bf16_loop.py").unlink()
    gone = subprocess.run([sys.executable, "-m", "moe_lab", "backends"], cwd=tmp_path,
                          capture_output=True, text=True, env={"PYTHONPATH": str(tmp_path)})
    assert gone.returncode == 0 and "torch-bf16-loop" not in gone.stdout
