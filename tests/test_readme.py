"""The README is a manual that stays true: short, its package table lists every module of
moe_lab (and no module that is not there), every verb it names is a verb of the CLI, its
data layout names what the committed runs hold; what the data says lives in
docs/findings.md, whose every run id is a folder under data/runs/. No torch, no GPU: the
verbs are read from moe_lab/cli.py's source, the columns from the parquet schemas."""
import ast
import itertools
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
FINDINGS = ROOT / "docs" / "findings.md"
PKG = ROOT / "moe_lab"
RUNS = ROOT / "data" / "runs"
MAX_README_LINES = 260
# modules the README lists that are being written as it is (issue 22): a row may name them
# before their file lands; every module that exists must be listed all the same
EXPECTED_SOON: set[str] = set()  # modules named in the table before they land (none now)


def _section(text: str, heading: str) -> str:
    """The body of the `## heading` section (up to the next `## `)."""
    m = re.search(rf"^## {re.escape(heading)}[^\n]*\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"README has no '## {heading}' section"
    return m.group(1)


def _table_rows(body: str) -> list[list[str]]:
    """Cells of each row of the markdown tables in `body` (header and rule rows left out)."""
    rows = []
    for line in body.splitlines():
        if not line.startswith("|") or re.fullmatch(r"\|[\s|:-]+\|", line):
            continue
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows[1:] if rows else rows  # the first is the header


def _code(text: str) -> list[str]:
    """Every fenced block and inline code span of a markdown text."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
    rest = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)
    return fenced + re.findall(r"`([^`\n]+)`", rest)


def _modules_on_disk() -> set[str]:
    return {p.relative_to(PKG).as_posix() for p in PKG.rglob("*.py")
            if "__pycache__" not in p.parts}


def _modules_in_table(readme: str) -> list[str]:
    names = []
    for cells in _table_rows(_section(readme, "Package layout")):
        assert len(cells) >= 2 and cells[1], f"package row without a description: {cells}"
        found = re.findall(r"`([\w/]+\.py)`", cells[0])
        assert found, f"package row names no module: {cells[0]}"
        names += found
    return names


def _verbs() -> set[str]:
    """The verbs of moe_lab/cli.py's parser: the keys of its VERBS table, read from the
    source (importing the CLI would import every verb's module)."""
    tree = ast.parse((PKG / "cli.py").read_text())
    for node in ast.walk(tree):
        target = (node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1
                  else node.target if isinstance(node, ast.AnnAssign) else None)
        if isinstance(target, ast.Name) and target.id == "VERBS" and isinstance(node.value, ast.Dict):
            return {ast.literal_eval(k) for k in node.value.keys}
    raise AssertionError("moe_lab/cli.py has no VERBS table")


VERB_RE = re.compile(r"(?:(?<![\w.-])moe-lab|-m[ \t]+moe_lab)[ \t]+([A-Za-z][\w-]*)")


def _named_verbs(text: str) -> set[str]:
    return {m for block in _code(text) for m in VERB_RE.findall(block)}


def _expand(pattern: str) -> list[str]:
    """`a-{x,y}-b` -> [`a-x-b`, `a-y-b`] (shell brace expansion, one level per group)."""
    parts = re.split(r"\{([^{}]*)\}", pattern)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def _run_refs(findings: str) -> set[str]:
    """Run ids (or globs) findings.md names: every `data/runs/<id>` and the ids of each
    `Runs:` line (the backticked names before its first ` · `)."""
    refs = {m for m in re.findall(r"data/runs/([\w.*{},-]+)", findings)}
    for line in findings.splitlines():
        if line.startswith("Runs:"):
            head = line.split(" · ")[0]
            refs |= {r.removeprefix("data/runs/").split("/")[0]
                     for r in re.findall(r"`([^`]+)`", head)}
    return {r for r in refs if r}


# ---------------------------------------------------------------------------------------------

def test_readme_is_a_manual_not_a_lab_notebook():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"
    assert "docs/findings.md" in README.read_text()  # the findings are linked, not inlined
    assert "Waiting for a GPU" not in README.read_text()  # GPU work to do lives in the issues


def test_readme_keeps_the_two_commands_and_the_setup_they_need():
    text = README.read_text()
    for needed in ("bash scripts/main.sh", "bash scripts/test.sh",
                   "python3 -m venv .venv && . .venv/bin/activate", "MOE_LAB_DATA",
                   "--allow-root", "No ROCm machine was available to this project"):
        assert needed in text, needed


def test_package_table_lists_every_module_and_only_modules():
    listed = _modules_in_table(README.read_text())
    on_disk = _modules_on_disk()
    assert len(on_disk) > 50 and "storage/store.py" in listed  # the walk and the parse both saw something
    doubled = sorted({m for m in listed if listed.count(m) > 1})
    assert not doubled, f"listed twice: {doubled}"
    missing = sorted(on_disk - set(listed))
    assert not missing, f"modules missing from README's package table: {missing}"
    ghosts = sorted(set(listed) - on_disk - EXPECTED_SOON)
    assert not ghosts, f"README's package table names modules that do not exist: {ghosts}"


def test_the_module_check_would_catch_a_missing_row():
    """Not vacuous: a table without one row, or with a made-up one, fails the comparison."""
    readme = README.read_text()
    row = next(ln for ln in readme.splitlines() if ln.startswith("| `storage/store.py`"))
    assert "storage/store.py" in _modules_on_disk() - set(_modules_in_table(readme.replace(row + "\n", "")))
    fake = readme.replace(row, row + "\n| `no_such_module.py` | a module that is not there |")
    assert "no_such_module.py" in set(_modules_in_table(fake)) - _modules_on_disk() - EXPECTED_SOON


def test_every_verb_the_docs_name_is_a_real_verb_and_every_verb_is_documented():
    verbs = _verbs()
    assert {"sweep", "check", "report", "import-aiter"} <= verbs
    readme_verbs = _named_verbs(README.read_text())
    unknown = sorted(readme_verbs - verbs)
    assert not unknown, f"README names verbs moe-lab does not have: {unknown}"
    undocumented = sorted(verbs - readme_verbs)
    assert not undocumented, f"verbs missing from README: {undocumented}"
    if FINDINGS.exists():
        unknown = sorted(_named_verbs(FINDINGS.read_text()) - verbs)
        assert not unknown, f"docs/findings.md names verbs moe-lab does not have: {unknown}"


@pytest.mark.parametrize("snippet, found", [
    ("`moe-lab sweep --tokens 1`", {"sweep"}),
    ("```bash\nPYTHONPATH=. python -m moe_lab import-aiter  # x\n```", {"import-aiter"}),
    ("`torchrun --nproc-per-node 2 -m moe_lab sweep`", {"sweep"}),
    ("`python -m moe_lab.distributed.worker SPEC.json`", set()),
    ("`moe-lab <verb>` and `conda activate moe-lab`", set()),
    ("`moe-lab sweeep`", {"sweeep"}),
])
def test_verb_extraction(snippet, found):
    assert _named_verbs(snippet) == found


def test_findings_name_only_runs_that_exist():
    assert FINDINGS.exists(), "docs/findings.md is where the README's findings went"
    text = FINDINGS.read_text()
    refs = _run_refs(text)
    assert len(refs) > 10
    folders = {p.name for p in RUNS.iterdir() if p.is_dir()}
    absent = sorted(r for r in refs
                    if not all(any(Path(f).match(alt) for f in folders) for alt in _expand(r)))
    assert not absent, f"docs/findings.md names runs not in data/runs/: {absent}"


def test_each_finding_has_its_runs_and_date():
    """Every section of findings.md that says something (before the list of GPU work the
    2026-11-30 session left) carries a `Runs:` or `Data:` line with a date."""
    text = FINDINGS.read_text().split("\n## GPU work listed by", 1)[0]
    sections = re.split(r"^#{2,3} ", text, flags=re.M)[1:]
    assert len(sections) > 10
    for sec in sections:
        title, _, body = sec.partition("\n")
        if not body.strip():
            continue
        tagged = [ln for ln in body.splitlines() if ln.startswith(("Runs:", "Data:"))]
        assert tagged, f"findings section '{title}' names no runs"
        if all(ln == "Runs: none yet on this device" for ln in tagged):
            continue  # a device's section with nothing measured yet (its files, the work left)
        assert any(re.search(r"\b20\d\d-\d\d-\d\d\b", ln) for ln in tagged), \
            f"findings section '{title}' has no date"


def test_run_ref_expansion():
    assert _expand("h200-repeat-{a,b}-20261130") == ["h200-repeat-a-20261130", "h200-repeat-b-20261130"]
    assert _run_refs("see `data/runs/x-1/evidence/` and\nRuns: `y-2`, `z-3` · measured "
                     "2026-11-30 · its `traces/`") == {"x-1", "y-2", "z-3"}


def test_data_layout_names_what_the_committed_runs_hold():
    pq = pytest.importorskip("pyarrow.parquet")
    written = {"results.parquet": set(), "kernels.parquet": set(), "samples.parquet": set(),
               "manifest.json": set()}
    for run in RUNS.iterdir():
        for name in written:
            path = run / name
            if not path.exists():
                continue
            if name.endswith(".json"):
                m = json.loads(path.read_text())
                written[name] |= set(m) | set(m.get("environment") or {})
            else:
                written[name] |= set(pq.read_schema(path).names)
    rows = {cells[0].strip("`"): cells[1] for cells in _table_rows(_section(README.read_text(), "Data layout"))}
    assert set(written) <= set(rows), f"layout table lacks {sorted(set(written) - set(rows))}"
    source = " ".join(p.read_text() for p in PKG.rglob("*.py"))

    def in_code(col):  # a column no committed run has yet (fp8 rows): the code writes it
        return re.search(rf"""["']{col}["']|\b{col}=""", source) is not None
    for name, cols in written.items():
        named = {c.strip() for span in re.findall(r"`([^`]+)`", rows[name])
                 for c in span.split(",") if re.fullmatch(r"\s*[a-z_][a-z0-9_]*\s*", c)}
        assert named, name
        unknown = sorted(c for c in named - cols if not in_code(c))
        assert not unknown, f"README's {name} row names what no run or module writes: {unknown}"
    for cell in rows:  # every file of the layout is one the package writes
        for f in re.findall(r"([a-z_]+)\.(?:parquet|json)\b", cell):
            assert f'"{f}' in source or f"'{f}" in source, f"nothing in moe_lab writes {f}"


def test_readme_has_no_date_and_no_dated_status():
    """The README is a manual: what the data says, and when it was measured, is in the
    generated docs/findings.md (statuses dated by hand drifted from the data)."""
    text = README.read_text()
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b", text)
    assert "docs/findings.md" in text and "moe-lab findings" in text


def test_the_numbers_the_readme_keeps_are_the_codes():
    """The README states no measured number (those are in the generated findings); the
    few it keeps are constants of the code, checked here: the correctness limits and the
    tune search's token keys."""
    from moe_lab.measuring.correctness import THRESHOLDS
    from moe_lab.measuring.tuning import TUNE_TOKENS
    text = " ".join(README.read_text().split())
    m = re.search(r"under (\S+) bf16, (\S+) fp16, (\S+) fp32, (\S+) fp8", text)
    assert m, "the correctness limits sentence"
    assert [float(x) for x in m.groups()] == [THRESHOLDS[d] for d in
                                              ("bf16", "fp16", "fp32", "fp8-block128")]
    m = re.search(r"at the (\d+) token keys", text)
    assert m and int(m[1]) == len(TUNE_TOKENS)


WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6}


def test_the_other_constants_the_readme_states_are_the_codes():
    """The verify margin ('over 2% faster'), the noisy mark ('p10-p90 over 10% of the
    median'), the seed models ('the four seed models'), torch-fp8's row padding ('pads
    rows to 16') and compare's interval ('bootstrap 95%'): each the constant the code
    uses, not a copy that can drift from it."""
    from moe_lab.backends.torch_fp8 import ALIGN
    from moe_lab.core.constants import VERIFY_MARGIN
    from moe_lab.storage.vocabulary import NOISE_LIMIT
    from moe_lab.core.problems import SEED_MODELS
    text = " ".join(README.read_text().split())
    m = re.search(r"any candidate over (\d+)% faster than the committed winner", text)
    assert m and int(m[1]) == round(100 * (VERIFY_MARGIN - 1))
    m = re.search(r"Noisy points \(p10-p90 over (\d+)% of the median\)", text)
    assert m and int(m[1]) == round(100 * NOISE_LIMIT)
    seeds = re.findall(r"the (\w+) seed models", text)
    assert seeds and {WORDS[w] for w in seeds} == {len(SEED_MODELS)}
    m = re.search(r"`torch-fp8` pads rows to (\d+) \(cuBLASLt\)", text)
    assert m and int(m[1]) == ALIGN
    from moe_lab.analysis.compare import CONFIDENCE  # compare's interval
    m = re.search(r"B/A ratio of medians with a bootstrap (\d+)% interval", text)
    assert m and int(m[1]) == round(100 * CONFIDENCE)


def test_every_count_of_the_tuning_keys_is_the_codes():
    """Each '<n> keys' the README states (the search's keys, the files that hold them) is
    len(TUNE_TOKENS), and 'the published H200 tunings' <n> and <m>' are the published keys
    and the one key added to them."""
    from moe_lab.core.constants import PUBLISHED_H200_KEYS, TUNE_TOKENS
    text = " ".join(README.read_text().split())
    counts = re.findall(r"\b(\d+) (?:token )?keys\b", text)
    assert len(counts) >= 3 and {int(n) for n in counts} == {len(TUNE_TOKENS)}, counts
    m = re.search(r"the published H200 tunings' (\d+) and (\d+)", text)
    assert m and (int(m[1]), int(m[2])) == (len(PUBLISHED_H200_KEYS), TUNE_TOKENS[-1])
    assert TUNE_TOKENS == PUBLISHED_H200_KEYS + (TUNE_TOKENS[-1],)


def test_the_gpu_and_versions_the_readme_names_are_the_manifests():
    """'GPU numbers are from one NVIDIA H200 and one NVIDIA H100 80GB HBM3 (torch T, triton R,
    amd-aiter A ... where a run loads them ...)': the committed runs measured on a GPU are of
    exactly those devices (a device's data committed without the README naming it fails
    here), with those versions; aiter's is that one or none (a run that did not load it)."""
    text = " ".join(README.read_text().split())
    m = re.search(r"GPU numbers are from (one .+?) \(torch (\S+), triton (\S+), "
                  r"amd-aiter (\S+) ", text)
    assert m, "the sentence naming the GPUs and versions"
    named = {d.removeprefix("one ") for d in m[1].split(" and ")}
    gpu = [json.loads(p.read_text()).get("environment") or {} for p in RUNS.glob("*/manifest.json")]
    gpu = [e for e in gpu if e.get("device_name") and e["device_name"] not in ("cpu", "x86_64")]
    assert gpu and {e["device_name"] for e in gpu} == named
    assert {e["torch"] for e in gpu} == {m[2].replace("2.11+", "2.11.0+")}
    assert all(e["triton"].startswith(m[3]) for e in gpu)
    assert {e["aiter"] for e in gpu} - {None} == {m[4]}


def test_the_repeatability_evidence_readme_states_what_its_csvs_hold():
    """data/runs/h200-seed4-20261129/evidence/README.md: every spread of its table is its
    folder's summary CSV's spread_pct (as shown, to the digits shown), and the five
    consecutive DeepSeek eager calls of lease d are that CSV's medians in order."""
    import re

    import pandas as pd
    ev = ROOT / "data" / "runs" / "h200-seed4-20261129" / "evidence"
    text = (ev / "README.md").read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| `")]
    assert len(rows) == 4
    order = ["deepseek-r1", "qwen3-235b-a22b", "llama4-scout-16e"]
    for ln in rows:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        folder = cells[0].split("`")[1].rstrip("/")
        summary = pd.read_csv(ev / folder / "repeatability_summary.csv")
        for mode, cell in (("eager", cells[4]), ("graph", cells[5])):
            shown = re.findall(r"[\d.]+", cell)
            assert len(shown) == 3, cell
            for model, s in zip(order, shown):
                got = summary[(summary["model"] == model) & (summary["mode"] == mode)]["spread_pct"]
                digits = len(s.split(".")[1]) if "." in s else 0
                assert f"{float(got.iloc[0]):.{digits}f}" == s, (folder, mode, model, s, float(got.iloc[0]))
    calls = re.search(r"five\s+consecutive calls: ([\d, ]+) us", text)[1]
    raw = pd.read_csv(ev / "lease-20261129-d" / "repeatability.csv")
    ds = raw[(raw["model"] == "deepseek-r1") & (raw["mode"] == "eager")].sort_values("rep")
    assert [int(x) for x in calls.split(", ")] == [round(v) for v in ds["median_us"]]


def test_the_times_the_readme_states_are_the_committed_records():
    """How long the two commands, the notebook API's block and `report` take, what they
    install and how many of main.sh's CPU points are noisy, are the numbers of
    data/timings/readme-commands.json (tests/readme_timings.py measured them on a fresh
    clone; moe_lab.findings.readme, which `findings --check` runs): a changed record or a
    retyped number fails here."""
    import json

    from moe_lab.findings import readme
    assert readme.stated(ROOT / "README.md") is not None, "the README's sentence is gone"
    assert readme.disagreements(ROOT / "README.md") == []
    rec = json.loads((ROOT / "data" / "timings" / "readme-commands.json").read_text())
    text = (ROOT / "README.md").read_text()
    assert all(c["command"] in text for c in rec["commands"] if c["name"] not in ("report", "examples"))


def test_the_timed_example_block_is_the_readmes():
    """What readme_timings times as the examples is the README's block, and that block
    names only a model and backend a CPU runs (so the record is of a block anyone can run)."""
    import sys
    sys.path.insert(0, str(ROOT / "tests"))
    import readme_timings as rt
    block = rt.example_block(ROOT / "README.md")
    assert "ml.measure(" in block and "ml.profile(" in block
    code = [ln.split("#")[0] for ln in block.splitlines()]
    assert not any("deepseek-r1" in ln or "aiter-triton" in ln for ln in code), block
