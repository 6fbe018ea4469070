"""docs/findings.md is generated from the committed runs: `moe-lab findings --check` agrees
with the committed file, and fails (exit 1, naming the line) once one committed row's
median_us is changed in a copy of the data; the file states the known coverage of the
searches as the data has it, not as a person typed it."""
import re
import shutil
from pathlib import Path

import pandas as pd
from conftest import ROOT, RUNS_DIR
from moe_lab.cli import main

FINDINGS = Path(ROOT) / "docs" / "findings.md"


def test_the_committed_findings_agree_with_the_committed_data(capsys):
    assert main(["findings", "--check"]) == 0, capsys.readouterr().err[-3000:]
    assert "agrees with the data" in capsys.readouterr().out


def test_one_changed_median_us_in_a_copy_of_the_data_fails_the_check(tmp_path, capsys):
    """The tuned run's Maverick TP8 4096-token aiter-triton tuned graph row (the worst miss
    of the GEMM-peak target) twice as slow: the target table no longer matches."""
    runs = tmp_path / "runs"
    shutil.copytree(RUNS_DIR, runs, symlinks=False)
    p = runs / "h200-silu-tuned-ep1-20261201" / "results.parquet"
    res = pd.read_parquet(p)
    pick = ((res["model"] == "llama4-maverick-128e") & (res["tokens"] == 4096)
            & (res["backend"] == "aiter-triton") & (res["config"] == "tuned")
            & (res["mode"] == "graph"))
    assert pick.sum() == 1
    res.loc[pick, "median_us"] *= 2
    res.to_parquet(p)
    capsys.readouterr()
    assert main(["findings", "--check", "--data-dir", str(runs), "--out", str(FINDINGS)]) == 1
    err = capsys.readouterr().err
    assert "differs from what the data gives" in err
    assert re.search(r"^\+\| >=4096 tokens: >= 60% of bf16 GEMM peak \|", err, re.M), err[-2000:]


def test_a_data_dir_that_is_not_there_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["findings", "--check", "--data-dir", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "not a folder of run folders" in err and len(err.strip().splitlines()) == 1


def test_the_search_coverage_is_the_data_s():
    """Maverick's aiter-triton-silu searches hold 1-256 tokens, gemm2 never searched at
    256 (the drift the hand-typed findings had: 'all 8 token counts')."""
    text = FINDINGS.read_text()
    rows = [ln for ln in text.splitlines()
            if ln.startswith("| `h200-tune-aiter-triton-silu-fixed-ep") and "maverick" in ln]
    assert len(rows) == 2
    for ln in rows:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        assert cells[3] == "1, 4, 16, 64, 256" and cells[5] == "256"  # keys; gemm2 not searched
    assert "all 8 token counts" not in text


def test_how_long_a_search_takes_leaves_out_a_search_whose_invocation_was_killed():
    """The time of a whole one-shape search (issue 38: the README points here) is read
    from runs that searched to the end with every invocation's wall time recorded: vLLM's
    DeepSeek-R1 fp8 search, whose first invocation was killed (its manifest: 130 s, the
    second invocation only), would understate it."""
    import json
    line = next(ln for ln in FINDINGS.read_text().splitlines()
                if ln.startswith("How long a complete search of one shape takes"))
    walls = {}
    for p in sorted(Path(RUNS_DIR).glob("h200-tune-vllm-*/manifest.json")):
        m = json.loads(p.read_text())
        if m.get("status") == "complete":
            inv = m["invocations"]
            walls[p.parent.name] = (all("wall_s" in i for i in inv), m["wall_s_total"])
    assert walls["h200-tune-vllm-deepseek-r1-tp8-fp8-block128"] == (False, 130.0)
    timed = sorted(w for ok, w in walls.values() if ok)
    got = re.search(r"vllm: (\d+)(?:-(\d+))? s(?:, median \d+ s)? \((\d+) searche?s?\)", line)
    assert got, line
    assert int(got[3]) == len(timed) and int(got[1]) == round(timed[0]), line
    assert re.search(r"aiter-triton: \d+-\d+ s, median \d+ s \(\d+ searches\)", line), line



def test_a_short_file_in_a_run_the_targets_read_stops_the_findings_in_one_line(tmp_path, capsys):
    """The tuned run (the roof targets) without its kernels' `calls`, the ledger run without
    its phases' `floor_us`: the targets it answers vanished from the table without a word
    (read inside the try that lets a data folder without such a run leave them out; the
    stored phases reindexed to NaN floors). Whole again, the targets are there."""
    runs = tmp_path / "runs"
    for run, file, col in (("h200-silu-tuned-ep1-20261201", "kernels.parquet", "calls"),
                           ("h200-vllm-bf16-tp8", "phases.parquet", "floor_us")):
        shutil.rmtree(runs, ignore_errors=True)
        for r in ("h200-silu-tuned-ep1-20261201", "h200-vllm-bf16-tp8"):
            shutil.copytree(Path(RUNS_DIR) / r, runs / r)
        pd.read_parquet(runs / run / file).drop(columns=[col]).to_parquet(runs / run / file)
        out = tmp_path / "findings.md"
        capsys.readouterr()
        assert main(["findings", "--data-dir", str(runs), "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"lacks the column {col}" in err, err
        assert not out.exists()
    shutil.copy(Path(RUNS_DIR) / run / file, runs / run / file)
    assert main(["findings", "--data-dir", str(runs), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| <16 tokens: >= 50% of roof |  | 8 |" in text and "| glue <= 3x floor + 20 us |" in text


def test_a_run_git_does_not_track_is_left_out_and_named(tmp_path, capsys):
    """main.sh's sweep writes the user's run into the checkout's data/runs (ignored by git):
    `findings --check` then failed on a document that had grown a row for it. The findings
    read the runs git tracks (staged counts), name the ones left out on stderr, and read a
    folder outside a git checkout whole."""
    import subprocess
    runs = tmp_path / "runs"
    for r in ("h200-silu-tuned-ep1-20261201", "h200-vllm-bf16-tp8"):
        shutil.copytree(Path(RUNS_DIR) / r, runs / r)
    out, mine = tmp_path / "f.md", tmp_path / "with-mine.md"
    assert main(["findings", "--data-dir", str(runs), "--out", str(out)]) == 0  # no git: all
    shutil.copytree(Path(RUNS_DIR) / "cpu-gloo-x2-expert-parallel-20261130", runs / "cpu-mine")
    git = ["git", "-C", str(runs), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "h200-silu-tuned-ep1-20261201"], check=True)  # staged
    subprocess.run(git + ["add", "h200-vllm-bf16-tp8"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "runs"], check=True)
    capsys.readouterr()
    assert main(["findings", "--data-dir", str(runs), "--out", str(mine)]) == 0
    err = capsys.readouterr().err
    assert "left out 1 run folder(s) git does not track" in err and "cpu-mine" in err, err
    assert mine.read_text() == out.read_text() and "cpu-mine" not in mine.read_text()
    assert main(["findings", "--check", "--data-dir", str(runs), "--out", str(out)]) == 0
    subprocess.run(git + ["add", "cpu-mine"], check=True)  # staged: `git add -f` a run
    assert main(["findings", "--data-dir", str(runs), "--out", str(mine)]) == 0
    assert "cpu-mine" in mine.read_text()


def test_the_targets_and_the_vllm_section_show_both_readings():
    """Issue 66: the findings' targets table and vLLM section state each target that counts
    vLLM's kernel among its candidates in both readings, side by side; on the committed H200
    data the readings differ (own layer within 1.03x: 64 of 64 with vLLM's kernel on
    moe-lab's tuned files, 47 of 64 with the workbook's own kernels alone)."""
    from moe_lab.analysis import targets as tg
    from moe_lab.analysis import vllm_compare as vc
    text = FINDINGS.read_text()
    h200 = text.split("## Targets: NVIDIA H200")[1].split("\n## ")[0]

    def row(target, reading):
        found = [ln.split(" | ") for ln in h200.splitlines()
                 if ln.startswith(f"| {target} | {reading} |")]
        assert len(found) == 1, (target, reading)
        return int(found[0][3]), int(found[0][2])  # met, points

    assert row(vc.BAND_TARGET, tg.WITH_PEERS) == (64, 64)
    assert row(vc.BAND_TARGET, tg.OWN_KERNELS) == (47, 64)
    assert row("fp8 not slower than bf16", tg.WITH_PEERS) != row(
        "fp8 not slower than bf16", tg.OWN_KERNELS)
    vllm = text.split("## vLLM's fused MoE as shipped against the workbook's own layers: "
                      "NVIDIA H200")[1].split("\n## ")[0]
    assert f"| {vc.BAND_TARGET} | {tg.OWN_KERNELS} | 64 | 47 |" in vllm
    assert "| geomean_ratio_own_only | slower_own_only | met_own_only |" in vllm


def test_a_changed_measured_number_in_the_readme_fails_the_check(tmp_path, capsys):
    """Issue 66: the README's measured numbers (how long its commands take, main.sh's noisy
    points) are checked by `findings --check` against their record: one number retyped in a
    copy of the README (its record beside it) fails, naming it; the copy as it is passes."""
    readme = tmp_path / "README.md"
    text = (Path(ROOT) / "README.md").read_text()
    (tmp_path / "data" / "timings").mkdir(parents=True)
    shutil.copy(Path(ROOT) / "data" / "timings" / "readme-commands.json",
                tmp_path / "data" / "timings")
    readme.write_text(text)
    assert main(["findings", "--check", "--readme", str(readme)]) == 0, capsys.readouterr().err
    m = re.search(r"`test\.sh` (\d+) s", text)
    readme.write_text(text.replace(m.group(0), f"`test.sh` {int(m.group(1)) + 1} s"))
    capsys.readouterr()
    assert main(["findings", "--check", "--readme", str(readme)]) == 1
    err = capsys.readouterr().err
    assert "README's measured numbers differ" in err and "test.sh s" in err, err[-2000:]
    assert "differs from what the data gives" not in err  # the findings themselves agree
