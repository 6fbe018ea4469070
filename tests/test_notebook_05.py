"""notebooks/05_tuning.ipynb executes headless on the CPU: it prints the run it shows (the
newest committed run with ok 'tuned' rows), where tuned beats default and by how much, and
per target how many points meet it and the worst miss. The tests recompute each number
from the parquet files and the ceilings JSON (not through moe_lab.plots or moe_lab.cost.roofline),
so the notebook showing another run, another roof or a wrong count fails them."""
import json
import re
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("nbclient")

from conftest import ROOT, RUNS_DIR, pngs, printed, run_notebook, with_params  # noqa: E402

NB = "05_tuning.ipynb"
RUNS = Path(RUNS_DIR)  # the committed runs (conftest)
KEY = ["model", "tp", "ep", "ep_rank", "dtype", "routing", "tokens"]
CANDIDATES = {("torch-grouped", "default"), ("aiter-triton", "default"), ("aiter-triton", "tuned")}
TARGETS = {"<16 tokens: >= 50% of roof": (1, 15, "pct", 50.0),
           "16-64 tokens: >= 85% of roof": (16, 64, "pct", 85.0),
           ">=4096 tokens: >= 60% of bf16 GEMM peak": (4096, 1 << 30, "gemm_pct", 60.0)}


def newest_committed_run_with_tuned_rows() -> str:
    """The notebook's rule: of the runs with a backend measured both tuned and default, the
    one with the most ok points of such backends (the fullest picture); ties: the newest;
    never one whose manifest says running or failed (h200-tuned-20261130 has a part still
    marked running)."""
    found = []
    for d in RUNS.iterdir():
        if (d / "results.parquet").is_file():
            res = pd.read_parquet(d / "results.parquet")
            ok = res[res["status"] == "ok"] if "config" in res else res.iloc[:0]
            both = set(ok.loc[ok.get("config") == "tuned", "backend"]) & set(
                ok.loc[ok.get("config") == "default", "backend"]) if len(ok) else set()
            manifest = json.loads((d / "manifest.json").read_text())
            status = str(manifest.get("status") or "")
            if "running" in status or "failed" in status:
                continue  # never a default (a merged run: one of its parts' words is enough)
            if both:  # a backend both tuned and default: what the notebook compares
                found.append((int(ok["backend"].isin(both).sum()), manifest["started"], d.name))
    return max(found)[2]


def graph_ok(res: pd.DataFrame) -> pd.DataFrame:
    return res[(res["mode"] == "graph") & (res["status"] == "ok") & (res["median_us"] > 0)]


def tuned_against_default(res: pd.DataFrame) -> pd.DataFrame:
    """Every backend's tuned row beside its default row of the same point."""
    g = graph_ok(res)
    return g[g["config"] == "default"].merge(g[g["config"] == "tuned"], on=KEY + ["backend"],
                                             suffixes=("_d", "_t"))


def with_roof(res: pd.DataFrame) -> pd.DataFrame:
    """% of roof and % of the bf16 GEMM peak from the rows' FLOPs and bytes and the
    measured ceilings (the read bandwidth where it is at least the copy's)."""
    c = json.loads((Path(ROOT) / "data" / "ceilings" / "nvidia-h200.json").read_text())
    peak = c["gemm_bf16"]["tflops"] * 1e12
    bw = max(c["memory"]["tb_per_s"], c.get("memory_read", {}).get("tb_per_s", 0)) * 1e12
    roof_us = pd.concat([res["flops"] / peak, res["bytes"] / bw], axis=1).max(axis=1) * 1e6
    return res.assign(pct=100 * roof_us / res["median_us"],
                      gemm_pct=100 * res["flops"] / (res["median_us"] * 1e-6) / peak)


def expected_targets(res: pd.DataFrame) -> dict:
    """Per target: (points, met, missed, worst miss in points of %) of the best candidate."""
    g = graph_ok(res)
    g = g[[(b, c) in CANDIDATES for b, c in zip(g["backend"], g["config"])]]
    best = with_roof(g.sort_values("median_us").drop_duplicates(KEY))
    out = {}
    for name, (lo, hi, col, th) in TARGETS.items():
        b = best[(best["tokens"] >= lo) & (best["tokens"] <= hi)]
        miss = (th - b[col]).clip(lower=0)
        out[name] = (len(b), int((b[col] >= th).sum()), int((b[col] < th).sum()),
                     round(float(miss.max()), 1))
    return out


def shown_targets(text: str) -> dict:
    out = {}
    for name in TARGETS:
        m = re.search(re.escape(name) + r"\s+(\d+)\s+(\d+)\s+(\d+)\s+\d+\s+([0-9.]+)\s", text)
        assert m, text[-1500:]
        out[name] = (int(m[1]), int(m[2]), int(m[3]), float(m[4]))
    return out


@pytest.fixture(scope="module")
def default_outputs():
    return run_notebook(NB)


def test_default_is_the_fullest_run_with_tuned_and_default_rows(default_outputs):
    text = printed(default_outputs)
    m = re.search(r"^run (\S+): (\d+) points \((\d+) ok\)", text, re.M)
    assert m, text[:500]
    run_id = newest_committed_run_with_tuned_rows()
    res = pd.read_parquet(RUNS / run_id / "results.parquet")
    assert (m[1], int(m[2]), int(m[3])) == (run_id, len(res), int((res["status"] == "ok").sum()))
    assert run_id == "h200-silu-tuned-ep1-20261201"
    assert len(pngs(default_outputs)) >= 4  # tuned/default, % of roof, phases, glue


def test_tuned_faster_count_and_the_largest_ratio(default_outputs):
    text = printed(default_outputs)
    res = pd.read_parquet(RUNS / newest_committed_run_with_tuned_rows() / "results.parquet")
    j = tuned_against_default(res)
    ratio = j["median_us_d"] / j["median_us_t"]
    top = j.loc[ratio.idxmax()]
    m = re.search(r"tuned faster than default at (\d+) of (\d+) points", text)
    assert m and (int(m[1]), int(m[2])) == (int((ratio > 1).sum()), len(j)), text[:1500]
    m = re.search(r"median default/tuned ([0-9.]+)x; max ([0-9.]+)x \((\S+) (\S+) (\S+), "
                  r"(\d+) tokens\)", text)
    assert m, text[:1500]
    assert float(m[1]) == pytest.approx(ratio.median(), abs=0.005)
    assert float(m[2]) == pytest.approx(ratio.max(), abs=0.005)
    sharding = "TP8" + ("+EP8" if top["ep"] == 8 else "")
    assert (m[3], m[4], m[5], int(m[6])) == (top["backend"], top["model"], sharding,
                                             top["tokens"])
    # the points whose tuned row is not ok (no tuned file) are counted, not drawn
    g = res[res["mode"] == "graph"]
    missing = g[(g["config"] == "tuned") & (g["status"] != "ok")]
    assert f"tuned missing (not drawn) at {len(missing)} points" in text
    assert set(missing["status"]) <= {"unsupported"}  # aiter-triton-silu: two shapes untuned


def test_the_targets_met_and_missed_and_the_worst_miss(default_outputs):
    res = pd.read_parquet(RUNS / newest_committed_run_with_tuned_rows() / "results.parquet")
    want = expected_targets(res)
    assert shown_targets(printed(default_outputs)) == want
    assert sum(v[0] for v in want.values()) == 24  # 4 shapes x (2 + 2 + 2) token counts


def test_without_vllm_rows_the_vllm_section_says_so_in_one_line(default_outputs):
    """Section 5 (the best own layer over vLLM as shipped): the committed runs have no
    `vllm` default row yet (issue 41 measures them), so one line and no figure."""
    has_vllm = [d.name for d in RUNS.iterdir() if (d / "results.parquet").is_file()
                and "vllm" in set(pd.read_parquet(d / "results.parquet")["backend"])]
    text = printed(default_outputs)
    line = "no run here has vllm rows (vLLM as shipped): nothing to compare, no figure drawn"
    assert (line in text) == (not has_vllm), has_vllm


def test_a_run_without_tuned_rows_is_refused():
    from nbclient.exceptions import CellExecutionError
    with pytest.raises(CellExecutionError, match="has no ok rows of a backend both tuned"):
        run_notebook(NB, edit=with_params(run="h200-seed4-20261129"))
    # tuned rows alone (no default of the same backend to compare with) are refused too
    with pytest.raises(CellExecutionError, match="has no ok rows of a backend both tuned"):
        run_notebook(NB, edit=with_params(run="h200-tuned-deepseek-ep8-tail-20261130"))


def test_the_tuned_files_against_the_grid_and_the_search_spread(default_outputs):
    """Section 6: the count of required shapes whose file holds the grid (each recomputed
    from the files in test_tuned_files), and one spread figure per tuned backend."""
    from moe_lab.analysis import tuned as tf
    text = printed(default_outputs)
    inv = tf.inventory()  # every device with data, each its own count
    assert len(inv)
    for dev, g in inv.groupby("device"):
        m = re.search(rf"{re.escape(dev)}: (\d+) of (\d+) required shapes have a file that "
                      "holds the grid", text)
        assert m and (int(m[1]), int(m[2])) == (int(g["holds_grid"].sum()), len(g)), text[-3000:]
    backends = set()
    for d in RUNS.iterdir():
        w = d / "winners.parquet"
        if w.is_file() and "search_best_us" in pd.read_parquet(w).columns:
            backends |= set(pd.read_parquet(w)["backend"])
    assert backends >= {"aiter-triton", "aiter-triton-silu", "vllm"}
    assert len(pngs(default_outputs)) >= 4 + len(backends)


def test_the_published_tunings_count_their_points_and_ties(default_outputs):
    """Section 7: the points where a published tuning was timed in the same run as
    moe-lab's file of the same backend (vLLM as shipped reading its own H200 file beside
    vLLM with moe-lab's; aiter-triton* with `--config <vLLM's H200 file>` beside its tuned
    one), counted here from the parquet files; the ties and the misses from the rows'
    launch configurations or the search's default pass (test_tuned_files tests them)."""
    text = printed(default_outputs)
    m = re.search(r"published tunings: (\d+) points, (\d+) ties by construction, moe-lab's "
                  r"file slower at (\d+) of the other (\d+)", text)
    assert m, text[-3000:]
    points = set()
    for d in RUNS.iterdir():
        f = d / "results.parquet"
        if not f.is_file():
            continue
        g = graph_ok(pd.read_parquet(f))
        if "glue" in g:
            g = g[g["glue"].fillna("").isin(["", "fused"])]
        if "config" not in g:
            continue
        h200 = r"(?:^|/)E=\d+,N=\d+,device_name=NVIDIA_H200[^/]*\.json$"
        for b, gb in g.groupby("backend"):
            if b == "vllm" and "config_file" in gb:
                shipped = gb[(gb["config"] == "default")
                             & gb["config_file"].fillna("").str.contains(h200)]
            elif b.startswith("aiter-triton"):
                shipped = gb[gb["config"].fillna("").str.contains(h200)]
            else:
                continue
            j = shipped.merge(gb[gb["config"] == "tuned"], on=KEY)
            points |= {(b, *x) for x in j[KEY].itertuples(index=False)}
    assert int(m[1]) == len(points) and int(m[2]) + int(m[4]) == len(points) > 0
    assert "left for the GPU, searches:" in text and "left for the GPU, grid sweeps:" in text


def _cell(needle: str):
    """The executed default notebook's code cell whose source holds `needle` (the same
    cached execution run_notebook reads)."""
    import os

    from conftest import NOTEBOOKS, execute_cached
    nb = execute_cached(os.path.join(NOTEBOOKS, NB))
    return next(c for c in nb.cells if c.cell_type == "code" and needle in c.source)


def test_the_vllm_section_draws_its_figure_and_lists_the_slower_points_it_counts():
    """Section 5: its figure is shown (a Figure returned inside an if/else block is not
    displayed by Jupyter: the figure never appeared), and the table of slower points is
    the points by_shape counts as slower (the newest measurement of each point), not every
    run's: a point superseded by a newer run's measurement is neither counted nor listed."""
    from moe_lab.analysis import vllm_compare as vc
    cell = _cell("fig_best_over_vllm(")
    vruns = vc.vllm_runs()
    assert vruns  # the committed runs have vLLM as shipped
    assert any("image/png" in o.get("data", {}) for o in cell.outputs), \
        "section 5 shows no figure"
    text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
    t = vc.best_over_vllm(*vc.frames(vruns))
    counted = int(vc.by_shape(t)["slower"].sum())
    m = re.search(r"^(\d+) points? above the ([0-9.]+)x band", text, re.M)
    assert m, text[-1500:]
    assert (int(m[1]), float(m[2])) == (counted, vc.BAND)
    tables = [o for o in cell.outputs if "text/html" in o.get("data", {})]
    assert len(tables) == 1 + (counted > 0)  # by_shape, then the slower points if any
    if counted:
        # + the header row (`<tr style=...>` in pandas' HTML: counted by its opening)
        assert tables[1]["data"]["text/html"].count("<tr") == counted + 1


def test_the_vllm_section_names_every_own_layer_the_comparison_reads():
    """Section 5's text lists the layers vllm_compare.OWN compares (aiter-triton-silu
    joined them; the text did not say so)."""
    nb = json.loads((Path(ROOT) / "notebooks" / NB).read_text())
    md = next("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"
              and "The best own layer against vLLM as shipped" in "".join(c["source"]))
    from moe_lab.analysis import vllm_compare as vc
    for backend, _ in vc.OWN:
        assert re.search(rf"(?<![\w-]){re.escape(backend)}(?![\w-])", md), backend


def test_one_runs_page_names_the_phase_that_holds_each_miss_back():
    """With `run` given (what `moe-lab report --run ID` renders) the ledger runs are that
    run, so the target table's ledger held its rows twice and held_back_by printed a
    pandas Series ("177    gaps\\n177    gaps\\nName: phase, dtype: str") for every miss."""
    outputs = run_notebook(NB, edit=with_params(run="h200-vllm-vtuned-bf16-tp8"))
    text = printed(outputs) + "".join(o.get("data", {}).get("text/plain", "") for o in outputs)
    assert "Name: phase" not in text, text[:3000]
    m = re.search(r"<16 tokens: >= 50% of roof\s+\d+\s+\d+\s+(\d+)\s+.*\s(gaps|gemm1|gemm2|align|"
                  r"act|combine|quant|other|no kernels)\s+[0-9.]+\s*$", printed(outputs), re.M)
    assert m and int(m[1]) > 0, printed(outputs)[:3000]  # a miss, and the phase named


def _glue_point_runs() -> list[str]:
    """The runs (newest first by the manifest's started, not marked running or failed, the
    seed4 `before` left out) with an ok torch-grouped default row of DeepSeek-R1 TP8 at 4096
    tokens in graph mode, the deployed glue (fused, or no glue column), and its kernels."""
    found = []
    for d in RUNS.iterdir():
        f = d / "results.parquet"
        if d.name == "h200-seed4-20261129" or not f.is_file() or not (d / "kernels.parquet").is_file():
            continue
        status = str(json.loads((d / "manifest.json").read_text()).get("status") or "")
        if "running" in status or "failed" in status:
            continue
        r = graph_ok(pd.read_parquet(f))
        cfg = r["config"].fillna("default") if "config" in r else pd.Series("default", r.index)
        glue = r["glue"].fillna("") if "glue" in r else pd.Series("", r.index)
        r = r[(r["model"] == "deepseek-r1") & (r["tp"] == 8) & (r["ep"] == 1)
              & (r["tokens"] == 4096) & (r["backend"] == "torch-grouped") & (cfg == "default")
              & glue.isin(["", "fused"])]
        k = pd.read_parquet(d / "kernels.parquet")
        if r["point_id"].isin(k["point_id"]).any():
            found.append((json.loads((d / "manifest.json").read_text())["started"], d.name))
    return [n for _, n in sorted(found, reverse=True)]


def test_the_glue_before_and_after_reads_an_after_that_has_the_point(default_outputs):
    """Section 3's torch-grouped before/after its bf16 glue compared seed4 with the run shown;
    the default run (aiter-triton rows only) has no torch-grouped point, so the figure drew
    `before` alone and the kernel table said every kernel went to 0.0 after. The after is now
    the run shown where it has the point, else the newest run that has it, named."""
    text = printed(default_outputs)
    shown = re.search(r"^run (\S+): \d+ points", text, re.M)[1]
    runs = _glue_point_runs()
    assert shown not in runs and runs  # the committed data: the scenario this test is about
    m = re.search(r"^after: run (\S+), the newest run with torch-grouped default", text, re.M)
    assert m and m[1] == runs[0], text[-4000:]
    cell = _cell("glue_kernels.head(12)")
    html = [o["data"]["text/html"] for o in cell.outputs if "text/html" in o.get("data", {})]
    table = next(h for h in html if "<th>change</th>" in h)  # the kernel table, before/after
    gemm = [re.findall(r"<td>([^<]*)</td>", row) for row in table.split("<tr>")
            if "cutlass grouped GEMM" in row]
    assert gemm and all(float(after) > 0 for _, after, _ in gemm), table  # after: measured
    assert any("image/png" in o.get("data", {}) for o in _cell("glue_after_run(").outputs)


def test_one_runs_page_leaves_the_glue_before_and_after_out_when_its_run_lacks_the_point(tmp_path):
    """The run given as a folder outside data/runs (a copy: what a user's run is): its
    ledger is that run's (the page named it by id, which the ledger looked up in data/runs
    and refused for a run that lies elsewhere)."""
    import shutil
    folder = shutil.copytree(RUNS / "h200-vllm-vtuned-bf16-tp8", tmp_path / "h200-vllm-vtuned-bf16-tp8")
    outputs = run_notebook(NB, edit=with_params(run=str(folder)))
    text = printed(outputs)
    assert re.search(r"^ledger runs: h200-vllm-vtuned-bf16-tp8$", text, re.M), text[:3000]
    assert ("torch-grouped before and after its bf16 glue: left out (run "
            "h200-vllm-vtuned-bf16-tp8 has no torch-grouped default") in text, text[-4000:]
    assert "after: run" not in text


def test_both_readings_of_the_vllm_targets_are_shown_side_by_side():
    """Issue 66: section 5 shows issue 41's targets in both readings (with vLLM's kernel on
    moe-lab's tuned files, and the workbook's own kernels alone), from the analysis
    function, each row the one evaluation's count."""
    from moe_lab.analysis import targets as tg, vllm_compare as vc
    cell = _cell("vc.both_readings(vruns)")
    html = "".join(o["data"]["text/html"] for o in cell.outputs if "text/html" in o.get("data", {}))
    _, want = vc.both_readings(vc.vllm_runs())
    for r in want.itertuples(index=False):
        assert r.reading in tg.READINGS
        assert re.search(rf"<td>{re.escape(r.reading)}</td>\s*<td>{r.points}</td>\s*"
                         rf"<td>{r.met}</td>", html.replace("&#x27;", "'")), (r.target, r.reading)
    assert "geomean_ratio_own_only" in html
