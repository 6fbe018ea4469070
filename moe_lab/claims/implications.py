"""What a serving claim implies for the MoE kernels.

A decode step of a batch of C sequences takes about one TPOT. If a PR cut mean TPOT
from t0 to t1 and only the MoE layers changed, each of the model's L MoE layers must
have become (t0 - t1) / L faster. This module puts that implied per-layer saving beside
the layer's roofline floor on the claim's GPU for the decode batch (C tokens per step,
the claim's TP/EP) and beside our measured kernel times where a committed run has them.

Reading it: the baseline MoE layer took at least `saved + floor` (it cannot have been
faster than the floor after the change); `saved / floor` large means the baseline was far
from the roofline (or the saving came from elsewhere: eager-mode launch overhead, other
aiter kernels the flags switched on, routing).

torch and pandas are imported where used: `moe-lab claims --help` must not load them.
"""
from __future__ import annotations

import math
from pathlib import Path

from ..core.constants import CLAIM_GPU
from ..core.errors import UsageError
from .registry import checked, load_registry

# Weight quantisation of the FP8 checkpoints of the seeds (per-config dtype "fp8").
FP8_SCALES = {
    "deepseek-r1": "block:128",  # DeepSeek-R1 ships 128x128 block-scaled fp8 weights
    "llama4-maverick-128e": "per-channel",  # Llama-4-Maverick-...-FP8: per-channel weights
    "llama4-scout-16e": "per-channel",
    "qwen3-235b-a22b": "block:128",
}
# ... and the moe-lab dtype scheme whose rows measure that checkpoint's layer
FP8_DTYPE = {"block:128": "fp8-block128", "per-channel": "fp8-channel", "per-tensor": "fp8-tensor"}


def measured_dtype(preset: str, dtype: str) -> str:
    """The rows' dtype that measures a claim's dtype: a claim's "fp8" is the scheme its
    checkpoint ships (fp8-block128 for DeepSeek-R1, fp8-channel for Llama-4 FP8)."""
    return FP8_DTYPE[FP8_SCALES.get(preset, "per-channel")] if dtype == "fp8" else dtype

COLUMNS = ["config", "source", "model", "dtype", "gpu", "tp", "ep", "tokens", "moe_layers",
           "tpot_base_ms", "tpot_new_ms", "itl_base_ms", "itl_new_ms", "step_saved_ms",
           "saved_per_layer_us", "saved_per_layer_itl_us", "floor_us", "bound",
           "min_baseline_layer_us", "saved_over_floor", "measured_us", "measured_backend",
           "measured_device", "measured_run", "measured_commit", "note"]


MS_PER = {"s": 1000.0, "ms": 1.0, "us": 0.001}  # a latency claim's unit, in ms


def _metric(reg: dict, config: str, metric: str) -> tuple[float, float]:
    """(baseline, new) of the config's perf claim of a latency metric, in ms whatever unit
    the claim is in (a registry in s read as ms made every saving 1000x too small); NaN
    without such a claim; a UsageError for a unit that is not a time."""
    for c in reg["claims"]:
        if c["kind"] == "perf" and c["config"] == config and c["metric"] == metric:
            if c["unit"] not in MS_PER:
                raise UsageError(f"claim {c['id']}: unit {c['unit']!r} is not a time "
                                 f"({', '.join(MS_PER)}); {metric} is a latency")
            return c["baseline"] * MS_PER[c["unit"]], c["new"] * MS_PER[c["unit"]]
    return math.nan, math.nan


def device_specs() -> dict | None:
    """The vendor device specs the roofline knows, by key ("mi300x", "h200-sxm", ...);
    None when the roofline modules cannot be imported."""
    try:
        from ..core.devices import DEVICE_SPECS  # where the specs live since moe_lab.devices
    except ImportError:
        try:
            from ..cost.roofline import DEVICE_SPECS
        except ImportError:
            return None
    return DEVICE_SPECS


def check_gpu(gpu: str) -> None:
    """UsageError naming the known GPUs when `gpu` is not a device spec key."""
    known = device_specs()
    if known is not None and gpu not in known:
        raise UsageError(f"unknown GPU {gpu!r}; known GPUs: {', '.join(sorted(known))}")


def roofline_floor(preset: str, tokens: int, tp: int, ep: int, dtype: str, gpu: str):
    """(floor_us, bound, note) from moe_lab.cost.roofline; NaN and a note if unavailable."""
    try:
        from ..cost import roofline
    except ImportError as exc:
        return math.nan, "", f"roofline unavailable ({exc})"
    specs = device_specs()
    if specs is None or gpu not in specs:
        return math.nan, "", f"no device spec for GPU {gpu!r}"
    spec = specs[gpu]
    from ..core.problems import make_problem
    try:
        prob = make_problem(preset, tokens, "bf16", tp=tp, ep=ep)
        kw = {}
        if dtype == "fp8":
            kw = dict(weight_dtype="fp8", scales=FP8_SCALES.get(preset, "per-channel"))
        c = roofline.cost(prob, **kw)
        fl = roofline.floor_us(c, spec, dtype=dtype) if dtype == "fp8" else roofline.floor_us(c, spec)
        bnd = roofline.bound(c, spec, dtype=dtype) if hasattr(roofline, "bound") else ""
        return float(fl), bnd, ""
    except Exception as exc:  # the roofline module is young: report, do not crash
        return math.nan, "", f"roofline failed: {type(exc).__name__}: {exc}"


MEASURED_COLUMNS = {"model", "tp", "ep", "backend", "mode", "tokens", "status", "median_us"}


def measured_folders(run: str | Path | None = None) -> tuple[str, list[Path]]:
    """(where, run folders) the measured times are read from. `run`: a run folder or a run
    id under the data folder (that run alone), a folder of run folders (every one), or
    None: every run of the data folder that may be a default (none marked running or
    failed: moe_lab.storage.store.Run.may_be_default)."""
    from ..analysis.runs import default_runs
    from ..storage.store import MANIFEST, RESULTS, data_dir, open_run
    if run is None:  # the runs analysis.runs chooses: those that may be a default
        return str(data_dir()), sorted(r.path for r in default_runs())
    path = Path(run)
    if not path.is_dir() and not path.is_absolute() and (data_dir() / str(run)).is_dir():
        if ".." in path.parts:  # an id out of the data folder and back: one line (open_run's)
            from ..core.validate import run_folder
            run_folder(run, data_dir())
        path = data_dir() / str(run)  # a run id
    if path.exists() and not path.is_dir():
        raise UsageError(f"runs directory {path} is not a directory")
    if (path / RESULTS).is_file():
        open_run(path)  # a run that cannot be read is refused here, in one line
        return str(path), [path]
    if (path / MANIFEST).is_file():  # a run without rows (a tune run): was read as a folder
        kind = open_run(path).manifest.get("kind") or "sweep"  # of runs, 'no run in <it>'
        raise UsageError(f"{run} is a {kind} run without measured points: give a sweep run, "
                         "a run id or a folder of runs")
    if not path.is_dir():
        raise UsageError(f"no run folder, run id or folder of runs {run}")
    return str(run), sorted(p.parent for p in path.glob(f"*/{RESULTS}"))


def load_measured(runs_dir: str | Path | None = None, folders: list[Path] | None = None):
    """All results.parquet rows with status ok of the runs measured_folders(runs_dir)
    names (default: the data folder's), plus run_id and device; None if there are none.
    `folders`: those run folders, resolved by the caller already (measured_folders(
    runs_dir)[1]: not looked up and read again). A results.parquet or manifest.json that
    cannot be read, or a results table without the columns used here, is a UsageError
    naming the file: a corrupt run is never skipped silently."""
    import pandas as pd

    from ..storage.store import data_dir

    from ..core.atomic import read_parquet
    if folders is None:  # else resolved by the caller (measured_folders' checks made there)
        if runs_dir is not None and Path(runs_dir).exists() and not Path(runs_dir).is_dir():
            raise UsageError(f"runs directory {runs_dir} is not a directory")
        if runs_dir is None and data_dir().exists() and not data_dir().is_dir():
            # was: read as no run at all ("no committed run yet in data/runs"), exit 0
            raise UsageError(f"the data folder {data_dir()} ($MOE_LAB_DATA) is a file, not "
                             "a folder")
        if runs_dir is not None and not Path(runs_dir).exists() and not (
                data_dir() / str(runs_dir)).is_dir():
            return None  # a folder not made yet: nothing measured there
        folders = measured_folders(runs_dir)[1]
    frames = []
    for p in [Path(f) / "results.parquet" for f in folders]:
        try:
            df = read_parquet(p)
        except Exception as exc:
            raise UsageError(f"{p}: cannot read this run's results "
                             f"({_one_line(exc)})") from None
        missing = MEASURED_COLUMNS - set(df.columns)
        if missing:
            raise UsageError(f"{p}: not a results table (no column "
                             f"{', '.join(sorted(missing))})")
        df = df[df["status"] == "ok"].copy()
        df["run_id"] = p.parent.name
        df["device"], df["commit"] = _run_device(p.parent / "manifest.json")
        frames.append(df)
    if not frames:
        return None
    return pd.concat(frames, ignore_index=True)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def _run_device(manifest: Path) -> tuple[str, str]:
    """(device name, git commit) a run's manifest records; "" for what it does not."""
    import json
    if not manifest.is_file():
        return "", ""
    try:
        m = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{manifest}: cannot read this run's manifest "
                         f"({_one_line(exc)})") from None
    if not isinstance(m, dict):
        raise UsageError(f"{manifest}: not a run manifest (a JSON {type(m).__name__})")
    env = m.get("environment") if isinstance(m.get("environment"), dict) else {}
    commit = str(env.get("git_commit") or "")
    if env.get("device_name"):  # what `moe-lab sweep` writes
        return str(env["device_name"]), commit
    dev = m.get("device")
    return (str(dev.get("name", "")) if isinstance(dev, dict) else str(dev or "")), commit


def implications(registry: dict | None = None, runs_dir: str | Path | None = None,
                 gpu: str | None = None, folders: list[Path] | None = None):
    """One row per performance configuration of the registry (see module docstring).
    runs_dir: where the measured runs are (measured_folders: a run, a folder of runs, None
    the data folder's); folders: its run folders when the caller resolved them already
    (measured_folders(runs_dir)[1]: read once); gpu: a device spec key
    for every row instead of each configuration's own GPU. An unknown GPU or a run that
    cannot be read is a UsageError."""
    import pandas as pd

    from ..core.problems import PRESETS
    reg = checked(registry) if registry is not None else load_registry()
    if gpu is not None:
        check_gpu(gpu)
    measured = load_measured(runs_dir, folders)
    from ..storage.store import data_dir
    where = data_dir() if runs_dir is None else runs_dir
    rows = []
    for cid, cfg in reg["configs"].items():
        if "concurrency" not in cfg:
            continue  # accuracy configurations
        if cfg.get("preset") not in PRESETS:  # was: left out of the table without a word
            raise UsageError(f"config {cid}: model {cfg.get('preset')!r} is not one moe-lab "
                             f"knows ({', '.join(sorted(PRESETS))}): no layers, no floor")
        preset = cfg["preset"]
        spec = PRESETS[preset]
        tb, tn = _metric(reg, cid, "mean_tpot")
        ib, inn = _metric(reg, cid, "mean_itl")
        L = spec.moe_layers
        tokens, tp, ep = int(cfg["concurrency"]), int(cfg["tp"]), int(cfg.get("ep", 1) or 1)
        dev = gpu or cfg.get("gpu", CLAIM_GPU)
        check_gpu(dev)
        floor, bnd, note = roofline_floor(preset, tokens, tp, ep, cfg.get("dtype", "bf16"), dev)
        notes = [note] if note else []
        if math.isnan(tb):  # was: the configuration left out of the table without a word
            notes.append("no mean TPOT claim for this configuration: "
                         + ("the saving is mean ITL's" if not math.isnan(ib) else
                            "no saving to convert (the floor and the measured time stand alone)"))
        saved_ms = tb - tn
        per_layer = saved_ms * 1000 / L
        per_layer_itl = (ib - inn) * 1000 / L if not math.isnan(ib) else math.nan
        if not math.isnan(tb) and itl_is_better(tb, ib):
            notes.append(f"mean TPOT ({tb} ms) and mean ITL ({ib} ms) disagree by "
                         f"{(tb / ib - 1) * 100:+.0f}%: per-request TPOT is skewed by short "
                         "requests; the ITL-based saving is the better per-step estimate")
        if "--enforce-eager" in cfg.get("flags", []):
            notes.append("eager mode: part of the saving can be launch overhead, not kernel time")
        if cfg.get("gpu_note"):
            notes.append(cfg["gpu_note"])
        m_us, m_backend, m_run, m_dev, m_commit = math.nan, "", "", "", ""
        if measured is None:  # was 'in data/runs' whatever folder was given
            notes.append(f"no run in {where}: measured_us is NaN")
        else:
            sel = measured[(measured["model"] == preset) & (measured["tp"] == tp)
                           & (measured["ep"] == ep) & (measured["tokens"] == tokens)]
            want = measured_dtype(preset, cfg.get("dtype", "bf16"))
            if "dtype" in sel.columns:
                sel = sel[sel["dtype"] == want]
            if len(sel):
                best = sel.loc[sel["median_us"].idxmin()]
                m_us, m_backend = float(best["median_us"]), f"{best['backend']}/{best['mode']}"
                m_run, m_dev = str(best["run_id"]), str(best.get("device", ""))
                m_commit = str(best.get("commit", "") or "")
                notes.append(f"measured on {m_dev or 'the run device'}, not {dev}")
            else:
                notes.append(f"no committed measurement for {preset} TP{tp} EP{ep} "
                             f"T={tokens} {want}")
        rows.append(dict(
            config=cid, source=cfg["source"], model=preset, dtype=cfg.get("dtype", "bf16"),
            gpu=dev, tp=tp, ep=ep, tokens=tokens, moe_layers=L, tpot_base_ms=tb,
            tpot_new_ms=tn, itl_base_ms=ib, itl_new_ms=inn, step_saved_ms=saved_ms,
            saved_per_layer_us=per_layer, saved_per_layer_itl_us=per_layer_itl,
            floor_us=floor, bound=bnd,
            min_baseline_layer_us=per_layer + floor if not math.isnan(floor) else math.nan,
            saved_over_floor=per_layer / floor if floor and not math.isnan(floor) else math.nan,
            measured_us=m_us, measured_backend=m_backend, measured_device=m_dev,
            measured_run=m_run, measured_commit=m_commit, note="; ".join(notes)))
    return pd.DataFrame(rows, columns=COLUMNS)


ITL_TPOT_DISAGREE = 0.2  # past this, per-request TPOT is skewed by short requests


def itl_is_better(tpot_ms: float, itl_ms: float) -> bool:
    """Whether the ITL-based saving is the better per-step estimate: mean TPOT and mean ITL
    disagree by more than ITL_TPOT_DISAGREE (the note implications writes), or the
    configuration has a mean ITL claim and no mean TPOT one."""
    if math.isnan(itl_ms):
        return False
    return math.isnan(tpot_ms) or abs(tpot_ms / itl_ms - 1) > ITL_TPOT_DISAGREE  # ITL alone


def better_saving(imp):
    """Per row of implications(): the better saving per layer (`saved_us`) and its basis
    (`ITL` where itl_is_better, else `TPOT`)."""
    import pandas as pd
    itl = [itl_is_better(t, i) for t, i in zip(imp["tpot_base_ms"], imp["itl_base_ms"])]
    return pd.DataFrame({"saved_us": [a if b else c for a, b, c in zip(
        imp["saved_per_layer_itl_us"], itl, imp["saved_per_layer_us"])],
        "basis": ["ITL" if b else "TPOT" for b in itl]}, index=imp.index)


AVV_COLUMNS = ["run_id", "model", "tp", "ep", "dtype", "mode", "tokens", "aiter_us", "vllm_us",
               "vllm_over_aiter", "saved_us", "claim", "implied_saved_us",
               "implied_vllm_over_aiter"]


def aiter_vs_vllm(runs_dir: str | Path | None = None, imp=None):
    """The seeds' comparison measured: per run, shape, dtype, mode and token count where a
    run has both `aiter` and `vllm` ok rows (default config), vLLM's time over aiter's and
    the time aiter saves (vllm_us - aiter_us). Beside it, on the claims' own points (their
    model, TP/EP, checkpoint dtype and decode batch), what the claim implies: its saving per
    MoE layer (`imp.saved_per_layer_us`) and the ratio that saving makes of the measured
    vLLM layer, vllm_us / (vllm_us - saved). Empty when no run has both backends."""
    import pandas as pd
    measured = load_measured(runs_dir)
    if measured is None or not {"aiter", "vllm"} <= set(measured["backend"]):
        return pd.DataFrame(columns=AVV_COLUMNS)
    m = measured[measured["backend"].isin(["aiter", "vllm"])]
    for col, default in (("config", "default"), ("glue", "")):
        if col in m.columns:
            m = m[m[col].fillna(default).astype(str).isin([default, "fused"])]
    keys = ["run_id", "model", "tp", "ep", "dtype", "mode", "tokens"]
    t = m.pivot_table(index=keys, columns="backend", values="median_us", aggfunc="median")
    t = t.dropna(subset=[c for c in ("aiter", "vllm") if c in t.columns])
    if t.empty or not {"aiter", "vllm"} <= set(t.columns):
        return pd.DataFrame(columns=AVV_COLUMNS)
    out = t.reset_index().rename(columns={"aiter": "aiter_us", "vllm": "vllm_us"})
    out["vllm_over_aiter"] = out["vllm_us"] / out["aiter_us"]
    out["saved_us"] = out["vllm_us"] - out["aiter_us"]
    out["claim"], out["implied_saved_us"], out["implied_vllm_over_aiter"] = "", math.nan, math.nan
    for r in (imp.itertuples() if imp is not None else ()):
        hit = ((out["model"] == r.model) & (out["tp"] == r.tp) & (out["ep"] == r.ep)
               & (out["tokens"] == r.tokens)
               & (out["dtype"] == measured_dtype(r.model, r.dtype)))
        v = out.loc[hit, "vllm_us"]
        out.loc[hit, "claim"] = r.config
        out.loc[hit, "implied_saved_us"] = r.saved_per_layer_us
        out.loc[hit, "implied_vllm_over_aiter"] = (v / (v - r.saved_per_layer_us)).where(
            v > r.saved_per_layer_us)
    return out[AVV_COLUMNS].sort_values(keys).reset_index(drop=True)
