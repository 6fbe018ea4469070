"""`moe-lab VERB --help` answers without importing torch or pandas (3-8 s before: every
verb's module, and through it torch and pandas, was imported to build the parser). Read
from `python -X importtime`, never from a clock: the import list is the property."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from moe_lab.cli import VERBS

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "pandas")


def _help(*words: str) -> tuple[int, str, set[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "moe_lab", *words, "--help"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    # importtime lines: "import time: self | cumulative | <indent>name"
    mods = {ln.rsplit("|", 1)[1].strip() for ln in r.stderr.splitlines()
            if ln.startswith("import time:") and ln.count("|") == 2}
    return r.returncode, r.stdout, mods


@pytest.mark.parametrize("words", [(), *[(v,) for v in VERBS],
                                   ("claims", "check"), ("claims", "implications")])
def test_help_imports_neither_torch_nor_pandas(words):
    code, out, mods = _help(*words)
    assert code == 0, out
    assert "moe_lab.cli" in mods  # the probe sees our imports: an empty set proves nothing
    assert not [m for m in HEAVY if m in mods], f"moe-lab {' '.join(words)} --help imported {[m for m in HEAVY if m in mods]}"
    assert out.startswith("usage: moe-lab")


def test_help_still_lists_every_verb_and_each_verbs_options():
    _, top, _ = _help()
    for verb, (_, line) in VERBS.items():
        assert verb in top and line[:40] in " ".join(top.split()), verb
    _, sweep, _ = _help("sweep")
    for opt in ("--models", "--tokens", "--backends", "--modes", "--dtype", "--device",
                "--data-dir", "--warmup-ms", "--nproc"):
        assert opt in sweep, opt
    assert "fp8-block128" in sweep  # --dtype's choices, the dtypes with a correctness limit
    _, tune, _ = _help("tune")
    assert "1,2,4,8,16,24,32,48,64,96,128,256,512,1024,1536,2048,3072,4096,8192" in "".join(tune.split())
    from moe_lab.core.constants import CPU_MODELS, SEED_MODELS
    for verb in ("check", "sweep", "tune"):  # the defaults named are the ones the verb takes
        _, out, _ = _help(verb)
        text = re.sub(r"-\s+", "-", " ".join(out.split()))  # argparse wraps at hyphens
        m = re.search(r"default: the seed models on a GPU, ([\w.,-]+); ([\w.,-]+) on a CPU", text)
        assert m and (tuple(m[1].split(",")), tuple(m[2].split(","))) == (
            tuple(SEED_MODELS), CPU_MODELS), (verb, m)
    from moe_lab.backends._aiter_dispatch import CU_GPU
    _, prof, _ = _help("profile")  # --cu-num's examples are the dispatch's CU table
    cus = re.search(r"the GPU's CU count \(([^)]*)\)", " ".join(prof.split()))[1]
    pairs = re.findall(r"(\d+) (MI[\w/]+)", cus)
    assert len(pairs) == 3 and all(set(g.split("/")) <= set(CU_GPU[int(n)].split("/"))
                                   for n, g in pairs), pairs
    from moe_lab.core.constants import PUBLISHED_H200_KEYS, TUNE_TOKENS
    m = re.search(r"default: the (\d+) keys of the published tunings for the H200 and (\d+)",
                  " ".join(tune.split()))
    assert m and (int(m[1]), int(m[2])) == (len(PUBLISHED_H200_KEYS), TUNE_TOKENS[-1])


def test_help_constants_are_the_owners_values():
    """The torch-free copies configure reads are the values the measuring code uses."""
    from moe_lab.importers import aiter_tables
    from moe_lab.measuring import correctness, tuning
    from moe_lab.core import constants, problems
    from moe_lab.measuring.tuning_search import SearchPlan
    assert sorted(constants.DTYPE_NAMES) == sorted(correctness.THRESHOLDS) == sorted(problems.DTYPES)
    assert tuning.TUNE_TOKENS == constants.TUNE_TOKENS and len(tuning.TUNE_TOKENS) == 19
    assert constants.TUNE_TOKENS == constants.PUBLISHED_H200_KEYS + (8192,)
    assert SearchPlan().rungs == constants.SEARCH_RUNGS == (1 / 16, 1 / 4, 1.0)
    assert aiter_tables.MAX_ERR == 0.05 and tuning.VERIFY_MARGIN == 1.02
    from moe_lab.measuring import compile as compile_mod
    assert compile_mod.COMPILE_BUDGET_S is constants.COMPILE_BUDGET_S  # one definition
    _, sweep, _ = _help("sweep")  # its help states it from there, not a typed copy
    assert f"(default {constants.COMPILE_BUDGET_S:g})" in " ".join(sweep.split())


def test_the_config_and_backend_help_name_every_tunable_backend():
    """`--config` (sweep, check) said "launch configurations of tunable backends
    (aiter-triton)" and `tune --backend` "a backend with tunable configurations": a user
    reproducing the `vllm tuned` rows read that vllm takes no tuned files. The names are
    the registry's tunable backends (constants.TUNABLE_BACKENDS, torch-free for --help)."""
    from moe_lab import backends
    from moe_lab.core.constants import TUNABLE_BACKENDS
    tunable = {b.name for b in backends.all_backends() if b.tunable}
    assert set(TUNABLE_BACKENDS) == tunable
    for verb, opt in (("sweep", "--config"), ("check", "--config"), ("tune", "--backend")):
        _, out, _ = _help(verb)
        text = re.sub(r"(?<=\w)- (?=\w)", "-", " ".join(out.split()))  # argparse wraps at hyphens
        entry = text[text.index("options:"):]
        entry = entry[entry.index(opt + " "):]  # the option's own entry, its help first
        said = re.search(r"tunable[^(]*\(([\w, -]+)\)", entry)
        assert said, (verb, text[:2000])
        assert {s.strip() for s in said[1].split(",")} == tunable, (verb, said[1])
