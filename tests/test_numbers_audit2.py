"""Numbers the workbook states by hand, each held to the code or data it states (audit 2).

Each test reads the text (README.md, a notebook's committed JSON, a --help, a figure's or a
generated document's words) and compares every number it states with the constant or the
committed data it comes from, so a value changed in one place and not the other fails;
each docstring names the drift it catches. No torch, no GPU, no notebook executed."""
from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
NOTEBOOKS = ROOT / "notebooks"


def folded(text: str) -> str:
    return " ".join(text.split())


def readme() -> str:
    return folded(README.read_text())


def said(text: str, pattern: str) -> re.Match:
    m = re.search(pattern, text)
    assert m, f"{pattern!r} not in: {text[:300]}"
    return m


def markdown(nb: str, heading: str) -> str:
    """The markdown cell of notebooks/<nb> holding `heading`, whitespace folded."""
    cells = json.loads((NOTEBOOKS / nb).read_text())["cells"]
    found = [folded("".join(c["source"])) for c in cells
             if c["cell_type"] == "markdown" and heading in "".join(c["source"])]
    assert len(found) == 1, f"{nb}: {len(found)} markdown cells hold {heading!r}"
    return found[0]


def code(nb: str) -> str:
    """Every code cell of notebooks/<nb>, joined."""
    cells = json.loads((NOTEBOOKS / nb).read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


# --- the verbs' defaults ------------------------------------------------------------------

def _main_job(text: str) -> dict:
    """What the README says the main job's sweep measures on a CPU and on a GPU."""
    m = said(text, r"on a CPU the backends that run there on ([\w.,-]+), TP(\d+), (\d+)\.\.(\d+) "
                   r"tokens, (\w+); with a GPU the (\w+) seed models at TP(\d+) and TP(\d+)\+EP(\d+), "
                   r"(\d+)\.\.(\d+) tokens, (\w+) and (\w+)\.")
    return dict(cpu_models=tuple(m[1].split(",")), cpu_tp=int(m[2]), cpu_tokens=f"{m[3]}-{m[4]}",
                cpu_modes=m[5], gpu_seeds=m[6], gpu_tp={int(m[7]), int(m[8])},
                gpu_ep=f"1,{m[9]}", gpu_tokens=f"{m[10]}-{m[11]}", gpu_modes=f"{m[12]},{m[13]}")


def test_the_main_jobs_sweep_the_readme_describes_is_the_sweeps_defaults():
    """README: 'on a CPU ... on qwen3-30b-a3b, TP8, 1..64 tokens, eager; with a GPU the four
    seed models at TP8 and TP8+EP8, 1..8192 tokens, eager and graph': each is the constant
    `moe-lab sweep` falls back on (core.constants, options.TP_DEFAULT). Catches a default
    changed in the code (e.g. SWEEP_TOKENS['cpu'] = '1-128') with the README left behind."""
    from moe_lab.commands.options import TP_DEFAULT
    from moe_lab.core import constants as c
    from moe_lab.core.problems import SEED_MODELS
    got = _main_job(readme())
    assert got["cpu_models"] == c.CPU_MODELS
    assert got["cpu_tp"] == TP_DEFAULT and got["gpu_tp"] == {TP_DEFAULT}
    assert got["cpu_tokens"] == c.SWEEP_TOKENS["cpu"] and got["gpu_tokens"] == c.SWEEP_TOKENS["gpu"]
    assert got["cpu_modes"] == c.SWEEP_MODES["cpu"] and got["gpu_modes"] == c.SWEEP_MODES["gpu"]
    assert got["gpu_ep"] == c.EP_DEFAULT["gpu"]
    assert ["two", "three", "four", "five", "six"].index(got["gpu_seeds"]) + 2 == len(SEED_MODELS)


def test_the_main_job_check_would_catch_a_drifted_readme():
    """Not vacuous: the README's sentence with 1..128 for the CPU reads as another default."""
    from moe_lab.core import constants as c
    bad = readme().replace("TP8, 1..64 tokens", "TP8, 1..128 tokens")
    assert _main_job(bad)["cpu_tokens"] != c.SWEEP_TOKENS["cpu"]


def test_the_verbs_defaults_are_defined_once_and_their_help_states_them():
    """sweep/check/tune: the CPU model, the token grids, the modes, the EP sizes and the
    compile workers are read from core.constants both by the help and by run(); no verb
    module types them again (a literal 'qwen3-30b-a3b', '1-8192' or '1,8' default in a
    command's code is a second definition that can drift from its --help)."""
    import ast

    from moe_lab.core import constants as c
    for verb in ("sweep", "check", "tune", "options"):
        src = (ROOT / "moe_lab" / "commands" / f"{verb}.py").read_text()
        tree = ast.parse(src)
        lits = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
        for v in (*c.CPU_MODELS, *c.SWEEP_TOKENS.values(), *c.SWEEP_MODES.values(),
                  *c.EP_DEFAULT.values()):
            if v in ("1", "eager"):
                continue  # too common a word to be a definition
            assert v not in lits, f"commands/{verb}.py types {v!r}: read it from core.constants"
    import subprocess
    import sys
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    out = folded(subprocess.run([sys.executable, "-m", "moe_lab", "sweep", "--help"],
                                capture_output=True, text=True, cwd=ROOT, env=env).stdout)
    assert (f"(default: {c.SWEEP_TOKENS['gpu']} on GPU, {c.SWEEP_TOKENS['cpu']} on CPU)" in out)
    assert f"(default: {c.SWEEP_MODES['gpu']} on GPU, {c.SWEEP_MODES['cpu']} on CPU)" in out
    assert f"(default: {c.EP_DEFAULT['gpu']} on a GPU, {c.EP_DEFAULT['cpu']} on a CPU)" in out
    spare, most = map(int, said(out, r"the cores but (\d+), at most (\d+), on a GPU").groups())
    assert (spare, most) == (c.COMPILE_WORKERS_SPARE, c.COMPILE_WORKERS_MAX)


def test_the_compile_workers_default_is_the_constants(monkeypatch):
    """default_compile_workers takes the cores but COMPILE_WORKERS_SPARE, at most
    COMPILE_WORKERS_MAX (the numbers its --help states): on 64 cores the cap, on 6 the
    cores less the spare, on a CPU none."""
    import os

    from moe_lab.core import constants as c
    from moe_lab.measuring import tuning_compile as tc
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert tc.default_compile_workers("cuda") == c.COMPILE_WORKERS_MAX
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert tc.default_compile_workers("cuda") == 6 - c.COMPILE_WORKERS_SPARE
    assert tc.default_compile_workers("cpu") == 0
