"""The tuned configuration files as data (issues 38 and 41): which seed shapes must have one
(REQUIRED, defined once here), what each file holds against the token grid (TUNE_TOKENS: the
18 keys of the published tunings for the H200, and 8192) with its provenance, and the tuned
against default points measured with the files now committed: a tuned row measured before
its file was written is history, not evidence about that file.

inventory (a row per device and required shape: its file, keys, provenance, whether it
holds the grid), current_pairs, default_and_tuned, with_two_t, two_t_misses, tuning_metrics,
search_spread, verify_points, tune_run and left (the work left on a GPU, as the device
scripts' SHAPES words): each with its own docstring; the room's surface: tuned/__init__.py.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from ...core import validate
from ...core.config_files import read_table
from ...core.constants import SEED_SWEEP_TOKENS, TUNE_TOKENS
from ...core.errors import UsageError
from .. import ledger as lg
from ...core.problems import sharding_name
from ...storage.rows import deployed_rows, published_rows
from ...storage.store import read_json
from .. import metrics
from .required import REQUIRED, REQUIRED_63, search_run, required_for, shape_word
from ..runs import (every_run, gpu_devices, is_gpu, manifest_device, on_device as runs_on,
                    tuned_file_devices)
from ..targets import METRIC_COLUMNS
from .paths import (PAIR_KEY, with_device, configs_folder, check_folders, is_history, file_paths,
                    check_required)
from ...storage.checked import FOLDER, FRAME, RUNS, TEXT, columns, frame, takes

INVENTORY_COLUMNS = ["device", "issue", "backend", "model", "sharding", "dtype", "file", "keys",
                     "missing_keys", "run", "run_status", "candidates", "written", "commit",
                     "holds_grid", "near_keys"]


@takes(data_dir=FOLDER | None)
def inventory(configs_dir=None, device: str | None = None, required=None,
              data_dir=None) -> pd.DataFrame:
    """A row per device and required shape (`required`; None: each device's own,
    required_for): the device, the shape's file (gemm1's; the gemm2 file beside it where
    the backend has one), the token keys every stage's file holds (of TUNE_TOKENS), the
    keys missing, its provenance (the tune run, its manifest's status, candidates timed,
    when the file was written, the commit), `holds_grid`: a file for every stage with all
    the keys, provenance naming a run, and that run complete, and `near_keys`: its search's
    neighbour-key pass (SearchPlan.near_keys; 0: searched before the pass existed).
    `device` None: every GPU device with data (analysis.runs.gpu_devices of data_dir, and
    the devices configs_dir's provenance names), a block of rows each; none: no row."""
    from ...storage.store import data_dir as default_data
    check_folders("inventory", configs_dir=configs_dir)  # was: every shape "missing"
    if required is not None:
        required = check_required(required, "inventory")
    if device is not None:
        validate.text(device, "inventory: device", "a device name, e.g. 'NVIDIA H200', or "
                      "None for every GPU device with data")
    # (data_dir may not exist yet: a fresh machine has searched nothing, as left() reads it)
    runs = Path(data_dir) if data_dir is not None else default_data()
    blocks = [pd.DataFrame(_inventory_rows(configs_folder(configs_dir, d), d, runs,
                                           required_for(d) if required is None else required),
                           columns=INVENTORY_COLUMNS)
              for d in ([device] if device is not None else _devices(configs_dir, runs))]
    return pd.concat(blocks, ignore_index=True) if blocks else pd.DataFrame(
        columns=INVENTORY_COLUMNS)


def _devices(configs_dir, runs: Path) -> list[str]:
    """The GPU devices of a data folder (gpu_devices) and those configs_dir's provenance
    names (a configs folder given: its files' devices, wherever it lies), sorted."""
    return sorted(set(gpu_devices(runs)) | (tuned_file_devices(configs_dir) if configs_dir
                                            else set()))


def _inventory_rows(root: Path, device: str, runs: Path, required) -> list[dict]:
    """inventory's rows of one device: its files under `root`, their runs under `runs`."""
    rows = []
    for issue, backend, model, tp, ep, dtype in required:
        paths = file_paths(backend, model, tp, ep, dtype, device, root)
        prov = read_json(paths["gemm1"].parent / "provenance.json").get(
            paths["gemm1"].name) or {}
        keys, found = set(TUNE_TOKENS), True
        for p in paths.values():
            if not p.is_file():  # missing: no keys from it
                keys, found = set(), False
                continue
            keys &= set(read_table(p))  # malformed: CorruptFile, not "missing"
        run = str(prov.get("run") or "")
        man = read_json(runs / run / "manifest.json") if run else {}
        status = str(man.get("status") or "")
        plan = (man.get("config") or {}).get("search") or {}
        missing = [t for t in TUNE_TOKENS if t not in keys]
        rows.append(dict(
            device=device, issue=issue, backend=backend, model=model,
            sharding=sharding_name(tp, ep),
            dtype=dtype, file=paths["gemm1"].name if found else "", keys=len(keys),
            missing_keys=", ".join(map(str, missing)), run=run, run_status=status,
            candidates=prov.get("candidates_timed"), written=str(prov.get("written") or "")[:10],
            commit=str(prov.get("git_commit") or "")[:7],
            holds_grid=bool(found and not missing and run and status == "complete"),
            # the search's neighbour-key pass (0: searched before it; None: no run read)
            near_keys=int(plan.get("near_keys", 0)) if man else None))
    return rows


@takes(data_dir=FOLDER | None, runs=RUNS | None)
def left(mode: str, device: str, backends=None, data_dir=None, configs_dir=None,
         required=None, runs=None) -> list[str]:
    """The work left on `device` (a GPU's name, as torch gives it) on its required shapes
    (required_for), as SHAPES words (the device scripts' default, so the same command
    resumes until nothing is left). `tune`: the shapes whose
    file does not hold the grid, searches already started first (they resume). `sweep`:
    the shapes whose file holds the grid but that lack a tuned-against-default point
    measured with it at some key of TUNE_TOKENS (current_pairs over data_dir's runs); for
    vllm, against vLLM as shipped at SEED_SWEEP_TOKENS: its shipped file (published_pairs,
    the same rule) or, where vLLM ships none for the shape, its default (current_pairs).
    `backends`: only these (e.g. ("vllm",)); None: all. `runs`: data_dir's by default (of
    them, those measured on `device`)."""
    from ...storage.store import data_dir as default_data
    if not isinstance(mode, str) or mode not in ("tune", "sweep"):
        raise UsageError(f"left: mode is tune or sweep, not {validate.shown(mode)}")
    validate.text(device, "left: device", "the GPU's name as torch gives it, e.g. "
                  "'NVIDIA H200' (the device scripts pass $GPU_NAME)")
    if not is_gpu(device):  # was: a GPU's required shapes answered for the CPU
        raise UsageError(f"left: device {device!r} is not a GPU: the tuned files and the "
                         "searches left are a GPU's; give its name, e.g. 'NVIDIA H200'")
    if isinstance(backends, str):  # one name (was read as a string to find names in)
        backends = (backends,)
    required = check_required(required_for(device) if required is None else required, "left")
    known = sorted({r[1] for r in REQUIRED + REQUIRED_63 + required})
    bad = [b for b in backends or () if b not in known]
    if bad:  # was: nothing left, and a device script that had nothing to do
        raise UsageError(f"left: backends {', '.join(map(repr, bad))} not among the required "
                         f"shapes' ({', '.join(known)})")
    check_folders("left", data_dir=data_dir, configs_dir=configs_dir)  # was: all left, or none
    root = Path(data_dir) if data_dir is not None else default_data()
    inv = inventory(configs_dir, device, required=required, data_dir=root)
    todo = [(x, shape_word(b, m, tp, ep, dt)) for x, (_, b, m, tp, ep, dt)
            in zip(inv.to_dict("records"), required) if backends is None or b in backends]
    if mode == "tune":
        started = [w for x, w in todo
                   if not x["holds_grid"] and (root / search_run(w, device)).is_dir()]
        return started + [w for x, w in todo if not x["holds_grid"] and w not in started]
    from .published import published_pairs
    runs = runs_on(every_run(root) if runs is None else list(runs), device)
    pairs, _ = current_pairs(runs, configs_dir)
    pairs = shape_pairs(pairs, published_pairs(runs, configs_dir, root))
    have = {(b, m, sharding_name(tp, ep), dt): set(g["tokens"]) for (b, m, tp, ep, dt), g
            in pairs.groupby(["backend", "model", "tp", "ep", "dtype"])}
    return [w for x, w in todo if x["holds_grid"] and not set(
        SEED_SWEEP_TOKENS if x["backend"] == "vllm" else TUNE_TOKENS) <= have.get(
        (x["backend"], x["model"], x["sharding"], x["dtype"]), set())]


@takes(pairs=FRAME, pub=frame("backend"))
def shape_pairs(pairs: pd.DataFrame, pub: pd.DataFrame) -> pd.DataFrame:
    """A required shape's evidence: current_pairs (for vllm, vLLM's default where it ships no
    file for the shape) and vllm's published_pairs (vLLM as shipped with its own file). Was:
    vllm's current pairs dropped, so a shape vLLM ships no file for stayed left forever."""
    return pd.concat([pairs, pub[pub["backend"] == "vllm"]])


@takes(runs=RUNS)
def current_pairs(runs, configs_dir=None) -> tuple[pd.DataFrame, int]:
    """(pairs, stale): per point and tunable backend, default and tuned from the newest run
    (runs newest first) where both are ok in graph with the deployment's glue and the tuned
    row was measured after its committed file was written: default_us, tuned_us,
    default_over_tuned, tuned_point_id, tuned pct_of_roof, run_id, sharding; `stale`: the
    points whose tuned rows all predate their file. Once per runs inside ledger.shared()."""
    check_folders("current_pairs", configs_dir=configs_dir)  # was: no pair, every point stale
    runs = lg.opened(runs)
    return lg.memo(("current_pairs", str(configs_dir), lg.run_paths(runs)),
                   lambda: _current_pairs(runs, configs_dir))


def _current_pairs(runs, configs_dir) -> tuple[pd.DataFrame, int]:
    out, seen, stale = [], set(), set()
    for r in runs:
        res = with_device(r)
        if r.manifest.get("kind") in ("tune", "import") or "config" not in res or not len(res):
            continue
        j = default_and_tuned(res)
        root = str(configs_folder(configs_dir, r.device))
        for x in j.to_dict("records"):
            k = tuple(x[c] for c in PAIR_KEY)
            if k in seen:
                continue
            if is_history(root, x, r.device):
                stale.add(k)
                continue
            seen.add(k)
            out.append({**{c: x[c] for c in PAIR_KEY}, "default_us": x["median_us_d"],
                        "tuned_us": x["median_us_t"], "point_id": x["point_id_t"],
                        "default_point_id": x["point_id_d"],
                        "pct_of_roof": x["pct_of_roof_t"], "experts_hit": x["experts_hit_t"],
                        "git_commit": x["git_commit_t"], "run_id": r.run_id,
                        "flops": x["flops_t"], "bytes": x["bytes_t"]})
    cols = PAIR_KEY + ["default_us", "tuned_us", "point_id", "default_point_id", "pct_of_roof",
                       "experts_hit", "git_commit", "run_id", "flops", "bytes"]
    p = pd.DataFrame(out, columns=cols)
    p["experts_hit"] = pd.to_numeric(p["experts_hit"], errors="coerce")
    p["sharding"] = [sharding_name(t, e) for t, e in zip(p["tp"], p["ep"])]
    p["default_over_tuned"] = p["default_us"] / p["tuned_us"]
    return p, len(stale - seen)


@takes("tuned.default_and_tuned", res=columns("model", "tp", "ep", "ep_rank", "dtype", "routing",
       "tokens", "backend", "mode", "config", "median_us", "point_id"))
def default_and_tuned(res: pd.DataFrame) -> pd.DataFrame:
    """One run's default and tuned rows of the same point side by side (suffixes _d, _t):
    the deployment's rows (deployed_rows), a published tuning never the default (vLLM as
    shipped reads its own tuned file: published.py pairs it). experts_hit: NaN where the
    run lacks it."""
    g = deployed_rows(res)
    g = g[~published_rows(g)].reindex(columns=PAIR_KEY + [
        "config", "median_us", "point_id", "pct_of_roof", "experts_hit", "git_commit",
        "measured_at", "flops", "bytes"])
    return g[g["config"] == "default"].merge(g[g["config"] == "tuned"], on=PAIR_KEY,
                                             suffixes=("_d", "_t"))


@takes("tuned.with_two_t", pairs=columns(*PAIR_KEY, "tuned_us"))
def with_two_t(pairs: pd.DataFrame) -> pd.DataFrame:
    """The pairs with two_t_over_t: the tuned us at 2T over the tuned us at T of the same
    shape and backend (NaN where 2T is not measured; below 1: T is slower than 2T), and
    experts_hit_2t: the local experts the routing hit at 2T (the tuned row's; NaN where 2T
    is not measured or its run lacks experts_hit, and experts_hit NaN where pairs lack it)."""
    shape = [c for c in PAIR_KEY if c != "tokens"]
    if "experts_hit" not in pairs:
        pairs = pairs.assign(experts_hit=np.nan)
    at = pairs.set_index(shape + ["tokens"])[["tuned_us", "experts_hit"]]
    keys = [tuple(x[c] for c in shape) + (2 * x["tokens"],) for x in pairs.to_dict("records")]
    nxt = at.reindex(pd.MultiIndex.from_tuples(keys, names=at.index.names)) if keys else at
    return pairs.assign(
        two_t_over_t=nxt["tuned_us"].to_numpy(dtype=float) / pairs["tuned_us"].to_numpy(),
        experts_hit_2t=pd.to_numeric(nxt["experts_hit"], errors="coerce").to_numpy(dtype=float))


@takes("tuned.two_t_misses", pairs=columns(*PAIR_KEY, "tuned_us"))
def two_t_misses(pairs: pd.DataFrame) -> pd.DataFrame:
    """The points slower at T than at 2T (with_two_t's two_t_over_t below 1), each with
    the local experts the routing hit at T (experts_hit) and at 2T (experts_hit_2t) and
    `routing`: True where T hit more of them than 2T (the routed batch gives T more GEMM
    work than 2T: the miss is a property of the routing, not of the tuned configuration);
    False where it hit the same or fewer, or either count is unknown."""
    w = with_two_t(pairs)
    m = w[w["two_t_over_t"] < 1]
    cols = ["backend", "model", "sharding", "dtype", "tokens", "two_t_over_t", "experts_hit",
            "experts_hit_2t", "run_id"]
    m = m.reindex(columns=cols).assign(routing=m["experts_hit"] > m["experts_hit_2t"])
    return m.sort_values(["routing", "two_t_over_t"], ascending=[False, True]).reset_index(
        drop=True)


@takes("tuned.tuning_metrics", pairs=columns(*PAIR_KEY, "tuned_us", "default_over_tuned"))
def tuning_metrics(pairs: pd.DataFrame) -> pd.DataFrame:
    """default_over_tuned per pair (on the tuned point) and two_t_over_t (with_two_t) where
    2T is measured (on the point at T)."""
    if not len(pairs):
        return pd.DataFrame(columns=METRIC_COLUMNS)
    p = with_two_t(pairs).assign(median_us=pairs["tuned_us"],
                                 backend=pairs["backend"] + " tuned")
    t2 = p[p["two_t_over_t"].notna()]
    return metrics._concat([metrics.metric_rows(p, "default_over_tuned", "default_over_tuned"),
                            metrics.metric_rows(t2, "two_t_over_t", "two_t_over_t")])


# the columns a tune run's tables are read by (a table without them: the run passed over)
TUNE_TABLE_NEEDS = {"candidates": ("model", "tp", "ep", "dtype", "tokens", "stage", "status"),
                    "winners": ("backend", "model", "tp", "ep", "ep_rank", "dtype", "tokens",
                                "measured_at"),
                    "verify": ("backend", "model", "tp", "ep", "ep_rank", "dtype", "tokens",
                               "measured_at")}


@takes(folder=FOLDER, table=TEXT)
def tune_table(folder: Path, table: str) -> tuple[dict, pd.DataFrame | None] | None:
    """A tune or verify run folder's manifest and `<table>.parquet` (None when absent);
    None, said once on stderr, when either is unreadable or the table lacks the columns
    it is read by: one broken run does not hide the others (find_runs' rule). Read once
    per folder and table inside ledger.shared() (findings asks for a run's candidates in
    tune_runs and again in tune_section)."""
    return lg.memo(("tune_table", os.path.realpath(folder), table),
                   lambda: _tune_table(Path(folder), table))


def _tune_table(folder: Path, table: str) -> tuple[dict, pd.DataFrame | None] | None:
    from ...core.errors import CorruptFile
    from ...storage.store import _read, _warn_once, read_json
    try:
        return (read_json(folder / "manifest.json"),
                _read(folder / f"{table}.parquet", TUNE_TABLE_NEEDS.get(table)))
    except CorruptFile as exc:
        _warn_once(f"moe-lab: warning: passed over run {folder.name}: {exc}")
        return None


@takes(device=TEXT | None)
def tune_runs(device: str | None = None) -> list:
    """The tune run folders under data_dir() (candidates.parquet, no results: find_runs
    does not list them) measured on `device` (their manifest's, runs.manifest_device; None:
    any), newest first, as Runs with empty tables."""
    from ...storage.scope import visible
    from ...storage.store import Run, data_dir
    out = []
    for p in sorted(filter(visible, data_dir().iterdir())):
        if (p / "candidates.parquet").is_file() and (p / "manifest.json").is_file():
            got = tune_table(p, "candidates")  # unreadable: passed over, said once
            if got is not None and got[0].get("kind") == "tune" and (
                    device is None or manifest_device(got[0]) == device):
                out.append(Run(p, got[0], pd.DataFrame(), pd.DataFrame()))
    return sorted(out, key=lambda r: (str(r.manifest.get("started") or ""), r.run_id),
                  reverse=True)


@takes(table=TEXT, root=FOLDER | None)
def newest_of(table: str, root=None, where=None) -> pd.DataFrame:
    """The rows of `<table>.parquet` (winners, verify) of every run folder under root
    (default data_dir()) that has one and whose manifest `where` accepts (None: every),
    each with its run_id; per point (backend, model, tp, ep, ep_rank, dtype, tokens) the
    newest (measured_at, then the folder's name). Empty when none."""
    from ...storage.scope import visible
    from ...storage.store import data_dir
    root = Path(root or data_dir())
    check_folders(f"the {table} runs", root=root)  # was: FileNotFoundError, or NotADirectoryError
    found = []
    for p in sorted(filter(visible, root.iterdir())):
        got = tune_table(p, table) if (p / f"{table}.parquet").is_file() else None
        if got is not None and (where is None or where(got[0])):
            found.append(got[1].assign(run_id=p.name))
    if not found:
        return pd.DataFrame()
    w = pd.concat(found, ignore_index=True).sort_values(["measured_at", "run_id"])
    return w.drop_duplicates(["backend", "model", "tp", "ep", "ep_rank", "dtype", "tokens"],
                             keep="last").reset_index(drop=True)


def on_device(device: str | None):
    """A `where` for newest_of: a tune run measured on `device` (None: any)."""
    return lambda m: device is None or (m.get("environment") or {}).get("device_name") == device


@takes(root=FOLDER | None)
def search_spread(root=None, device: str | None = None, backend: str | None = None
                  ) -> pd.DataFrame:
    """Per tuned point (the newest winner of the tune runs under root, default data_dir()):
    the winner's us beside the default's, and the search's spread there: the best, median
    and worst of every candidate of its first rung (each coarse configuration of the first
    GEMM searched, timed at the short repetition, so its best can sit above the winner,
    which is timed at full length with both GEMMs tuned), how many, and worst / best (what
    a bad launch configuration costs). `device`: its searches only (None: any device's); a
    device with data under root (gpu_devices) but no search answers empty; one without, or a
    backend no tuned point has, where others have: UsageError."""
    for arg, v in (("device", device), ("backend", backend)):
        if v is not None:
            validate.text(v, f"search_spread: {arg}", "a name (a str), or None for any")
    w = newest_of("winners", root, lambda m: m.get("kind") == "tune" and on_device(device)(m))
    if not len(w) and device is not None and device not in gpu_devices(root):
        # was: an empty table, as if unsearched
        _none_of("device", device, newest_of("winners", root, lambda m: m.get("kind") == "tune"),
                 root)
    cols = ["backend", "model", "sharding", "dtype", "tokens", "median_us", "default_us",
            "search_best_us", "search_median_us", "search_worst_us", "search_candidates",
            "run_id", "git_commit", "device"]
    if not len(w) or "search_best_us" not in w:  # no search: empty, with the table's columns
        return pd.DataFrame(columns=[{"median_us": "winner_us"}.get(c, c) for c in cols] + ["worst_over_best"])
    w = w[w["search_best_us"].notna()]
    if backend is not None:
        _none_of("backend", backend, w, root)
        w = w[w["backend"] == backend]
    w = w.assign(sharding=[sharding_name(t, e) for t, e in zip(w["tp"], w["ep"])])
    out = w[cols].rename(columns={"median_us": "winner_us"})
    out["worst_over_best"] = out["search_worst_us"] / out["search_best_us"]
    return out.sort_values(["backend", "model", "sharding", "dtype", "tokens"]).reset_index(
        drop=True)


def _none_of(what: str, value: str, w: pd.DataFrame, root) -> None:
    """UsageError when the winners `w` hold some point but none of `value` in column `what`."""
    from ...storage.store import data_dir
    have = sorted(set(w[what].astype(str))) if what in w else []
    if have and value not in have:
        raise UsageError(f"search_spread: {what} {value!r}: no tuned point under "
                         f"{Path(root or data_dir())} is of it; give one of {', '.join(have)}, "
                         "or None for any")


@takes(root=FOLDER | None)
def tune_run(run_id: str, root=None):
    """The tune run folder `run_id` (under root, default data_dir()) as a Run with empty
    tables (its manifest for the footer, the rows drawn for the commits); a run of another
    kind (a sweep): UsageError."""
    from ...storage.store import Run, data_dir, read_json
    p = Path(root or data_dir()) / str(run_id)
    if str(run_id).strip() and (set(str(run_id)) & {"/", "\\"} or str(run_id) in (".", "..")):
        # was: `a/../t1` opened t1, `../x` a folder outside the data folder
        raise UsageError(f"tune_run: run_id {run_id!r}: a run id is one folder name (no '/' "
                         f"or '..') under {Path(root or data_dir())}")
    if not str(run_id).strip() or not (p / "manifest.json").is_file():  # was: an empty Run
        raise UsageError(f"tune_run: no run folder {validate.shown(run_id)} with a manifest under "
                         f"{Path(root or data_dir())}")
    manifest = read_json(p / "manifest.json")
    if manifest.get("kind") != "tune":  # was: a sweep read as a search, its rows dropped
        raise UsageError(f"tune_run: run_id {run_id!r} is a {manifest.get('kind') or 'sweep'} "
                         "run; give a tune run's id (`moe-lab tune` writes one), or open this "
                         "one with open_run")
    return Run(p, manifest, pd.DataFrame(), pd.DataFrame())


VERIFY_COLUMNS = ["backend", "model", "tp", "ep", "ep_rank", "sharding", "dtype", "tokens",  # verify_points' always
                  "committed_us", "fastest_us", "search_best_us", "found_us", "value", "median_us",
                  "verdict", "device", "run_id"]

@takes(root=FOLDER | None)
def verify_points(root=None, device: str | None = None) -> pd.DataFrame:
    """Per point of the verify runs under root (default data_dir(); `moe-lab tune --verify`,
    verify.parquet) measured on `device` (None: any), the newest: the committed winner's
    us, the best the second search
    found (the fastest correct candidate over the margin where there is one, else its
    best), value = committed / that (above VERIFY_MARGIN: the second search found a
    faster configuration), the verdict, run_id. Empty when no verify run is committed."""
    v = newest_of("verify", root, on_device(device))
    if not len(v):  # empty, with the columns every reader takes (was a frame without any)
        return pd.DataFrame(columns=VERIFY_COLUMNS)
    for c in ("committed_us", "fastest_us", "search_best_us"):
        v[c] = pd.to_numeric(v[c], errors="coerce") if c in v else np.nan
    found_us = v["fastest_us"].where(v["fastest_us"].notna(), v["search_best_us"])
    v = v.assign(found_us=found_us, value=v["committed_us"] / found_us,
                 median_us=v["committed_us"],
                 sharding=[sharding_name(t, e) for t, e in zip(v["tp"], v["ep"])])
    return v.reset_index(drop=True)


@takes("tuned.verify_metrics", points=columns("value"))
def verify_metrics(points: pd.DataFrame) -> pd.DataFrame:
    """The verify target's metric frame (committed / found per point searched again)."""
    p = points[points["value"].notna()] if len(points) else points
    if not len(p):
        return pd.DataFrame(columns=METRIC_COLUMNS)
    return metrics.metric_rows(p.assign(point_id=""), "verify_ratio", "value")


@takes("tuned.verify_runs", points=columns("run_id"))
def verify_runs(points: pd.DataFrame) -> list:
    """The verify runs behind `points` (verify_points), as Runs, newest first."""
    return [tune_run(r) for r in sorted(set(points["run_id"]), reverse=True)] if len(points) else []
