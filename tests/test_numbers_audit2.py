"""Numbers the workbook states by hand, each held to the code or data it states (audit 2).

Each test reads the text (README.md, a notebook's committed JSON, a --help, a figure's or a
generated document's words) and compares every number it states with the constant or the
committed data it comes from, so a value changed in one place and not the other fails;
each docstring names the drift it catches. No torch, no GPU, no notebook executed."""
from __future__ import annotations

import json
from moe_lab.analysis import tuned as rq
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


# --- the claims -----------------------------------------------------------------------------

WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}


def _registry() -> dict:
    return json.loads((ROOT / "data" / "claims" / "registry.json").read_text())


def test_every_count_of_the_prs_is_the_registrys_sources():
    """'two vLLM pull requests' (README), 'the two PRs' (README's package table) and 'the
    two upstream PRs' (notebook 04) count the registry's sources: a third PR added to
    data/claims/registry.json fails here until the text says three."""
    n = len(_registry()["sources"])
    words = "|".join(WORDS)
    counts = re.findall(rf"\b({words}) (?:vLLM pull requests|PRs)\b", readme())
    counts += re.findall(rf"the ({words}) upstream PRs",
                         markdown("04_reproduce_claims.ipynb", "# 04 · Reproduce the claims"))
    assert len(counts) >= 3 and {WORDS[w] for w in counts} == {n}, counts


def test_the_claims_gpu_the_help_and_notebook_04_name_is_the_registrys():
    """`claims implications --gpu`'s 'default: the claim's GPU, mi300x' and notebook 04's
    `gpu = None  # ... each claim's (mi300x)`: CLAIM_GPU is the fallback implications uses,
    and every performance configuration of the registry that names a GPU names it (a claim
    moved to another GPU in the registry fails here)."""
    import subprocess
    import sys

    from moe_lab.core.constants import CLAIM_GPU
    perf = [c for c in _registry()["configs"].values() if "concurrency" in c]
    assert perf and {c.get("gpu", CLAIM_GPU) for c in perf} == {CLAIM_GPU}
    out = folded(subprocess.run([sys.executable, "-m", "moe_lab", "claims", "implications",
                                 "--help"], capture_output=True, text=True, cwd=ROOT,
                                env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}).stdout)
    assert said(out, r"default: the claim's GPU, (\w+)\)")[1] == CLAIM_GPU
    assert said(code("04_reproduce_claims.ipynb"), r"gpu = None .*each claim's \((\w+)\)")[1] == CLAIM_GPU


def test_the_parity_rule_is_one_constant_and_its_text_says_it():
    """check_parity passes a pair exactly PARITY_SE combined se apart and fails one just
    beyond, and its verdict states PARITY_SE (the text said '2 se' beside a literal 2: a
    changed rule kept the old text)."""
    import math

    from moe_lab.claims import verdicts as v
    se = math.hypot(0.01, 0.01)
    ok = v.check_parity(dict(baseline=0.5, new=0.5 + v.PARITY_SE * se * 0.999,
                             baseline_stderr=0.01, new_stderr=0.01))
    bad = v.check_parity(dict(baseline=0.5, new=0.5 + v.PARITY_SE * se * 1.001,
                              baseline_stderr=0.01, new_stderr=0.01))
    assert ok.status == "pass" and f"within {v.PARITY_SE:g} se" in ok.reason
    assert bad.status == "fail" and f"more than {v.PARITY_SE:g} combined se" in bad.reason


def test_the_accuracy_figure_states_the_parity_bars_and_the_registrys_tp():
    """Notebook 04's GSM8K figure: its x label's '± N stderr' is PARITY_SE, each error bar
    is PARITY_SE stderr wide, and its footer's 'lm_eval, TP8' is the accuracy configurations'
    tp (the footer typed 'TP8': a registry of TP4 runs would still have said TP8)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from moe_lab.claims import figures
    from moe_lab.claims.registry import load_registry
    from moe_lab.claims.verdicts import PARITY_SE
    reg = load_registry()
    acc = [c for c in reg["claims"] if c["kind"] == "accuracy"]
    fig = figures.plot_accuracy(reg)
    try:
        labels = {ax.get_xlabel() for ax in fig.axes}
        assert labels == {f"exact match (± {PARITY_SE:g} stderr)"}
        foot = " ".join(t.get_text() for t in fig.texts)
        tps = {int(x) for x in re.findall(r"TP(\d+)", said(foot, r"lm_eval, (.*)$")[1])}
        assert tps == {reg["configs"][c["config"]]["tp"] for c in acc}
        bars = [c for c in fig.axes[0].containers]
        widths = [float(seg[0][1, 0] - seg[0][0, 0]) for b in bars
                  for seg in [b.lines[2][0].get_segments()] if len(seg)]
        some = next(c for c in acc if c["stderr"])
        assert any(abs(w - 2 * PARITY_SE * some["stderr"]) < 1e-9 for w in widths)
    finally:
        plt.close(fig)


# --- the findings' words and the analysis constants they state --------------------------------

FINDINGS = ROOT / "docs" / "findings.md"


def findings() -> str:
    return folded(FINDINGS.read_text())


def test_the_noise_words_state_the_quantile_and_the_confidence_the_code_uses():
    """The noise band is the QUANTILE of |ln B/A| and compare's interval is CONFIDENCE: the
    findings' 'the noisiest A/A' pair's 0.95 quantile' and the noise files' `what` ('the
    0.95 quantile', 'bootstrap 95% interval') state them (both were typed: a QUANTILE of 0.9
    kept saying 0.95). compare.CONFIDENCE is core.constants' one value."""
    from moe_lab.analysis import compare, noise
    from moe_lab.core.constants import BOOTSTRAP_CONFIDENCE
    assert compare.CONFIDENCE == BOOTSTRAP_CONFIDENCE
    assert float(said(findings(), r"noisiest A/A' pair's ([\d.]+) quantile")[1]) == noise.QUANTILE
    assert float(said(noise.WHAT, r"the ([\d.]+) quantile")[1]) == noise.QUANTILE
    assert int(said(noise.WHAT, r"bootstrap (\d+)% interval")[1]) == round(100 * BOOTSTRAP_CONFIDENCE)


def _shape_table(ratios):
    import pandas as pd
    n = len(ratios)
    return pd.DataFrame(dict(run_id="r", model="deepseek-r1", sharding="TP8", tp=8, ep=1,
                             dtype="bf16", mode="graph", tokens=[2 ** i for i in range(n)],
                             best="aiter-triton tuned", ratio=ratios, slower=False,
                             measured_at="2026-12-01T00:00:00"))


def test_the_vllm_goal_reads_the_geomean_targets_limit(monkeypatch):
    """by_shape's `met` took `gm <= 1.0`, a second copy of the geomean target's limit: now
    vllm_compare.GEOMEAN, the record's; a shape at geomean 1.01 misses it and meets a limit
    of 1.02 (the constant is what decides). The findings' 'geomean at or below 1.00' is it."""
    from moe_lab.analysis import targets as tg, vllm_compare as vc
    rec = [t for t in tg.TARGETS if t.metric == "own_over_vllm_geomean"]
    assert len(rec) == 1 and vc.GEOMEAN == rec[0].limit
    t = _shape_table([1.01, 1.01])
    assert not vc.by_shape(t)["met"].iloc[0]
    monkeypatch.setattr(vc, "GEOMEAN", 1.02)
    assert vc.by_shape(t)["met"].iloc[0]
    monkeypatch.undo()
    assert float(said(findings(), r"geomean at or below ([\d.]+)\) is met")[1]) == vc.GEOMEAN


def test_the_tuned_roof_token_count_is_one_constant_and_the_texts_state_it():
    """'The tuned layer's % of roof from 256 tokens': the findings' heading and sentence and
    notebook 05's section 8 state tuned.FROM_TOKENS, roof_from's default (the text and
    the default were typed apart)."""
    import inspect

    from moe_lab.analysis import tuned as tf
    from moe_lab.analysis.tuned import roof as tuned_roof
    assert tf.FROM_TOKENS is tuned_roof.FROM_TOKENS
    assert inspect.signature(tuned_roof.roof_from).parameters["tokens"].default == tf.FROM_TOKENS
    text = markdown("05_tuning.ipynb", "## 8. The tuned layer's % of roof")
    said_nb = {int(x) for x in re.findall(r"from (\d+) tokens", text)}
    said_doc = {int(x) for x in re.findall(r"% of roof from (\d+) tokens|over the points above "
                                           r"from (\d+) tokens", findings()) for x in x if x}
    assert said_nb == said_doc == {tf.FROM_TOKENS}, (said_nb, said_doc)


def test_the_issues_that_ask_for_tuned_files_are_requireds():
    """'Per shape that issues 38 and 41 ask a tuned file for': the findings (generated), per
    device, name the issues of that device's required shapes (tuned.required_for: the
    H200's REQUIRED, another GPU's REQUIRED_63), and notebook 05's section 6 those of
    REQUIRED (the notebook's words are typed: a REQUIRED shape of a new issue fails here
    until they name it)."""
    from moe_lab.analysis.tuned import REQUIRED, required_for
    text = FINDINGS.read_text()
    found = re.findall(r"^## Tuned files against the token grid: (.+)\n(?:.*\n)*?Per shape "
                       r"that issues? ([\d and,]+) asks? a tuned file for", text, re.M)
    assert found and len(found) == text.count("## Tuned files against the token grid: ")
    for device, doc in found:
        assert {int(x) for x in re.findall(r"\d+", doc)} == {r[0] for r in required_for(device)}
    nb = said(markdown("05_tuning.ipynb", "## 6. The tuned files against the token grid"),
              r"Per shape that issues ([\d and,]+) ask a tuned file for")[1]
    assert {int(x) for x in re.findall(r"\d+", nb)} == {r[0] for r in REQUIRED}, nb


# --- the points and runs a notebook's headings name ------------------------------------------

def _names(text: str) -> str:
    return text.lower()


def test_05_the_glue_point_and_the_before_run_are_the_codes():
    """Notebook 05: '### torch-grouped before and after its bf16 glue, DeepSeek-R1 TP8, 4096
    tokens' and 'Before: `h200-seed4-20261129`' are tuning.GLUE_POINT and GLUE_BEFORE_RUN,
    and glue_before_after takes its point from GLUE_POINT (its own defaults were a second
    copy, model/sharding/tokens typed again: GLUE_POINT moved to 8192 tokens left the
    comparison at 4096)."""
    import inspect

    from moe_lab.analysis import tuning as tn
    text = markdown("05_tuning.ipynb", "before and after its bf16 glue")
    b, model, shard, tokens = said(text, r"### ([\w-]+) before and after its bf16 glue, ([\w.-]+) "
                                         r"(TP\d+(?:\+EP\d+)?), (\d+) tokens").groups()
    p = tn.GLUE_POINT
    assert (b, _names(model), shard, int(tokens)) == (p["backend"], p["model"], p["sharding"],
                                                     p["tokens"])
    assert said(text, r"Before: `([\w.-]+)`")[1] == tn.GLUE_BEFORE_RUN
    params = inspect.signature(tn.glue_before_after).parameters
    assert set(params) == {"after_run", "before_run", "point"}
    assert params["before_run"].default == tn.GLUE_BEFORE_RUN


def test_05_the_best_against_worst_heading_is_phase_best_worsts_default():
    """'### Best against worst backend/config, DeepSeek-R1 TP8' names phase_best_worst's
    default model and sharding (what the cell below it draws)."""
    import inspect

    from moe_lab.analysis import tuning as tn
    text = markdown("05_tuning.ipynb", "### Best against worst backend/config")
    model, shard = said(text, r"Best against worst backend/config, ([\w.-]+) (TP\d+)").groups()
    params = inspect.signature(tn.phase_best_worst).parameters
    assert (_names(model), shard) == (params["model"].default, params["sharding"].default)


def test_the_seed_shapes_question_states_its_own_shape():
    """runs.choose('seed_shapes') says which run it picks for 'graph points of DeepSeek-R1 and
    Qwen3-235B at TP8': the words are now built from SEED_SHAPES, the shape _seed_points
    counts (typed apart before: a shape moved to EP8 kept saying TP8)."""
    import inspect

    from moe_lab.analysis import runs
    from moe_lab.core.problems import sharding_name
    s = runs.SEED_SHAPES
    what = runs.QUESTIONS["seed_shapes"].what
    assert all(m in what for m in s["models"]) and sharding_name(s["tp"], s["ep"]) in what
    assert f"{s['mode']} {s['dtype']} points" in what
    params = inspect.signature(runs._seed_points).parameters
    assert (params["models"].default, params["tp"].default, params["ep"].default,
            params["mode"].default, params["dtype"].default) == (
                s["models"], s["tp"], s["ep"], s["mode"], s["dtype"])


def test_the_seed_models_are_one_tuple():
    """tuned.SEEDS was a second, reordered copy of core.problems.SEED_MODELS (its slices
    [:3] and [:2] picked models by position); now it is SEED_MODELS and REQUIRED picks by
    name: the vLLM bf16 TP8 shapes are the seeds but DeepSeek-R1 (measured at TP8+EP8), the
    fp8-channel ones the Llama 4 pair."""
    from moe_lab.analysis import tuned as tf
    from moe_lab.core.problems import SEED_MODELS
    assert rq.SEEDS is SEED_MODELS
    vllm_bf16_tp8 = {m for i, b, m, tp, ep, dt in rq.REQUIRED if b == "vllm" and dt == "bf16" and ep == 1}
    assert vllm_bf16_tp8 == set(SEED_MODELS) - {"deepseek-r1"}
    chan = {m for i, b, m, tp, ep, dt in rq.REQUIRED if dt == "fp8-channel"}
    assert chan == {m for m in SEED_MODELS if m.startswith("llama4")} and len(chan) == 2
    assert len(rq.REQUIRED) == len(set(rq.REQUIRED))


def test_06_the_estimates_ranks_and_the_machine_are_the_codes_and_the_datas():
    """Notebook 06: '## 6. An estimate for 8 ranks' (and 'At 8 ranks', 'an 8-rank run',
    '`--nproc 8` the 8-GPU run of issue 18') state expert_parallel.ESTIMATE_RANKS, which
    the code cell passes to estimate and runs_at (it typed 8 three times, its printed lines
    twice); 'host times of a shared 2-core machine' is the committed CPU run's cpu_count."""
    from moe_lab.analysis import expert_parallel as ep
    text = markdown("06_expert_parallel.ipynb", "## 6. An estimate for")
    ns = {int(x) for x in re.findall(r"\b(\d+)[ -]ranks?\b|an (\d+)-rank run", text) for x in x if x}
    ns |= {int(x) for x in re.findall(r"[Aa]t (\d+) ranks", text)}
    assert ns == {ep.ESTIMATE_RANKS}, ns
    top = markdown("06_expert_parallel.ipynb", "# 06 · Expert parallelism")
    assert {int(x) for x in said(top, r"`--nproc (\d+)` the (\d+)-GPU run of issue 18").groups()} \
        == {ep.ESTIMATE_RANKS}
    src = code("06_expert_parallel.ipynb")
    assert "estimate(run.results, n)" in src and "runs_at(n)" in src
    assert not re.search(r"estimate\(run\.results, \d|runs_at\(\d|at \d+ ranks|no \d+-rank", src)
    cores = int(said(top, r"a shared (\d+)-core machine")[1])
    found = []
    for m in (ROOT / "data" / "runs").glob("*/manifest.json"):
        j = json.loads(m.read_text())
        if j.get("distributed"):
            found.append((j["started"], j["environment"]))
    assert found and max(found, key=lambda x: x[0])[1]["cpu_count"] == cores


# --- versions, exit codes, counts and device facts the README and notebooks state -------------

def test_the_sigterm_exit_code_is_one_constant():
    """README: 'SIGTERM: exit 143'. The CLI, each rank and the launcher that reads the ranks'
    codes typed 143 (and 130) apiece; now core.errors.EXIT_SIGTERM / EXIT_SIGINT, 128 + the
    signal, and the README states it (a drifted literal in one place broke the launcher's
    'killed rank' detection silently)."""
    import signal

    from moe_lab.core.errors import EXIT_SIGINT, EXIT_SIGTERM
    assert EXIT_SIGTERM == 128 + signal.SIGTERM and EXIT_SIGINT == 128 + signal.SIGINT
    assert int(said(readme(), r"SIGTERM: exit (\d+),")[1]) == EXIT_SIGTERM
    for f in ("cli.py", "distributed/worker.py", "distributed/launch.py"):
        src = (ROOT / "moe_lab" / f).read_text()
        assert not re.search(r"\b(?:return|==) (?:143|130)\b", src), f


def test_the_vllm_versions_the_readme_states_are_the_backends_and_the_runs():
    """'vllm >= 0.26.0' and 'the real vllm 0.26.0 package' are vllm_fused.CHECKED (the release
    read, tested and the oldest supported); 'vllm 0.26.0 on the H200' is the version every
    committed run that measured vLLM recorded (a run on 0.27 left the README saying 0.26)."""
    import ast
    tree = ast.parse((ROOT / "moe_lab" / "backends" / "vllm_fused.py").read_text())
    checked = next(n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                   and getattr(n.targets[0], "id", "") == "CHECKED")
    text = readme()
    assert said(text, r"vllm >= ([\d.]+);")[1] == checked
    assert said(text, r"against the real vllm ([\d.]+) package")[1] == checked
    ran = said(text, r"checked \+ measured: vllm ([\d.]+) on the H200")[1]
    got = set()
    for m in (ROOT / "data" / "runs").glob("*/manifest.json"):
        v = (json.loads(m.read_text()).get("environment") or {}).get("vllm")
        if v:
            got.add(v)
    assert got == {ran}, got


def test_the_torch_pin_the_readme_states_is_setups():
    """'Where no torch is installed, setup installs `torch==2.13.0`': every torch pin
    scripts/setup.sh installs (and environment.yml's CPU command) is that one."""
    pin = said(readme(), r"setup installs `torch==([\w.+]+)`")[1]
    for f in ("scripts/setup.sh", "environment.yml"):
        pins = set(re.findall(r"torch==([\w.]+\d)", (ROOT / f).read_text()))
        assert pins == {pin}, (f, pins)


def test_the_counts_of_schemes_and_align_kernels_the_readme_states_are_the_codes():
    """'the three FP8 schemes' is len(FP8_SCHEMES); 'the three align kernels' of
    core/glue_kernels.py is its KERNELS['align'] chain (read from the source: the kernels
    need triton)."""
    import ast

    from moe_lab.core.constants import FP8_SCHEMES
    text = readme()
    assert WORDS[said(text, r"the (\w+) FP8 schemes")[1]] == len(FP8_SCHEMES)
    tree = ast.parse((ROOT / "moe_lab" / "core" / "glue_kernels.py").read_text())
    align = [v for n in ast.walk(tree) if isinstance(n, ast.Dict)
             for k, v in zip(n.keys, n.values) if isinstance(k, ast.Constant) and k.value == "align"]
    assert len(align) == 1 and isinstance(align[0], ast.Tuple)
    assert WORDS[said(text, r"the (\w+) align kernels")[1]] == len(align[0].elts)


def test_the_count_of_vllm_libraries_the_readme_states_is_the_bundles():
    """'its Python files and two compiled libraries travel there' is the vLLM bundle's
    VLLM_SO (scripts/device_bundle.py, read from the source: what the cut keeps)."""
    import ast
    tree = ast.parse((ROOT / "scripts" / "device_bundle.py").read_text())
    so = [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
          and any(getattr(t, "id", None) == "VLLM_SO" for t in n.targets)]
    assert len(so) == 1 and isinstance(so[0], ast.Tuple)
    assert WORDS[said(readme(), r"Python files and (\w+) compiled libraries")[1]] == len(so[0].elts)


def test_03_the_gpu_without_a_spec_is_the_imported_tables():
    """Notebook 03: 'A GPU with no spec (the 80-CU part) has no floor': of the devices in
    AMD's imported tables, the ones without a vendor spec or ceilings are exactly the 80-CU
    part (a spec added for it, or another spec-less GPU imported, fails here)."""
    import pandas as pd

    from moe_lab.analysis.runs import imported_runs
    from moe_lab.core.devices import ceilings_for
    from moe_lab.core.errors import UsageError
    cus = int(said(markdown("03_roofline.ipynb", "## The model against AMD's own measurements"),
                   r"A GPU with no spec \(the (\d+)-CU part\)")[1])
    devices = set()
    for r in imported_runs():
        devices |= set(pd.read_parquet(ROOT / "data" / "runs" / r / "results.parquet")["device"])
    none = set()
    for d in devices:
        try:
            ceilings_for(d)
        except UsageError:
            none.add(d)
    assert none and {int(x) for d in none for x in re.findall(r"(\d+) CUs", d)} == {cus}, none


def test_05_the_token_grids_last_key_and_aiters_table_are_the_codes():
    """Notebook 05: 'TUNE_TOKENS: the keys of the published H200 tunings of this kernel, and
    8192' is TUNE_TOKENS' one added key; 'aiter's shipped (MI300X) configurations' and 'its
    MI300X table' are winners_table's `shipped` default."""
    import inspect

    from moe_lab.analysis import tuning as tn
    from moe_lab.core.constants import PUBLISHED_H200_KEYS, TUNE_TOKENS
    text = markdown("05_tuning.ipynb", "## 6. The tuned files against the token grid")
    extra = int(said(text, r"the keys of the published H200 tunings of this kernel, and (\d+)\)")[1])
    assert TUNE_TOKENS == PUBLISHED_H200_KEYS + (extra,)
    shipped = inspect.signature(tn.winners_table).parameters["shipped"].default
    top = markdown("05_tuning.ipynb", "# 05 · Tuning")
    four = markdown("05_tuning.ipynb", "## 4. The winning configurations")
    assert said(top, r"aiter's shipped \((\w+)\) configurations")[1] == shipped
    assert said(four, r"from its (\w+) table")[1] == shipped


def test_profile_explains_archs_are_the_dispatchs():
    """`profile --arch`'s '(gfx942, gfx950)' are _aiter_dispatch.GFX_SUPPORTED (the keys of
    aiter's fused_moe_1stage_dict): an arch added there and not in the help fails here."""
    import subprocess
    import sys

    from moe_lab.backends._aiter_dispatch import GFX_SUPPORTED
    out = folded(subprocess.run([sys.executable, "-m", "moe_lab", "profile", "--help"],
                                capture_output=True, text=True, cwd=ROOT,
                                env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}).stdout)
    archs = said(out, r"the GPU arch \(([\w, ]+)\)")[1]
    assert tuple(a.strip() for a in archs.split(",")) == GFX_SUPPORTED


def test_the_side_by_side_names_the_device_its_rows_were_measured_on():
    """The AMD side-by-side figure and its summary typed 'H200' ('measured by moe-lab on the
    H200', 'N H200 rows'): now the measured rows' device. The same rows relabelled as an H100
    say H100 (a typed name would still say H200), and notebook 01's heading 'AMD beside the
    H200' names what the default rows hold."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from moe_lab.analysis import devices as an_dev
    from moe_lab.analysis.runs import imported_runs, richest_run
    from moe_lab.plots import devices as dv
    rows = an_dev.rows_for([richest_run()] + imported_runs())
    own = an_dev.measured_devices(rows)
    assert said(markdown("01_kernel_time.ipynb", "## AMD beside the"),
                r"## AMD beside the (\w+)")[1] == own
    other = rows.assign(device=rows["device"].where(rows["series"].str.contains("imported"),
                                                    "NVIDIA H100 80GB HBM3"))
    for r, name in ((rows, own), (other, "H100 80GB HBM3")):
        assert f" {name} rows measured by moe-lab" in an_dev.summary(r)
        fig = dv.fig_side_by_side(r.head(40))
        try:
            text = " ".join([ax.get_ylabel() for ax in fig.axes] + [t.get_text() for t in fig.texts])
            assert f"({name}: graph replay" in text and f"measured by moe-lab on the {name} " in text
        finally:
            plt.close(fig)


def test_the_timing_budgets_are_defined_once():
    """The sweep's 10/50 ms and 120 s per point and the tune's 5/20 ms were typed both in the
    verb (its --help states them) and in Sweep / Tuner (what ml.measure and the API use):
    each is now core.constants', so a budget changed in one left the other measuring with
    the old one."""
    import inspect

    from moe_lab.commands import sweep as sweep_cmd
    from moe_lab.core import constants as c
    from moe_lab.measuring.sweep import Sweep
    from moe_lab.measuring.tuning import Tuner
    sp = inspect.signature(Sweep.__init__).parameters
    tp = inspect.signature(Tuner.__init__).parameters
    assert (sp["warmup_ms"].default, sp["rep_ms"].default, sp["point_timeout_s"].default) == (
        c.SWEEP_WARMUP_MS, c.SWEEP_REP_MS, c.POINT_TIMEOUT_S)
    assert (sweep_cmd.WARMUP_MS, sweep_cmd.REP_MS) == (c.SWEEP_WARMUP_MS, c.SWEEP_REP_MS)
    assert (tp["warmup_ms"].default, tp["rep_ms"].default) == (c.TUNE_WARMUP_MS, c.TUNE_REP_MS)
    import argparse
    for verb, want in (("sweep", dict(warmup_ms=None, rep_ms=None, point_timeout=c.POINT_TIMEOUT_S)),
                       ("tune", dict(warmup_ms=c.TUNE_WARMUP_MS, rep_ms=c.TUNE_REP_MS))):
        import importlib
        p = argparse.ArgumentParser()
        importlib.import_module(f"moe_lab.commands.{verb}").configure(p)
        for k, v in want.items():
            assert p.get_default(k) == v, (verb, k)


def test_twice_the_survivors_is_what_the_verify_plan_does():
    """'another order, twice the survivors and the fine steps' (tune --verify's help, the
    verify target's record, the findings' verify section): SearchPlan.doubled doubles the kept share (to at
    most all), the minimum kept and the fine rounds; a factor changed in the code without the
    words fails here."""
    import subprocess
    import sys

    from moe_lab.analysis import targets as tg
    from moe_lab.measuring.tuning_search import SearchPlan
    p = SearchPlan()
    d = p.doubled(1)
    assert d.keep == min(1.0, 2 * p.keep) and d.min_keep == 2 * p.min_keep
    assert d.fine_rounds == 2 * p.fine_rounds
    out = folded(subprocess.run([sys.executable, "-m", "moe_lab", "tune", "--help"],
                                capture_output=True, text=True, cwd=ROOT,
                                env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}).stdout)
    rec = next(t for t in tg.TARGETS if t.metric == "verify_ratio")
    src = (ROOT / "moe_lab" / "findings" / "tuned.py").read_text()  # its verify section
    for text in (out, rec.measures, folded(src)):
        assert "twice the survivors" in text
