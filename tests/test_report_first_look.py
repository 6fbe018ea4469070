"""The first look (issue 35): a user runs the README's main job on a CPU machine, which
adds a CPU sweep beside the committed runs, then `moe-lab report` and `moe-lab report
--run <that run>`. Both exit 0; the plain report draws the committed GPU runs (the CPU
run only in notebook 01's CPU panel) and each page says which run it reads and why;
`--run` draws that run only. Every exported figure is read as a reviewer reads it, from
the probe `report` writes beside each PNG (moe_lab.plots.probe): a bounded footer,
legend entries told apart, something drawn, one y-axis per quantity, no stacked bars on a
log axis, a share past 100% said so, labels readable at the exported size.

One data folder and the two reports, shared by every test of the module (notebooks are
slow to execute on a small CPU machine)."""
import html
import json
import os
import re
from pathlib import Path

import pytest

pytest.importorskip("nbclient")

from _report_pages import MAX_ENTRIES, counts, expected_runs, refusal, shown  # noqa: E402
from conftest import RUNS_DIR, cli_processes  # noqa: E402
from moe_lab.plots.probe import legend_clashes, series_problems  # noqa: E402
from moe_lab.plots.style import FOOTER_LINES  # noqa: E402

CPU_RUN = "cpu-first-look"
NOTEBOOKS = ("01_kernel_time", "02_eager_vs_compile", "03_roofline", "04_reproduce_claims",
             "05_tuning", "06_expert_parallel")
MIN_FONT_PT = 6  # at the exported size (report's PNGs are drawn at 100 dpi)


@pytest.fixture(scope="module")
def first_look(tmp_path_factory) -> dict:
    """A data folder of (links to) the committed runs plus a CPU sweep as main.sh runs it
    on a CPU (its default model, backends and mode; fewer token counts), then both reports."""
    base = tmp_path_factory.mktemp("first-look")
    runs = base / "runs"
    runs.mkdir()
    for d in sorted(os.listdir(RUNS_DIR)):
        if (Path(RUNS_DIR) / d / "manifest.json").exists():
            os.symlink(os.path.realpath(Path(RUNS_DIR) / d), runs / d)
    env = {**os.environ, "MOE_LAB_DATA": str(runs), "OMP_NUM_THREADS": "1"}
    plain, one = base / "report", base / "report-run"
    got = cli_processes([
        (["sweep", "--device", "cpu", "--tokens", "1,8", "--run-id", CPU_RUN, "--no-progress",
          "--warmup-ms", "2", "--rep-ms", "5"], base),
        (["report", "--out", plain], base),
        (["report", "--run", CPU_RUN, "--out", one], base)], env=env, timeout=1800)
    return {"runs": runs, "sweep": got[0], "plain": (got[1], plain),
            "run": (got[2], one / CPU_RUN)}


def page(folder: Path, name: str) -> str:
    text = (folder / f"{name}.html").read_text()
    return html.unescape(re.sub(r"<[^>]+>", "", text))


def probes(folder: Path) -> dict:
    """figure name -> its probe (the JSON beside each PNG)."""
    pngs = sorted((folder / "figures").glob("*.png"))
    assert pngs, f"no figure under {folder}"
    out = {}
    for p in pngs:
        j = p.with_suffix(".json")
        assert j.exists(), f"{p.name} has no probe beside it"
        out[p.stem] = json.loads(j.read_text())
    return out


def drawn_words(d: dict) -> set:
    """The words of a figure's texts and its whole provenance (the footer's full text)."""
    return set(re.split(r"[\s,;|()]+", " ".join(d["texts"] + [d.get("provenance") or ""])))


def committed_ids(runs: Path) -> set:
    return {p.name for p in runs.iterdir() if p.name != CPU_RUN}


def test_both_reports_exit_0_with_every_notebook_ok(first_look):
    assert first_look["sweep"].returncode == 0, first_look["sweep"].stderr[-2000:]
    for key in ("plain", "run"):
        proc, folder = first_look[key]
        assert proc.returncode == 0, (key, proc.stdout[-3000:], proc.stderr[-3000:])
        assert "FAIL" not in proc.stdout, proc.stdout
        for name in ("01_kernel_time", "03_roofline", "04_reproduce_claims"):
            assert f"ok   {name}:" in proc.stdout, (key, proc.stdout)
        assert sorted(p.stem for p in folder.glob("*.html")) == sorted(NOTEBOOKS + ("index",))


def test_the_plain_report_reads_the_gpu_runs_and_says_why(first_look):
    proc, folder = first_look["plain"]
    for name in NOTEBOOKS:  # one line: which run, and why
        assert re.search(r"^reads (run \S+|every run)", page(folder, name), re.M), name
    p01 = page(folder, "01_kernel_time")
    main = re.search(r"^reads run (\S+): the newest run with ok rows measured by moe-lab, on a GPU;"
                     r" passed over newer runs: (.*)$", p01, re.M)
    committed = committed_ids(first_look["runs"])  # a GPU run of the data, never the CPU's
    assert main and main[1] in committed and CPU_RUN in main[2], p01[:2000]
    assert re.search(rf"^reads run {CPU_RUN}: the newest run with ok rows measured on the CPU$",
                     p01, re.M)  # the CPU panel shows the user's run
    p05 = page(folder, "05_tuning")  # the ledger: the H200 runs, not the newer CPU run
    ledger = re.search(r"^ledger runs: (.*)$", p05, re.M)[1].split(", ")
    assert ledger and all(r in committed for r in ledger), ledger  # the GPU runs, one device
    assert len({json.loads((first_look["runs"] / r / "manifest.json").read_text())[
        "environment"]["device_name"] for r in ledger}) == 1
    assert "KeyError" not in p05
    figs = probes(folder)
    assert any(k.startswith("05_tuning") and "graph median = kernels + gaps"
               in " ".join(d["texts"]) for k, d in figs.items())  # the ledger drawn
    # the CPU run is drawn in notebook 01's CPU panel and nowhere else
    with_cpu = sorted(k for k, d in figs.items() if CPU_RUN in drawn_words(d))
    assert len(with_cpu) == 1 and with_cpu[0].startswith("01_kernel_time"), with_cpu
    gpu_drawn = [k for k, d in figs.items() if drawn_words(d) & committed]
    assert len(gpu_drawn) >= 15, gpu_drawn


def test_report_run_draws_that_run_only(first_look):
    proc, folder = first_look["run"]
    for name in ("01_kernel_time", "03_roofline"):
        assert re.search(rf"^reads run {CPU_RUN}: the run given", page(folder, name), re.M), name
    assert re.search(rf"^reads run {CPU_RUN} \(the run given\)", page(folder, "04_reproduce_claims"),
                     re.M)
    committed = committed_ids(first_look["runs"])
    figs = probes(folder)
    others = {k: sorted(drawn_words(d) & committed) for k, d in figs.items()}
    assert not any(others.values()), others  # no figure about another run
    # each figure drawn from rows names the run; 04's implication figure has no row of it
    named = [k for k, d in figs.items() if CPU_RUN in drawn_words(d)]
    assert all(k in named or k.startswith("04_") for k in figs), (sorted(figs), named)
    assert named
    # nothing passed off as this run's: a figure byte-identical to one of the plain report's
    # is one about this run (the plain report's CPU panel), never another run's figure
    plain = {p.read_bytes(): p.stem for p in (first_look["plain"][1] / "figures").glob("*.png")}
    same = {p.stem: plain[p.read_bytes()] for p in (folder / "figures").glob("*.png")
            if p.read_bytes() in plain}
    assert all(CPU_RUN in drawn_words(figs[k]) for k in same), same
    assert len(same) <= 1, same  # at most the CPU panel


def test_report_run_on_a_cpu_sweeps_run_shows_it_or_says_why_not(first_look):
    """Every notebook on the CPU run (given by id; tests/test_report_run.py reports notebook
    01 on a CPU run given as a folder): 03 has no roof for it, 04's measured times are
    none of its rows, 02, 05 and 06 refuse it in one line each; every figure names each run
    it draws rows from and its legends stay small."""
    proc, folder = first_look["run"]
    n, ok = counts(first_look["runs"] / CPU_RUN)
    assert n == ok > 0
    p03 = page(folder, "03_roofline")
    assert shown(p03) == (CPU_RUN, n, ok) and "no roof for this run" in p03
    p04 = page(folder, "04_reproduce_claims")
    assert re.search(rf"^runs for the measured times: \S+{CPU_RUN}: 1 run\(s\): {CPU_RUN}$", p04,
                     re.M), p04[:2000]
    assert set(re.findall(r"^\S+: measured_us \S+ \(\S+, run (\S+)\)$", p04, re.M)) == {"-"}
    for name in ("02_eager_vs_compile", "05_tuning", "06_expert_parallel"):
        refusal(proc.stdout, name)
    missing, crowded = [], []
    for name, d in probes(folder).items():
        text = page(folder, name.rsplit("_", 1)[0])
        words = drawn_words(d)
        lost = {r for r in expected_runs(CPU_RUN, str(first_look["runs"] / CPU_RUN), name, d,
                                         text) if r not in words}
        missing += [(name, sorted(lost))] if lost else []
        crowded += [(name, len(leg["entries"])) for leg in d["legends"]
                    if len(leg["entries"]) > MAX_ENTRIES]
    assert not missing and not crowded, (missing, crowded)


def _problems(d: dict) -> list[str]:
    out = []
    lines = [t.count("\n") + 1 for t in d["texts"]]
    if lines and max(lines) > FOOTER_LINES:
        out.append(f"a text of {max(lines)} lines (footer at most {FOOTER_LINES})")
    out += [f"legend entries alike: {c}" for c in legend_clashes(d)]
    out += series_problems(d)  # a series of several configurations, bars on a log axis...
    for leg in d["legends"]:
        colours = {e.get("edge") if e.get("color") == "none" else e.get("color")
                   for e in leg["entries"]}
        if len(leg["entries"]) >= 3 and len(colours) == 1:
            out.append(f"{len(leg['entries'])} legend entries in one colour {colours}")
    axes = d["axes"]
    if not any(a["drawn"] for a in axes):
        out.append("nothing drawn (an empty canvas)")
    for a in axes:
        where = a["title"][:40] or a["ylabel"]
        if a["twin"]:
            out.append(f"twin y-axes ({where})")
        if a["stacked_bars"] and "log" in (a["yscale"], a["xscale"]):
            out.append(f"stacked bars on a log axis ({where})")
        if "%" in a["ylabel"] and (a["ymax_data"] or 0) > 100.5 and \
                "100%" not in a["title"] + a["ylabel"]:
            out.append(f"a share past 100% not explained ({where})")
        if a["drawn"] and a["min_font"] is not None and a["min_font"] < MIN_FONT_PT:
            out.append(f"labels of {a['min_font']} pt ({where})")
    return out


def test_every_exported_figure_passes_a_reviewers_read(first_look):
    bad = {}
    for key in ("plain", "run"):
        for name, d in probes(first_look[key][1]).items():
            if _problems(d):
                bad[f"{key}/{name}"] = _problems(d)
    assert not bad, json.dumps(bad, indent=1)


def test_no_figure_is_exported_twice_under_two_names(first_look):
    """One report never exports one figure under two names: no two PNGs of the same
    bytes, no two probes of the same content (01 and 03 both drew FP8 against bf16)."""
    for key in ("plain", "run"):
        figures = first_look[key][1] / "figures"
        for ext in ("png", "json"):
            seen: dict = {}
            for p in sorted(figures.glob(f"*.{ext}")):
                seen.setdefault(p.read_bytes(), []).append(p.stem)
            twice = [names for names in seen.values() if len(names) > 1]
            assert not twice, (key, ext, twice)


def test_the_figure_check_fails_on_the_defects_it_names():
    """The check above, on probes of figures with each defect: each one is caught."""
    from moe_lab.plots import style
    from moe_lab.plots.probe import describe_figure
    fig, ax = style.new_figure()
    for i in range(3):
        ax.plot([1, 2], [i, i + 1], ls=("-", "--", ":")[i], color="#17becf", label=f"s{i}")
    tw = ax.twinx()
    tw.plot([1, 2], [5, 150])
    tw.set_ylabel("% of roof")
    ax.bar([1, 2], [3, 4], bottom=[1, 1])
    ax.set_yscale("log")
    ax.tick_params(labelsize=4)
    style.shared_legend(fig)
    fig.text(0, 0, "a\nb\nc\nd\ne")
    found = " | ".join(_problems(describe_figure(fig)))
    for what in ("one colour", "twin y-axes", "stacked bars on a log axis", "past 100%",
                 "pt", "lines (footer", "bars on a log axis"):
        assert what in found, (what, found)
    empty, _ = style.new_figure()
    assert "nothing drawn" in " ".join(_problems(describe_figure(empty)))
