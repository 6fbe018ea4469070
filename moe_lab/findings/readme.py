"""The README's measured numbers against the record they come from: how long its two
commands, its notebook-API block and `report` take on a fresh clone, what they install and
how many of `main.sh`'s CPU points are noisy (data/timings/readme-commands.json, measured by
tests/readme_timings.py). `moe-lab findings --check` runs it beside the findings' own check:
a retyped number in the README, or a record measured again, disagrees until both say the
same."""
from __future__ import annotations

import json
import re
from pathlib import Path

SENTENCE = re.compile(
    r"On a fresh clone on a (\d+)-core CPU machine \(`data/timings/readme-commands\.json`[^)]*\): "
    r"`main\.sh` (\d+) s, adding (\d+) MB to the virtualenv; `test\.sh` (\d+) s, (\d+) MB more; "
    r"`python -m moe_lab report` (\d+) s\.(?: The notebook API's block below: (\d+) s; "
    r"`main\.sh`'s CPU sweep: (\d+) of (\d+) points noisy\.)?")
FIELDS = ("CPUs", "main.sh s", "main.sh MB", "test.sh s", "test.sh MB", "report s",
          "API block s", "noisy points", "points")


def root() -> Path:
    """The checkout (the README's folder)."""
    return Path(__file__).resolve().parents[2]


def record_path(readme: Path) -> Path:
    return Path(readme).parent / "data" / "timings" / "readme-commands.json"


def stated(readme: Path) -> dict | None:
    """The README's numbers, by FIELDS (None: a number it does not state); None when its
    sentence is gone or reworded."""
    m = SENTENCE.search(Path(readme).read_text())
    return dict(zip(FIELDS, (None if g is None else int(g) for g in m.groups()))) if m else None


def measured(record: Path) -> dict:
    """The record's numbers, rounded as the README states them, by FIELDS."""
    rec = json.loads(Path(record).read_text())
    by = {c["name"]: c for c in rec["commands"]}
    return dict(zip(FIELDS, (
        rec["machine"]["cpus"], round(by["main"]["wall_s"]), round(by["main"]["venv_added_mb"]),
        round(by["test"]["wall_s"]), round(by["test"]["venv_added_mb"]),
        round(by["report"]["wall_s"]),
        round(by["examples"]["wall_s"]) if "examples" in by else None,
        by["main"].get("noisy"), by["main"].get("points"))))


def disagreements(readme: Path | None = None) -> list[str]:
    """One line per number the README states that its record does not say, or the record
    holds and the README leaves out (empty: they agree)."""
    readme = Path(readme) if readme is not None else root() / "README.md"
    have = stated(readme)
    if have is None:
        return [f"{readme}: the sentence on how long its commands take (On a fresh clone on a "
                "N-core CPU machine ...) is gone or reworded"]
    record = record_path(readme)
    if not record.is_file():
        return [f"{readme}: states measured times, but {record} is not there"]
    want = measured(record)
    return [f"{readme}: {k} " + ("not stated" if have[k] is None else str(have[k]))
            + f", the record {record.name} says " + ("nothing" if want[k] is None else str(want[k]))
            for k in FIELDS if have[k] != want[k]]
