"""Which run a question reads: the one module that chooses runs (every default a notebook,
the findings or report takes), and the line that says which run a notebook shows.

The rule (choose): of the runs under the data folder not marked running or failed, the
ones that can answer the question; runs measured on a GPU before runs measured on the
CPU (the committed GPU data answers a GPU question; a user's CPU sweep from
`bash scripts/main.sh` is read where only a CPU run answers, notebook 01's CPU panel);
then the question's preference (the newest, unless it ranks runs by a count). A run given
is read as given, refused in one line when it cannot answer.

    choose(question, run=None, device=None)  Choice(run, why, given): `why` is the one line
                                  a notebook prints (which run, why, which newer runs it
                                  passed over); `device`: of that device's runs only
    data_devices(root=None)       the devices with data under a data folder (runs, tuned files)
    gpu_devices(root=None)        of them the GPUs
    tuned_file_devices(folder)    the devices a configs folder's tuned files were written on
    on_device(runs, device)       the runs measured on a device
    manifest_device(manifest)     the device a run folder's manifest names (as its rows do)
    QUESTIONS                     the questions: kernel_time, cpu, roofline, compile, tuning,
                                  seed_shapes, ledger, fp8_ledger, distributed, vllm
    describe(run)                 'run R: N points (K ok) on DEVICE, commits C (path)'
    open_tuned_run(run=None, device=None)  notebook 05: the run with the most points both
                                  tuned and default
    runs_with_phases(runs=None, device=None)  the ledger's runs: every run with stored phases
                                  on the newest one's device (or `device`), newest first
    vllm_choice(runs=None, device=None)  the vLLM comparison's runs (the same way), its line
    distributed_run(run=None)     notebook 06: the newest run with ok distributed rows
    spread_pair(), runs_at(n)     a spread sweep and its one-GPU twin; the runs at n ranks
    richest_run(), imported_runs() notebooks 01/03: the measured run with the most points of
                                  the seed shapes; the imported tables
    every_run(), default_runs(), newest_with(answers)  the lists a reader walks (runs.lists)
The FP8 comparison's choice (the FP8 run, bf16 beside it) is analysis.fp8.comparison_rows,
over default_runs().
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from ...core.errors import CorruptFile, UsageError
from ...core.problems import sharding_name
from ...storage.rows import ok_rows
from ...storage.scope import tracked, visible
from ...storage.store import Run, _warn_once, data_dir, find_runs, open_run, read_json
from .. import expert_parallel as analysis
from .lists import default_runs, every_run, newest_with  # noqa: F401 (the lists' choosers)
from ...storage.checked import DICT, FOLDER, LISTED, RUN, RUN_NAMED, RUNS, TEXT, TP, takes

TUNED = "tuned"


@takes(run=RUN)
def describe(run: Run) -> str:
    """'run R: N points (K ok) on DEVICE, commits C (path)': what a notebook prints first."""
    res = run.results
    ok = int((res["status"] == "ok").sum()) if len(res) else 0
    return (f"run {run.run_id}: {len(res)} points ({ok} ok) on {run.device}, commits "
            f"{', '.join(run.commits()) or 'unknown'} ({run.path})")


@takes(run=RUN)
def on_gpu(run: Run) -> bool:
    """Whether the run's rows were measured on a GPU (its device is no CPU)."""
    return is_gpu(run.device)


@takes(device=TEXT | None)
def is_gpu(device) -> bool:
    """Whether a device name (Run.device's) is a GPU's (not the CPU's, not unknown)."""
    return bool(device) and "cpu" not in str(device).lower() and str(device) != "?"


@takes(manifest=DICT)
def manifest_device(manifest: dict) -> str:
    """The device a run folder's manifest names, as its rows name it (Run.device): the GPU's
    name, or `cpu (<processor>)` on the CPU (core.environment.device_name); '?' if none."""
    env = manifest.get("environment") or {}
    name = str(env.get("device_name") or "?")
    return f"cpu ({name})" if env.get("device") == "cpu" else name


@takes(runs=LISTED, device=TEXT | None)
def on_device(runs, device: str | None) -> list:
    """The runs (Runs) measured on `device` (Run.device, the rows' device), in their order;
    None: every run."""
    return list(runs) if device is None else [r for r in runs if r.device == device]


@takes(root=FOLDER)
def data_devices(root=None) -> list[str]:
    """The devices with data under a data folder (`root`, a folder of run folders; None:
    data_dir()), sorted: the device each run folder's manifest names (manifest_device; the
    run folders read now, storage.scope: in the findings the committed ones) but for
    imported tables (not measured by moe-lab), and the `device` of every tuned file in a
    provenance.json under the folder's configs (<root>/../configs/<device-slug>/<backend>/;
    in a git checkout the device folders git tracks)."""
    root = Path(root) if root is not None else data_dir()
    found = set()
    for p in (root.iterdir() if root.is_dir() else ()):
        if p.is_dir() and not p.name.startswith(".") and visible(p) \
                and (p / "manifest.json").is_file():
            try:
                m = read_json(p / "manifest.json")
            except CorruptFile as exc:  # find_runs' rule: said once, passed over
                _warn_once(f"moe-lab: warning: passed over run {p.name}: {exc}")
                continue
            if m.get("kind") != "import":
                found.add(manifest_device(m))
    configs = root.parent / "configs"
    slugs = tracked(configs) if configs.is_dir() else frozenset()
    for folder in sorted(p for p in configs.glob("*") if p.is_dir()):
        if slugs is None or folder.name in slugs:
            found |= tuned_file_devices(folder)
    return sorted(str(d) for d in found if d and d != "?")


@takes(folder=FOLDER)
def tuned_file_devices(folder) -> set[str]:
    """The devices a configs folder's tuned files were written on (<folder>/<backend>/
    provenance.json's `device` of each file that is there)."""
    found = set()
    for prov in sorted(Path(folder).glob("*/provenance.json")):
        found |= {str(v["device"]) for n, v in read_json(prov).items()
                  if isinstance(v, dict) and v.get("device") and (prov.parent / n).is_file()}
    return found


@takes(root=FOLDER)
def gpu_devices(root=None) -> list[str]:
    """The GPU devices with data under a data folder (data_devices but the CPU's), sorted."""
    return [d for d in data_devices(root) if is_gpu(d)]


def _has_roof(run: Run) -> bool:
    from ...core.devices import ceilings_for
    try:
        ceilings_for(run.device)
    except UsageError:
        return False
    return True


SEED_SHAPES = dict(models=("deepseek-r1", "qwen3-235b-a22b"), tp=8, ep=1, mode="graph",
                   dtype="bf16")  # AMD's tuner tables' shapes (bf16: what rows_for draws)


def _seed_points(r, models=SEED_SHAPES["models"], tp=SEED_SHAPES["tp"], ep=SEED_SHAPES["ep"],
                 mode=SEED_SHAPES["mode"], dtype=SEED_SHAPES["dtype"]) -> int:
    res = ok_rows(r.results)  # of the dtype too: an fp8 run of more points was chosen and
    # notebook 01's side-by-side (bf16 rows) then drew none of moe-lab's
    same = res["dtype"] == dtype if "dtype" in res else True
    return int(((res["mode"] == mode) & res["model"].isin(list(models))
                & (res["tp"] == tp) & (res["ep"] == ep) & same).sum())


@dataclass(frozen=True)
class Question:
    what: str                         # 'ok rows measured by moe-lab': what answers it
    answers: Callable[[Run], object]  # truthy when the run can answer
    rank: Callable[[Run], int] | None = None  # prefer the most of this (None: the newest)
    has: str | None = None            # a run given is opened with open_run(run, has=...)
    cpu_only: bool = False            # only runs on the CPU answer (notebook 01's CPU panel)
    scope: str | None = None          # the runs looked at: find_runs(has=scope)


QUESTIONS = {
    "kernel_time": Question("ok rows measured by moe-lab",
                            lambda r: r.has("ok") and not _imported(r), has="ok"),
    "cpu": Question("ok rows measured on the CPU",
                    lambda r: r.has("ok") and not _imported(r) and not on_gpu(r), has="ok",
                    cpu_only=True),
    "roofline": Question("ok rows on a device with ceilings or a spec",
                         lambda r: r.has("ok") and not _imported(r) and _has_roof(r), has="ok"),
    "compile": Question("compile rows", lambda r: r.has("compile"), has="compile"),
    "tuning": Question("ok points of a backend both tuned and default",
                       lambda r: _tuned_and_default(r), rank=lambda r: _tuned_and_default(r)),
    "seed_shapes": Question(f"{SEED_SHAPES['mode']} {SEED_SHAPES['dtype']} points of "
                            f"{' and '.join(SEED_SHAPES['models'])} "
                            f"at {sharding_name(SEED_SHAPES['tp'], SEED_SHAPES['ep'])}",
                            lambda r: r.has("graph") and _seed_points(r),
                            rank=lambda r: _seed_points(r)),
    "ledger": Question("stored phases (phases.parquet)", lambda r: len(r.phases) > 0),
    # the FP8 GEMM section: the newest device whose runs hold FP8 points with phases (a newer
    # bf16-only run on another GPU does not take it to a device with nothing to say)
    "fp8_ledger": Question("stored phases of ok FP8 points",
                           lambda r: len(r.phases) > 0 and _has_fp8(r)),
    "distributed": Question("ok distributed rows", lambda r: r.has("distributed"),
                            has="distributed", scope="distributed"),
    "vllm": Question("ok rows of vLLM as shipped (backend vllm, config default)",
                     lambda r: _vllm_as_shipped(r)),
}


VLLM_AS_SHIPPED = ("vllm", "default")  # (backend, config) of vLLM as shipped: the
# comparison's base (analysis.vllm_compare.BASE) and what makes a run answer "vllm"


def _vllm_as_shipped(r) -> bool:
    res = r.results
    if not len(res) or "backend" not in res:
        return False
    ok = ok_rows(res)
    cfg = ok["config"].fillna("default") if "config" in ok else pd.Series("default", ok.index)
    return bool(((ok["backend"] == VLLM_AS_SHIPPED[0]) & (cfg == VLLM_AS_SHIPPED[1])).any())


@dataclass(frozen=True)
class Choice:
    run: Run | None
    why: str      # one line: which run is read, and why
    given: bool   # the run was given (`run = ID`): figures about other runs are left out


def _names(runs: list, n: int = 3) -> str:
    names = [r.run_id for r in runs]
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


def _order(question: str, runs: list) -> list:
    """The rule: the runs that answer, GPU runs first, then the question's preference
    (sorts are stable: among equals find_runs' newest-first order stays)."""
    q = QUESTIONS[question]
    found = [r for r in runs if q.answers(r)]
    if q.rank is not None:
        found.sort(key=q.rank, reverse=True)
    return sorted(found, key=lambda r: not on_gpu(r))


@takes(question=TEXT, run=RUN_NAMED, device=TEXT | None)
def choose(question: str, run=None, required: bool = True, device: str | None = None
           ) -> Choice:
    """The run `question` (a QUESTIONS key) reads: `run` (an id, a folder or a Run) as given,
    or the first by the rule (module docs) of the runs on `device` (None: every device's).
    Its `why` is one line for the notebook to print. UsageError when the run given cannot
    answer, or (required) when no run can; a Choice with run None otherwise."""
    if question not in QUESTIONS:  # was: KeyError
        raise UsageError(f"choose: no question {question!r}; one of {', '.join(QUESTIONS)}")
    q = QUESTIONS[question]
    if run is not None:
        if question == "tuning":
            r = open_tuned_run(run)
        elif question == "cpu":
            r = open_run(run, has="ok")
        else:  # as given: a notebook says what it cannot show of it (03: no roof)
            r = open_run(run, has=q.has)
        return Choice(r, f"reads run {r.run_id}: the run given (run = {run!r})", True)
    runs = on_device(find_runs(has=q.scope, defaults=True), device)
    found = _order(question, runs)
    if not found:
        on = "" if device is None else f" on {device}"
        if required:
            raise UsageError(f"no run under {data_dir()} has {q.what}{on} (and is not marked "
                             "running or failed)" + ("" if q.cpu_only else
                                                     ": run `moe-lab sweep` first"))
        return Choice(None, f"no run under {data_dir()} has {q.what}{on}", False)
    r = found[0]
    pref = (f"the run with the most {q.what}" if q.rank is not None
            else f"the newest run with {q.what}")
    where = "" if q.cpu_only else ", on a GPU" if on_gpu(r) else ", on the CPU (no GPU run has any)"
    newer = runs[:next(i for i, x in enumerate(runs) if x.run_id == r.run_id)]
    skipped = []
    cpu = [x for x in newer if q.answers(x) and not on_gpu(x) and on_gpu(r)]
    if cpu:
        skipped.append(f"{_names(cpu)} (CPU runs: GPU runs answer first)")
    fewer = [x for x in newer if q.rank is not None and x not in cpu and q.answers(x)]
    if fewer:
        skipped.append(f"{_names(fewer)} (fewer such points)")
    lacking = [x for x in newer if not q.answers(x)]
    if lacking:
        skipped.append(f"{len(lacking)} without {q.what}")
    tail = f"; passed over newer runs: {'; '.join(skipped)}" if skipped else ""
    return Choice(r, f"reads run {r.run_id}: {pref}{where}{tail}", False)


def _tuned_and_default(r) -> int:
    """How many ok points a run has of a backend measured both 'tuned' and 'default' (what
    the notebook compares; a run of tuned rows alone has nothing to put them against)."""
    res = r.results
    if "config" not in res:
        return 0
    ok = ok_rows(res)
    both = set(ok.loc[ok["config"] == TUNED, "backend"]) & set(ok.loc[ok["config"] == "default", "backend"])
    return int(ok["backend"].isin(both).sum())


@takes(run=RUN_NAMED, device=TEXT | None)
def open_tuned_run(run=None, device: str | None = None):
    """`run`, or None: of the runs (find_runs; `device`: its runs only) with ok rows of one
    backend both 'tuned' and 'default', the one with the most such points (the fullest
    picture; ties: the newest); UsageError when the run given, or every run, has none."""
    if run is None:
        try:
            return choose("tuning", device=device).run
        except UsageError:
            pass  # said below, with what to run
    runs = [open_run(run)] if run is not None else on_device(find_runs(defaults=True), device)
    found = sorted((r for r in runs if _tuned_and_default(r)), key=_tuned_and_default,
                   reverse=True)  # stable: among equals find_runs' newest-first order stays
    if not found:
        where = f"run {runs[0].run_id} has no" if run else f"no run under {data_dir()} " + (
            "has" if device is None else f"on {device} has")
        raise UsageError(f"{where} ok rows of a backend both tuned and default: run "
                         "`moe-lab tune`, then `moe-lab sweep --config default,tuned`")
    return found[0]


def _has_fp8(r: Run) -> bool:
    """Whether a run holds ok rows of an FP8 scheme."""
    res = ok_rows(r.results)
    return bool(len(res)) and res["dtype"].astype(str).str.startswith("fp8").any()


@takes(runs=RUNS, device=TEXT | None, question=TEXT)
def runs_with_phases(runs=None, device: str | None = None, question: str = "ledger") -> list:
    """`runs` (ids or folders) opened, or None: every run that stored its phases
    (phases.parquet: measured with the glue timed now) on `device`, or (None) on the device
    of the run the rule chooses for the ledger (choose('ledger'): GPU runs first, then the
    newest), newest first, so of_runs takes a point measured more than once from its latest
    run. UsageError when there is none."""
    return ledger_choice(runs, device, question)[0]


def _on_one_device(question: str, runs, name: str, param: str, what: str, note: str = "",
                   required: bool = True, device: str | None = None) -> tuple[list, str]:
    """(runs, line) of a question read over several runs: `runs` (ids or folders) as given,
    else every run that answers on `device` (None: on the device of the run
    choose(question) takes), newest first (a point measured twice comes from its latest
    run); ([], why) when none answers and not `required` (choose's UsageError otherwise)."""
    if runs is not None:
        opened = [open_run(r) for r in ([runs] if isinstance(runs, str) else runs)]
        return opened, f"{name} reads the runs given ({param})"
    first = choose(question, required=required, device=device)
    if first.run is None:
        return [], first.why
    found = [r for r in _order(question, find_runs(defaults=True))
             if r.device == first.run.device]
    found.sort(key=lambda r: (_started_of(r), r.run_id), reverse=True)
    return found, (f"{name} reads the {len(found)} runs with {what} on {first.run.device}"
                   f"{note} (the device of {first.why.removeprefix('reads ')})")


@takes(runs=RUNS, device=TEXT | None, question=TEXT)
def ledger_choice(runs=None, device: str | None = None, question: str = "ledger"
                  ) -> tuple[list, str]:
    """(runs_with_phases(runs, device), the one line saying which runs and why); `question`
    "fp8_ledger": every run with phases on the device of the newest run with FP8 points and
    phases (its bf16 points are read beside them)."""
    if question == "fp8_ledger" and runs is None and device is None:
        first = choose(question, required=False)
        device = first.run.device if first.run is not None else None
    return _on_one_device("ledger", runs, "the ledger", "ledger_runs", "stored phases",
                          ", a point from its newest run", device=device)


@takes(runs=RUNS, device=TEXT | None)
def vllm_choice(runs=None, device: str | None = None) -> tuple[list, str]:
    """(the runs analysis.vllm_compare reads, the one line saying which and why): `runs`
    (ids or folders) as given, else every run with ok rows of vLLM as shipped on `device`,
    or (None) on the device of the run the rule chooses (choose('vllm')), newest first;
    ([], why) when none."""
    return _on_one_device("vllm", runs, "the vLLM comparison", "vllm_runs", "vLLM as shipped",
                          required=False, device=device)


def _started_of(r: Run) -> str:
    return str(r.manifest.get("started", ""))


@takes(run=RUN_NAMED)
def distributed_run(run=None) -> Run:
    """`run` opened, or the run choose('distributed') reads."""
    return choose("distributed", run).run


def spread_pair() -> tuple[Run, Run] | None:
    """The newest sweep spread over GPUs (`sweep --gpus`, its manifest has `spread`) and
    the same sweep measured on one GPU (same config, no spread), if both exist."""
    runs = find_runs(defaults=True)
    for sp in (r for r in runs if r.manifest.get("spread")):
        cfg = {k: v for k, v in (sp.manifest.get("config") or {}).items() if k != "part"}
        for one in runs:
            if not one.manifest.get("spread") and one.manifest.get("status") == "complete" and \
                    {k: v for k, v in (one.manifest.get("config") or {}).items() if k != "part"} == cfg:
                return sp, one
    return None


@takes(world_size=TP)
def runs_at(world_size: int) -> list[Run]:
    """Runs with ok distributed rows at this world size, newest first (issue 18: 8)."""
    out = []
    for r in find_runs(has="distributed", defaults=True):
        d = analysis.distributed_rows(r.results)
        if (d["world_size"] == world_size).any():
            out.append(r)
    return out


def _on_gpu(d: pd.DataFrame) -> pd.DataFrame:
    """The rank rows measured on a GPU (is_gpu: the one rule, a run's or a row's device)."""
    return d[d["device"].notna() & d["device"].map(is_gpu).astype(bool)]


def gpu_distributed() -> str:
    """One line: the runs with ok distributed rows measured on GPUs (world sizes), or that
    there is none yet and the command that makes one. Notebook 06 prints it, so what is
    pending is read from the data, never typed."""
    found = []
    for r in find_runs(has="distributed", defaults=True):
        d = _on_gpu(analysis.distributed_rows(r.results))
        if len(d):
            found.append(f"{r.run_id} (world size "
                         f"{', '.join(map(str, sorted({int(w) for w in d['world_size']})))})")
    return ("GPU runs with ranks: " + "; ".join(found)) if found else (
        "GPU runs with ranks: none committed yet (`moe-lab sweep --nproc N` on N GPUs "
        "makes one)")


@takes(run=RUN)
def describe_distributed(run: Run) -> str:
    d = analysis.distributed_rows(run.results)
    world = sorted({int(w) for w in d["world_size"].dropna()}) if "world_size" in d else []
    pg = sorted({str(b) for b in d.get("dist_backend", pd.Series(dtype=str)).dropna()})
    gpu = len(_on_gpu(d)) > 0
    return (f"{describe(run)}\n{len(d)} rank rows, world size {world}, over "
            f"{', '.join(pg) or '?'}; " + ("measured on GPUs" if gpu else
                                          "a CPU run (gloo): NOT GPU results"))


def _imported(run) -> bool:
    return run.manifest.get("kind") == "import" or "aiter-tuner" in set(run.results.get("mode", []))


def richest_run() -> str | None:
    """The measured run with the most ok graph rows of DeepSeek-R1 and Qwen3-235B at TP8
    (choose('seed_shapes'); the newest on a tie): what to put beside AMD's tables, rather
    than the newest run, which may be a follow-up of a few points."""
    r = choose("seed_shapes", required=False).run
    return None if r is None else r.run_id


def imported_runs() -> list[str]:
    """Run ids of the tables imported from aiter (`moe-lab import-aiter`), newest first."""
    return [r.run_id for r in find_runs() if _imported(r)]
