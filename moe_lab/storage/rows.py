"""The result row: every column a point's row can carry, declared once (name, type,
default, meaning). `store` types and orders frames by it and validates rows on write;
`points` builds every row from it. A new per-point column is one `Column` here and the
line that fills it in `points.fill_metrics`.

Kinds: int (nullable Int64), float (float64, NaN when unknown), str (object, None when
unknown), bool (nullable boolean). Columns not declared here may still appear (a
backend's or a verb's extras); they keep whatever type pandas gives them.
"""
from __future__ import annotations

import math
import numbers as _numbers
from dataclasses import dataclass

from ..core.devices import file_device_name

NAN = math.nan


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # int, float, str, bool
    default: object = None
    doc: str = ""
    core: bool = False  # a core column: every results.parquet has it, in this order


def _c(name, kind, default=None, doc="", core=False):
    return Column(name, kind, NAN if kind == "float" and default is None else default, doc, core)


STATUSES = ("ok", "incorrect", "unsupported", "unavailable", "failed", "oom", "timeout")
# statuses a resume measures again: `failed` is an error nobody classified, often of a value
# the rerun has corrected; the others say what the point is (incorrect, unsupported...)
RETRIED = ("failed",)

# point identity: every id field, then those that count only when set (so ids of rows
# written before they existed stay what they were)
ID_FIELDS = ("model", "tp", "ep", "ep_rank", "dtype", "backend", "mode", "tokens", "routing")
OPTIONAL_ID_FIELDS = ("wrapped", "config", "glue", "parallel", "world_size", "rank")
ID_DEFAULTS = {"wrapped": False, "config": "default", "glue": "", "parallel": "",
               "world_size": None, "rank": None}
PROVENANCE = ("git_commit", "device", "measured_at")

COLUMNS: tuple[Column, ...] = (
    # what the point is
    _c("model", "str", core=True, doc="model preset name (moe_lab.problems)"),
    _c("tp", "int", core=True, doc="tensor-parallel degree of the shape"),
    _c("ep", "int", core=True, doc="expert-parallel degree"),
    _c("ep_rank", "int", 0, core=True, doc="the EP rank whose experts are local"),
    _c("dtype", "str", core=True, doc="bf16, fp16 or an fp8 scheme (fp8-tensor, fp8-channel, fp8-block128)"),
    _c("backend", "str", core=True),
    _c("mode", "str", core=True, doc="eager, graph or compile:<variant>"),
    _c("tokens", "int", core=True),
    _c("routing", "str", "uniform", core=True),
    _c("wrapped", "bool", False, core=True, doc="compile: the backend as one custom op"),
    _c("config", "str", "default", core=True, doc="default, tuned or a config file"),
    _c("glue", "str", "", core=True,
       doc="the glue between kernels (moe_lab.glue): fused (one kernel per step, the "
           "default), aiter (aiter's own glue kernels where it ships one), naive (PyTorch "
           "elementwise glue, a labelled variant), '' where a backend has no choice"),
    # what happened
    _c("glue_used", "str", "", doc="the glue that ran (naive where a fused kernel cannot run here)"),
    _c("glue_notes", "str", "", doc="per glue step that fell back to naive: why"),
    _c("config_file", "str", doc="the launch-configuration file the backend's own lookup "
       "used at `config` default (its name, or `default` where it found none: vllm, "
       "aiter-triton); None where a backend has no such lookup"),
    _c("launch_config", "str", doc="the launch configuration each GEMM ran at the point's "
       "token count, JSON {stage: {BLOCK_SIZE_M: ..}} (the tunable Triton backends: vllm's "
       "from vLLM's own lookup); None where a backend has none or a row predates the column"),
    _c("backend_version", "str", doc="the library behind the backend and its version "
       "(`vllm 0.26.0`, `aiter ...`), where the backend names one"),
    _c("kernel_class", "str", doc="the library's experts class that ran (vLLM's Hopper paths; "
       "vllm-deployed: the class vLLM's own oracle picked for the point, and its backend)"),
    _c("status", "str", "ok", core=True, doc="one of " + ", ".join(STATUSES)),
    _c("error", "str", "", core=True),
    _c("median_us", "float", core=True, doc="median per-call time (eager: of the steady blocks)"),
    _c("p10_us", "float", core=True),
    _c("p90_us", "float", core=True),
    _c("n", "int", 0, core=True, doc="timed calls behind the statistics"),
    _c("median_all_us", "float", core=True, doc="median over every timed call, steady or not"),
    _c("steady_frac", "float", core=True, doc="share of the timed calls the statistics keep"),
    _c("kernel_us", "float", core=True, doc="profiler: device time of the point's kernels per call"),
    _c("max_rel_err", "float", core=True, doc="max |out - ref| / max |ref| on the point's inputs"),
    _c("flops", "float", core=True),
    _c("bytes", "float", core=True),
    _c("roof_us", "float", core=True, doc="the layer's floor: max(flops/peak, bytes/bandwidth)"),
    _c("pct_of_roof", "float", core=True, doc="100 * roof_us / median_us"),
    _c("warning", "str", "", core=True),
    _c("noisy", "bool", False, core=True, doc="(p90 - p10) / median > 0.1"),
    _c("git_commit", "str", core=True),
    _c("device", "str", core=True),
    _c("measured_at", "str", core=True),
    _c("point_id", "str", core=True),
    # facts of the point
    _c("sharding", "str", doc="TP8, TP8+EP8, ..."),
    _c("seed", "int"),
    _c("experts_hit", "float", doc="local experts with at least one routed pair"),
    _c("pairs", "float", doc="local (token, slot) pairs"),
    _c("threshold", "float", doc="the correctness limit max_rel_err is held to"),
    _c("inputs_digest", "str"),
    _c("ceiling_source", "str"),
    _c("dense_gemm_us", "float"),
    _c("dense_tflops", "float"),
    _c("eager_profiled_us", "float"),
    _c("note", "str"),
    # compile
    _c("compile_s", "float"),
    _c("graph_breaks", "float"),
    _c("recompiles", "float"),
    # distributed
    _c("parallel", "str"),
    _c("world_size", "int"),
    _c("rank", "int"),
    _c("dist_backend", "str"),
    _c("layer_us", "float"),
    _c("predicted_us", "float"),
    _c("imbalance", "float"),
    _c("imbalance_time", "float"),
    _c("expert_us", "float"),
    _c("expert_p10_us", "float"),
    _c("expert_p90_us", "float"),
    _c("collective_us", "float"),
    _c("expert_sync_us", "float"),
    _c("rank_layer_us", "float"),
    _c("sent_bytes", "float"),
    _c("tokens_local", "float"),
)

BY_NAME = {c.name: c for c in COLUMNS}
RESULT_COLUMNS = tuple(c.name for c in COLUMNS if c.core)
KERNEL_COLUMNS = ("point_id", "kernel", "phase", "calls", "total_us")
INT_COLUMNS = tuple(c.name for c in COLUMNS if c.kind == "int")
FLOAT_COLUMNS = tuple(c.name for c in COLUMNS if c.kind == "float") + ("calls", "total_us")
STR_COLUMNS = tuple(c.name for c in COLUMNS if c.kind == "str") + ("kernel", "phase")
BOOL_COLUMNS = tuple(c.name for c in COLUMNS if c.kind == "bool")


def ok_rows(df):
    """Correct, timed rows: status `ok` (where the frame has a status) and a median_us > 0.
    The one rule for which rows are points (figures, tables, the ledger): a row that is
    `incorrect` (or failed, oom, timed out) is never one, whatever time it has."""
    import pandas as pd
    d = df[df["status"] == "ok"] if "status" in df.columns else df
    if "median_us" in d.columns:
        d = d[pd.to_numeric(d["median_us"], errors="coerce") > 0]
    return d


DEPLOYED_GLUE = ("", "fused")  # the glue a deployment runs (rows before the glue column: '')


def deployed_rows(df, mode: str | None = "graph"):
    """The ok rows (ok_rows) of `mode` (None: every mode) with the glue a deployment runs:
    the one rule for the rows that compare configurations and backends (tuned against
    default or a published file, the workbook's own layers against vLLM)."""
    d = ok_rows(df)
    if mode is not None:
        d = d[d["mode"] == mode]
    if "glue" in d.columns:
        d = d[d["glue"].fillna("").astype(str).isin(DEPLOYED_GLUE)]
    return d


PUBLISHED_PREFIX = "E="  # a published tuning's file name, as vLLM names them (E=..,N=..,device_name=..)


def vllm_named(name) -> bool:
    """A file name as vLLM names its tunings (E=..,N=..,device_name=...json)."""
    from pathlib import Path
    return Path(str(name)).name.startswith(PUBLISHED_PREFIX) and str(name).endswith(".json")


def published_rows(df):
    """Which rows ran a published tuning for their device: `--config FILE` with a file
    named as vLLM names its tunings, or `--config default` of a backend that read such a
    file of its own (vLLM as shipped: `config_file` names its shipped file; a backend's
    default that names none, or another device's file, is a default)."""
    import pandas as pd

    def col(c):
        return df[c].fillna("").astype(str) if c in df else pd.Series("", index=df.index)
    cfg, used, dev = col("config"), col("config_file"), col("device")
    own = [c == "default" and vllm_named(u) and f"device_name={file_device_name(d)}" in u
           for c, u, d in zip(cfg, used, dev)]
    return pd.Series([vllm_named(c) or o for c, o in zip(cfg, own)], index=df.index, dtype=bool)


def spread(df):
    """(p90 - p10) / median per row: the timer's spread (NaN without the three)."""
    import pandas as pd
    if not {"p10_us", "p90_us", "median_us"} <= set(df.columns):
        return pd.Series(float("nan"), index=df.index)
    med = pd.to_numeric(df["median_us"], errors="coerce")
    return (pd.to_numeric(df["p90_us"], errors="coerce")
            - pd.to_numeric(df["p10_us"], errors="coerce")) / med.where(med > 0)


def noisy(df):
    """Per row: flagged `noisy` when measured (vocabulary.NOISE_LIMIT), or its spread above
    that limit (rows of a run that kept no flag)."""
    from .vocabulary import NOISE_LIMIT
    flag = (df["noisy"].astype("boolean").fillna(False).astype(bool) if "noisy" in df.columns
            else False)
    return (spread(df) > NOISE_LIMIT) | flag


def defaults() -> dict:
    """Every core column at its default (what a row says before anything is measured)."""
    return {c.name: c.default for c in COLUMNS if c.core}


def validate(row: dict) -> None:
    """ValueError naming the first declared column whose value is of the wrong kind, or a
    status that is not one of STATUSES. None and NaN are always allowed (unknown)."""
    st = row.get("status")
    if st is not None and st not in STATUSES:
        raise ValueError(f"status {st!r} is not one of {', '.join(STATUSES)}")
    for name, v in row.items():
        col = BY_NAME.get(name)
        if col is None or v is None or (isinstance(v, float) and v != v):
            continue
        if hasattr(v, "item") and not isinstance(v, (str, bytes)):
            v = v.item()
        ok = {"int": lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)
              and float(x).is_integer() or isinstance(x, str) and x.lstrip("-").isdigit(),
              "float": lambda x: isinstance(x, (int, float)) and not isinstance(x, bool),
              "str": lambda x: isinstance(x, (str, int, float)),
              "bool": lambda x: isinstance(x, (bool, int))}[col.kind](v)
        if not ok:
            raise ValueError(f"column {name} is {col.kind}, got {v!r} ({type(v).__name__})")


# --- the files' schema: what a writer resuming a run, and every reader, checks -----------

# manifest keys a writer reads back on resume, with the types it needs them to have
_MANIFEST_TYPES = {
    "config": dict, "environment": dict, "invocations": list, "resumed": _numbers.Integral,
    "wall_s": _numbers.Real, "wall_s_total": _numbers.Real, "wall_s_previous": _numbers.Real,
    "started": str, "status": str, "kind": str,
}


def check_manifest(path, manifest: dict) -> None:
    """CorruptFile unless the manifest's keys a resume or a reader uses are of their types."""
    from ..core.errors import CorruptFile
    for key, typ in _MANIFEST_TYPES.items():
        v = manifest.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, typ):
            raise CorruptFile(path, f"manifest key {key!r} is {type(v).__name__}, not the "
                                    f"{getattr(typ, '__name__', typ)} moe-lab writes")
    for i in manifest.get("invocations") or []:
        if not isinstance(i, dict):
            raise CorruptFile(path, "manifest key 'invocations' holds a "
                                    f"{type(i).__name__}, not an object per invocation")


def check_table(path, df, needs: tuple[str, ...] = ("point_id",)) -> None:
    """CorruptFile unless the table (a DataFrame) has `needs` and its declared columns
    their kinds. Vectorised (pandas' infer_dtype): a notebook checks every table of every
    run it opens, so this runs hundreds of times per page."""
    from pandas.api.types import infer_dtype, is_bool_dtype, is_numeric_dtype

    from ..core.errors import CorruptFile
    missing = [c for c in needs if c not in df.columns]
    if missing:
        raise CorruptFile(path, f"no {', '.join(missing)} column")
    if "point_id" in needs and len(df):
        ids = df["point_id"]
        if ids.isna().any() or infer_dtype(ids, skipna=False) != "string":
            raise CorruptFile(path, "point_id holds values that are not point ids (strings)")
    empty = df.isna().all()  # one pass, not one per column
    for c in df.columns:
        if c not in _DECLARED or empty[c]:
            continue
        col = df[c]
        if c in _NUMERIC:
            ok = is_numeric_dtype(col) and not is_bool_dtype(col)
        elif c in _BOOL:
            ok = is_bool_dtype(col) or _zero_one(col.dropna())
        elif c in _STR:
            ok = infer_dtype(col, skipna=True) == "string"
        else:
            continue
        if not ok:
            raise CorruptFile(path, f"column {c!r} is {col.dtype}, not the type moe-lab writes")


def _zero_one(values) -> bool:
    """Every value a bool or equal to 0 or 1 (a bool column pandas read as numbers or
    objects); an unhashable value (a list) is neither."""
    try:
        return bool(values.isin([0, 1]).all())
    except TypeError:
        return False


_NUMERIC = frozenset(INT_COLUMNS + FLOAT_COLUMNS)
_BOOL, _STR = frozenset(BOOL_COLUMNS), frozenset(STR_COLUMNS)
_DECLARED = _NUMERIC | _BOOL | _STR


# columns every reader of a run needs (compare, merge, report, roofline --annotate, the
# notebooks): every results.parquet moe-lab wrote since the first has them
READ_NEEDS = ("point_id", "status", *ID_FIELDS, "median_us")
