"""What `moe-lab report` wrote, read as the report tests read it (tests/test_report_run.py,
tests/test_report_first_look.py): a notebook's exported page as text, the run line it
shows, a run's row counts, a refusal line, and the runs a figure draws rows from."""
import html
import re
from pathlib import Path

import pandas as pd

SEED = "h200-seed4-20261129"  # eager and graph, TP8 and TP8+EP8, four models
MAX_ENTRIES = 12  # a legend a reader can take in


def page(folder: Path, name: str) -> str:
    """The text of a notebook's exported page (tags stripped)."""
    text = (folder / f"{name}.html").read_text()
    return html.unescape(re.sub(r"<[^>]+>", "", text))


def shown(text: str) -> tuple[str, int, int]:
    m = re.search(r"^run (\S+): (\d+) points \((\d+) ok\)", text, re.M)
    assert m, text[:800]
    return m[1], int(m[2]), int(m[3])


def counts(run_dir: Path) -> tuple[int, int]:
    res = pd.read_parquet(run_dir / "results.parquet")
    return len(res), int((res["status"] == "ok").sum())


def refusal(text: str, name: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.startswith(f"refused {name}:")]
    assert len(lines) == 1, text
    return lines[0]


def expected_runs(run: str, given: str, name: str, d: dict, text: str) -> set[str]:
    """The runs a figure draws rows from, found from what it is (not from its footer)."""
    from moe_lab.plots import devices as dv
    from moe_lab.plots import fp8
    from moe_lab.storage.store import open_run
    texts = " ".join(" ".join(d["texts"]).split())  # a footer wraps where its length falls
    if "no run (predicted)" in texts:
        return set()  # predicted floors: no rows
    if name.startswith("04_reproduce_claims") and "saving = (mean TPOT" not in texts:
        assert "source: data/claims/sources/" in texts or "sources: " in texts, texts
        return set()  # the PRs' numbers
    if "saving = (mean TPOT" in texts:  # the implications: the run of each measured bar
        return set(re.findall(r"^\S+: measured_us \S+ \(\S+, run (\S+)\)$", text, re.M)) - {"-"}
    if "aiter's tuner" in texts:  # devices side by side: the run given and AMD's tables
        return {Path(run).name, *dv.imported_runs()}
    if "bf16 / fp8" in " ".join(e["label"] for leg in d["legends"] for e in leg["entries"]):
        cmp = fp8.fp8_vs_bf16(fp8.comparison_rows(open_run(given))[0])
        return set(cmp["fp8_run"].dropna()) | set(cmp.get("bf16_run", pd.Series()).dropna())
    if "graph median = kernels + gaps" in texts:  # the ledger: the runs with phases
        ledger = re.search(r"^ledger runs: (.*)$", text, re.M)[1].split(", ")
        named = set(re.findall(r"[a-z0-9][a-z0-9-]*-\d{8}", texts))
        assert named and named <= set(ledger), (named, ledger)
        return named
    want = {Path(run).name}
    if "also run h200-seed4-20261129" in texts:  # glue before/after: the old run too
        want.add(SEED)
    return want
