"""AMD aiter's tuned fused-MoE table (`aiter/configs/tuned_fmoe.csv`) as a moe-lab run.

The numbers are AMD's, measured by aiter's own tuner
(`aiter_meta/hsa/<gfx>/fmoe_2stages/tune.py`), never by moe-lab. What it timed, as the
installed wheel's code does it: per table key, every stage-1 and stage-2 kernel
candidate in its own call (`run_perftest`: profiler device time, 101 iterations over
rotated copies of the inputs, IQR outliers dropped, the mean; a stage's call may add an
output fill or, per_1x128, the intermediate's quantization), checked against a fp32
reference (err = share of output elements outside atol=rtol=1e-2); `us = us1 + us2` of
the chosen pair (a 1-stage asm kernel: us2 = 0). Routing, token sorting (`moe_sorting`)
and the input's quantization are not timed.
Routing is the tuner's own: `score = randn(token, expert)`, top-k over the table's
`expert` experts, so every token*topk pair lands on the experts the row holds.

One table row -> one results row (or a counted skip with its reason); see `convert`.
"""
from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pandas as pd

from ..core.constants import AITER_MAX_ERR
from ..core.errors import CorruptFile, UsageError
from ..core.problems import sharding_name

TABLE_COLUMNS = ("cu_num", "token", "model_dim", "inter_dim", "expert", "topk", "act_type",
                 "dtype", "q_dtype_a", "q_dtype_w", "q_type", "use_g1u1", "doweight_stage1",
                 "block_m", "ksplit", "us1", "kernelName1", "err1", "us2", "kernelName2",
                 "err2", "us", "run_1stage", "tflops", "bw")
SHAPE_INTS = ("cu_num", "token", "model_dim", "inter_dim", "expert", "topk")  # >= 1
FLAG_INTS = ("use_g1u1", "doweight_stage1", "block_m", "ksplit")
TABLE_IN_WHEEL = "configs/tuned_fmoe.csv"  # relative to the aiter package
BACKEND, MODE, ROUTING = "aiter", "aiter-tuner", "aiter-tuner"
MAX_ERR = AITER_MAX_ERR  # aiter's checkAllclose and base tuner fail above 5% (core.constants)
TP_DEGREES = (1, 2, 4, 8, 16, 32, 64)

# cu_num -> (device name, moe_lab.devices key for the roofline, vendor source)
CU_DEVICES = {
    304: ("AMD Instinct MI300X (304 CUs; MI325X has the same count)", "mi300x",
          ("AMD Instinct MI300X and MI325X data sheets (amd.com/en/products/accelerators/"
           "instinct/mi300/mi300x.html, .../mi325x.html): 304 compute units each; the roofline "
           "uses the MI300X's peaks (the MI325X has 6.0 TB/s instead of 5.3)")),
    256: ("AMD Instinct MI355X (256 CUs; MI350X has the same count)", "mi355x",
          ("AMD Instinct MI355X and MI350X data sheets (amd.com/en/products/accelerators/"
           "instinct/mi350/mi355x.html, .../mi350x.html) and the CDNA 4 white paper: 8 XCDs x "
           "32 CUs = 256 on both; the roofline uses the MI355X's peaks (the MI350X clocks "
           "at 2.2 GHz, not 2.4: its compute roof is 9% lower)")),
}


def device_for_cu(cu: int) -> tuple[str, str | None, str]:
    """(device name, DEVICE_SPECS key or None, source) for a cu_num. A count no vendor
    source ties to one product is named by its count only."""
    if int(cu) in CU_DEVICES:
        return CU_DEVICES[int(cu)]
    return (f"AMD GPU with {int(cu)} CUs", None,
            f"no vendor source names a product by {int(cu)} CUs alone; not guessed (aiter's "
            "chip_info calls a gfx942 with 80 or 64 CUs 'MI308')" if int(cu) in (64, 80) else
            f"no vendor source names a product by {int(cu)} CUs alone; not guessed")


def installed_table() -> tuple[Path, str]:
    """(path of the installed wheel's tuned_fmoe.csv, amd-aiter version); UsageError
    when aiter is not installed. aiter itself is never imported (it needs ROCm)."""
    from importlib import metadata

    from ..backends.aiter_triton import aiter_root
    root = aiter_root()
    if root is None:
        raise UsageError("aiter is not installed (pip install amd-aiter), so there is no "
                         "tuned_fmoe.csv to import: pass --file")
    try:
        version = metadata.version("amd-aiter")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return Path(root) / TABLE_IN_WHEEL, version


def read_table(path) -> pd.DataFrame:
    """The table as strings (stripped), checked: UsageError when the file is missing,
    CorruptFile (one line naming it) when it is binary, not CSV, lacks a column, has no
    rows, or a shape number is not a positive integer. Time columns are checked per row
    (convert)."""
    path = Path(path)
    if not path.is_file():  # a folder was 'no such file'
        raise UsageError(f"{path}: " + ("a folder, not a CSV table file" if path.is_dir()
                                        else "no such file"))
    head = path.read_bytes()[:65536]
    try:
        if b"\0" in head:
            raise UnicodeDecodeError("utf-8", head, 0, 1, "NUL byte")
        head.decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptFile(path, "a binary file, not a CSV table") from None
    lines = path.read_bytes().rstrip(b"\r\n").split(b"\n")
    if not path.read_bytes().endswith(b"\n") and len(lines) > 1 \
            and lines[-1].count(b",") < lines[0].count(b","):  # cut mid-row: not AMD's row
        raise CorruptFile(path, f"truncated: its last line (line {len(lines)}) has "
                          f"{lines[-1].count(b',') + 1} of {lines[0].count(b',') + 1} fields "
                          "and no end of line")
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise CorruptFile(path, f"not a CSV table: {exc}") from None
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in TABLE_COLUMNS if c not in df.columns]
    if missing:
        raise CorruptFile(path, f"missing column{'s' * (len(missing) > 1)} {', '.join(missing)}")
    if df.empty:
        raise CorruptFile(path, "no rows")
    df = df.apply(lambda s: s.str.strip())
    for col in SHAPE_INTS + FLAG_INTS:
        num = pd.to_numeric(df[col], errors="coerce")
        bad = num.isna() | (num != num.round()) | ((num < 1) if col in SHAPE_INTS else (num < 0))
        if bad.any():
            i = int(bad.to_numpy().argmax())
            raise CorruptFile(path, f"line {i + 2}: {col} is {df[col].iloc[i]!r}, not a "
                              f"{'positive' if col in SHAPE_INTS else 'non-negative'} integer")
    over = pd.to_numeric(df["topk"]) > pd.to_numeric(df["expert"])  # was: "custom model needs
    if over.any():  # positive H, I, E, k with k <= E", naming neither the file nor the line
        i = int(over.to_numpy().argmax())
        raise CorruptFile(path, f"line {i + 2}: topk {df['topk'].iloc[i]} is above expert "
                          f"{df['expert'].iloc[i]} (a token is routed to at most every expert)")
    from ..core.problems import parse_model
    shapes = {}  # each shape once: its first line
    for i, row in enumerate(df[["model_dim", "inter_dim", "expert", "topk"]].to_numpy()):
        shapes.setdefault(tuple(int(float(x)) for x in row), i + 2)
    for (h, inter, e, k), line in shapes.items():
        try:  # a shape past problems' caps: was the cap's line without the file or line
            parse_model(f"custom:H={h},I={inter},E={e},k={k}")
        except UsageError as exc:
            raise UsageError(f"{path} line {line}: {exc}") from None
    return df


# --- what a row is ----------------------------------------------------------------------

def match_shape(hidden: int, inter: int, experts: int, topk: int) -> dict:
    """model, tp, ep and a note for a per-rank shape. vLLM's sharding: without EP a rank
    holds all E experts with I/tp; with EP (ep == tp) E/ep experts with the full I.
    Exactly one (preset, tp, ep) that fits -> that; several -> none chosen (the note
    names them); none -> `custom:H=..,I=..,E=..,k=..` (the shape as the rank holds it)."""
    from ..core.problems import PRESETS
    fits, near = [], []
    for name, m in PRESETS.items():
        for dk in (0, 1):  # dk=1: a shared expert fused as one more routed expert
            if m.hidden != hidden or m.topk + dk != topk:
                continue
            for tp in TP_DEGREES:
                tp_fit = m.experts + dk == experts and m.intermediate == inter * tp
                ep_fit = (tp > 1 and m.intermediate == inter and m.experts % tp == 0
                          and m.experts // tp + dk == experts)
                for ep in ((1,) if tp_fit else ()) + ((tp,) if ep_fit else ()):
                    (near if dk else fits).append((name, tp, ep))
    custom = f"custom:H={hidden},I={inter},E={experts},k={topk}"

    def says(name, tp, ep):
        return f"{name} {sharding_name(tp, ep)}"
    if len(fits) == 1:
        name, tp, ep = fits[0]
        note = ("" if ep == 1 else f"EP shape ({experts} of {PRESETS[name].experts} experts, "
                "full I): aiter's tuner routed all token*topk pairs to them, not T*k/ep "
                "as on a real EP rank")
        return dict(model=name, tp=tp, ep=ep, note=note)
    if len(fits) > 1:
        return dict(model=custom, tp=None, ep=None, note="fits " + " and ".join(
            says(*f) for f in fits) + ": several presets/shardings fit, none chosen")
    note = "no preset has this shape; I is the per-rank inter_dim, the sharding is unknown"
    if near:
        note += ("; looks like " + " or ".join(says(*f) for f in near) + " with its shared "
                 "expert fused as one more routed expert (E+1, k+1)")
    return dict(model=custom, tp=None, ep=None, note=note)


def _short_dtype(text: str) -> str:
    t = str(text).removeprefix("torch.")
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "int8": "int8",
            "float8_e4m3fnuz": "fp8", "float8_e4m3fn": "fp8", "float4_e2m1fn_x2": "fp4",
            "fp4x2": "fp4", "uint32": "int4", "int4": "int4"}.get(t, t)


# aiter's per_Token is moe-lab's fp8-channel: a scale per output channel of the weights and
# a dynamic one per token of the activations (the Llama-4 FP8-dynamic checkpoints)
_SCHEMES = {"No": None, "per_Tensor": "tensor", "per_Token": "channel", "per_1x128": "block128",
            "per_1x32": "block32", "per_128x128": "block128x128"}
_SCALES = {"tensor": "per-tensor", "channel": "per-channel", "block128": "block:128"}


def quant_scheme(q_type: str, q_dtype_w: str) -> tuple[str, str | None, str | None]:
    """(dtype column, weight dtype for the cost model or None, its scales or None):
    QuantType.No -> the weight dtype (bf16); per_Tensor/per_Token/per_1x128 with fp8
    weights -> fp8-tensor / fp8-channel / fp8-block128 (weights per tensor, per output
    channel, in 128x128 blocks, as the tuner quantizes them); other schemes are named
    the same way (int8-tensor, ...) without a cost model."""
    q = str(q_type).removeprefix("QuantType.")
    w = _short_dtype(q_dtype_w)
    scheme = _SCHEMES.get(q, q)
    if scheme is None:
        return w, (w if w in ("bf16", "fp16") else None), None
    if w == "fp8" and scheme in _SCALES:
        return f"{w}-{scheme}", "fp8", _SCALES[scheme]
    return f"{w}-{scheme}", None, None


def parse_err(text) -> float:
    """aiter's err column -> a share of elements: '16.7%' -> 0.167, '0' -> 0.0; NaN when
    it is not a number."""
    s = str(text).strip()
    pct = s.endswith("%")
    try:
        v = float(s.rstrip("%"))
    except ValueError:
        return math.nan
    return v / 100 if pct else v


def _num(text) -> float:
    try:
        v = float(str(text).strip())
    except ValueError:
        return math.nan
    return v if math.isfinite(v) else math.nan


def _problems(r: dict, max_err: float) -> tuple[str | None, str, str | None]:
    """(status other than ok or None, why, a short kind of why for the counts)."""
    bad = []  # (kind, text)
    for col in ("us", "us1"):
        if not r[col] > 0:
            bad.append((f"{col} not a time > 0", f"{col} is {r['raw_' + col]!r}"))
    if r["run_1stage"] not in (0, 1):
        bad.append(("run_1stage not 0 or 1", f"run_1stage is {r['raw_run_1stage']!r}"))
    elif r["run_1stage"] == 0 and not r["us2"] > 0:
        bad.append(("2-stage us2 not a time > 0", f"us2 is {r['raw_us2']!r} in a 2-stage row"))
    elif r["run_1stage"] == 1 and r["us2"] != 0:
        bad.append(("1-stage us2 not 0", f"us2 is {r['raw_us2']!r} in a 1-stage row"))
    if not bad and abs(r["us"] - r["us1"] - r["us2"]) > 1e-3 * r["us"]:
        bad.append(("us not us1 + us2",
                    f"us {r['us']} is not us1 + us2 = {r['us1'] + r['us2']:.4f}"))
    for col in ("err1", "err2"):
        if math.isnan(r[col]):
            bad.append((f"{col} not a number", f"{col} is {r['raw_' + col]!r}"))
    if bad:
        return ("failed", "; ".join(t for _, t in bad) + " (as AMD's tuner wrote the row)",
                "failed: " + bad[0][0])
    errs = [c for c in ("err1", "err2") if r[c] >= max_err]
    if errs:
        return ("incorrect", " and ".join(f"{c} {r[c]:.1%}" for c in errs) + " of output "
                f"elements outside atol=rtol=1e-2 against aiter's tuner reference, >= "
                f"{max_err:.0%} (aiter's checkAllclose fails a check above 5%; its fmoe tuner "
                "accepts up to 50%); AMD's time kept",
                f"incorrect: {' and '.join(errs)} >= {max_err:.0%}")
    return None, "", None


def _roof(r: dict, spec_key: str | None, device: str) -> dict:
    """Roofline columns of the tuner's own problem on the device's vendor peaks."""
    from ..core.devices import DEVICE_SPECS
    from ..core.problems import make_problem
    from ..cost.roofline import bound, cost, expected_experts_hit, floor_us, roof_basis
    nan = dict(experts_hit=math.nan, pairs=math.nan, flops=math.nan, bytes=math.nan,
               roof_us=math.nan, bound=None, roof_basis=None)
    if spec_key is None:
        return dict(nan, why=f"no roofline: no vendor spec for {device}")
    if r["use_g1u1"] != 1:
        return dict(nan, why="no roofline: the cost model has gate+up experts (g1u1) only")
    if r["weight_dtype"] is None or r["act_dtype"] not in ("bf16", "fp16"):
        return dict(nan, why=f"no roofline: no {r['dtype']} peak or cost in moe_lab.cost.roofline")
    spec = DEVICE_SPECS[spec_key]
    T, E, k = r["tokens"], r["expert"], r["topk"]
    p = make_problem(f"custom:H={r['model_dim']},I={r['inter_dim']},E={E},k={k}", T,
                     r["act_dtype"])
    c = cost(p, weight_dtype=r["weight_dtype"], scales=r["scales"] or "per-tensor",
             experts_hit=expected_experts_hit(E, k, T), pairs=T * k)
    peak = "fp8" if r["weight_dtype"] == "fp8" else r["act_dtype"]
    return dict(experts_hit=c.experts_hit, pairs=c.pairs, flops=c.flops, bytes=c.bytes,
                roof_us=floor_us(c, spec, peak), bound=bound(c, spec, peak),
                roof_basis=roof_basis(spec, peak), why="")


def convert(df: pd.DataFrame, measured_at: str, git_commit: str | None,
            max_err: float = MAX_ERR) -> tuple[list[dict], list[dict], list[dict]]:
    """(results rows, kernel rows, skips) from a table read by read_table. Every table
    row is a results row or a skip {line, reason}: a row whose times are missing or
    inconsistent is `failed`, one whose err1/err2 >= max_err is `incorrect` (AMD's
    time kept); a row that is the same point as an earlier one is skipped."""
    from ..measuring.points import finish, new_row
    rows, kernels, skips, seen = [], [], [], {}
    for i, raw in enumerate(df.to_dict("records")):
        line = i + 2  # the header is line 1
        r = {c: int(float(raw[c])) for c in SHAPE_INTS + FLAG_INTS}
        for c in ("us", "us1", "us2", "tflops", "bw", "run_1stage"):
            r[c], r["raw_" + c] = _num(raw[c]), raw[c]
        for c in ("err1", "err2"):
            r[c], r["raw_" + c] = parse_err(raw[c]), raw[c]
        r["tokens"], r["act_dtype"] = r["token"], _short_dtype(raw["dtype"])
        r["dtype"], r["weight_dtype"], r["scales"] = quant_scheme(raw["q_type"], raw["q_dtype_w"])
        device, spec_key, _ = device_for_cu(r["cu_num"])
        shape = match_shape(r["model_dim"], r["inter_dim"], r["expert"], r["topk"])
        act = str(raw["act_type"]).removeprefix("ActivationType.").lower()
        config = f"aiter-tuned:cu={r['cu_num']}:{act}:doweight_stage1={r['doweight_stage1']}"
        if r["use_g1u1"] != 1:
            config += ":g1u0"
        if _short_dtype(raw["q_dtype_a"]) != _short_dtype(raw["q_dtype_w"]):
            config += f":a={_short_dtype(raw['q_dtype_a'])}"
        status, why, kind = _problems(r, max_err)
        roof = _roof(r, spec_key, device)
        notes = [n for n in (shape["note"], roof.pop("why")) if n]
        ok_time = status != "failed"
        run1 = r["run_1stage"] == 1
        row = new_row(dict(
            model=shape["model"], tp=shape["tp"], ep=shape["ep"], ep_rank=0, dtype=r["dtype"],
            backend=BACKEND, mode=MODE, tokens=r["tokens"], routing=ROUTING, config=config),
            git_commit=git_commit, device=device, measured_at=measured_at,
            status=status or "ok", error=why or None, error_kind=kind,
            median_us=r["us"] if ok_time else math.nan,
            kernel_us=r["us1"] + r["us2"] if ok_time else math.nan, max_rel_err=math.nan,
            **{k: v for k, v in roof.items() if k not in ("experts_hit", "pairs")},
            pct_of_roof=(100 * roof["roof_us"] / r["us"] if ok_time and r["us"] > 0
                         else math.nan),
            note="; ".join(notes) or None, hidden=r["model_dim"], inter=r["inter_dim"],
            local_experts=r["expert"], topk=r["topk"], cu_num=r["cu_num"],
            act_type=raw["act_type"], act_dtype=r["act_dtype"], q_type=raw["q_type"],
            q_dtype_a=raw["q_dtype_a"], q_dtype_w=raw["q_dtype_w"], use_g1u1=r["use_g1u1"],
            doweight_stage1=r["doweight_stage1"], block_m=r["block_m"], ksplit=r["ksplit"],
            run_1stage=None if math.isnan(r["run_1stage"]) else int(r["run_1stage"]), stage1_us=r["us1"], stage2_us=r["us2"],
            err1=r["err1"], err2=r["err2"], tflops=r["tflops"], bw=r["bw"],
            kernel1=raw["kernelName1"], kernel2=None if run1 else raw["kernelName2"],
            experts_hit=roof["experts_hit"], pairs=roof["pairs"],
            ceiling_source="vendor" if spec_key else None, table_line=line)
        pid = finish(row)["point_id"]
        if pid in seen:
            skips.append(dict(line=line, reason=f"the same point as line {seen[pid]} (the "
                              "same key fields: a duplicate in the table)"))
            continue
        seen[pid] = line
        rows.append(row)
        for n, (name, us) in enumerate([(raw["kernelName1"], r["us1"])]
                                       + ([] if run1 else [(raw["kernelName2"], r["us2"])])):
            if name and name != "Null" and us > 0:
                kernels.append(dict(point_id=pid, kernel=name, phase=("gemm1", "gemm2")[n],
                                    calls=1.0, total_us=us, stage=("1-stage: both GEMMs and "
                                    "the activation" if run1 else ("stage1", "stage2")[n])))
    return rows, kernels, skips


# --- the run folder -------------------------------------------------------------------

def default_run_id(version: str) -> str:
    """aiter-tuned-fmoe-<version, dots as dashes>."""
    return "aiter-tuned-fmoe-" + str(version).replace(".", "-").replace("+", "-")


def prepare(path=None, command: str = "moe-lab import-aiter",
            max_err: float = MAX_ERR) -> tuple[list[dict], list[dict], dict, str]:
    """(results rows, kernel rows, manifest, default run id) of a tuned_fmoe table (default:
    the installed wheel's). Nothing is written; a bad table raises UsageError/CorruptFile."""
    from ..core.environment import git_state, now_iso
    try:
        wheel, version = installed_table()
    except UsageError:
        if path is None:
            raise
        wheel, version = None, None
    path = Path(path if path is not None else wheel)
    in_wheel = wheel is not None and path.resolve() == wheel.resolve()
    if not 0 < max_err <= 1:
        raise UsageError(f"--max-err must be a share in (0, 1], not {max_err!r}")
    df = read_table(path)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    run_id = (default_run_id(version) if in_wheel
              else f"aiter-{path.stem.replace('_', '-')}-{sha[:8]}")
    measured_at = (f"measured by AMD's tuner before amd-aiter {version}" if in_wheel else
                   f"measured by aiter's tuner before {path.name} was imported")
    git = git_state()
    rows, kernels, skips = convert(df, measured_at, git["commit"], max_err)
    res = pd.DataFrame(rows)
    devices = {}
    for cu, g in res.groupby("cu_num"):
        name, key, source = device_for_cu(cu)
        devices[str(cu)] = dict(device=name, spec=key, source=source, rows=len(g))
    shard = res["model"] + [f" {sharding_name(t, e)}" if pd.notna(t) else ""
                            for t, e in zip(res["tp"], res["ep"].fillna(1))]

    def count(s):
        return {str(k): int(v) for k, v in s.value_counts().sort_index().items()}
    manifest = dict(
        kind="import", status="complete", started="",
        started_note="empty on purpose: AMD's tuner recorded no time, and an empty start "
                     "also keeps this import from being any notebook's default run",
        imported_at=now_iso(), command=command, measured_at=measured_at,
        measured_at_note="the table has no time column; what is known is the aiter release "
                         "that shipped the table, so every row says 'before' it",
        source=dict(what="aiter's tuned fused-MoE table (tuned_fmoe.csv)",
                    measured_by="AMD's tuner (aiter_meta/hsa/<gfx>/fmoe_2stages/tune.py), "
                                "not by moe-lab", package="amd-aiter" if in_wheel else None,
                    version=version if in_wheel else None,
                    path=f"aiter/{TABLE_IN_WHEEL}" if in_wheel else str(path), sha256=sha,
                    table_rows=len(df), how_timed=" ".join(__doc__.split("\n\n")[1].split())),
        config=dict(max_err=max_err), devices=devices,
        counts=dict(table_rows=len(df), rows=len(rows), skipped=len(skips),
                    by_status=count(res["status"]),
                    not_ok_by_reason=count(res["error_kind"].dropna()),
                    by_model_sharding=count(shard), by_cu_num=count(res["cu_num"]),
                    by_dtype=count(res["dtype"])),
        skipped=skips,
        columns="median_us = us (us1 + us2, each a mean of profiler device time); stage1_us/"
                "stage2_us = us1/us2; kernel_us = us1 + us2; err1/err2 = share of elements "
                "outside atol=rtol=1e-2 (not max_rel_err, which stays empty); tflops (TFLOP/s) "
                "and bw (GB/s) are aiter's own estimates; roof_us/pct_of_roof: moe-lab's ideal "
                "fused cost of the tuner's problem (token*topk pairs over the row's experts, "
                "experts hit expected) on the device's vendor peaks (fp8 rows: the fp8 peak); "
                "config = cu_num, activation, doweight_stage1 (what else makes a row a point); "
                "table_line = the row's line in the CSV",
        environment=dict(git_commit=git["commit"], git_dirty=git["dirty"],
                         aiter=version, pandas=pd.__version__))
    return rows, kernels, manifest, run_id
