"""Devices: vendor specs, name matching, and the measured ceilings a roof is drawn with.

A measured ceilings file is `data/ceilings/<device-slug>.json`, written by `moe-lab
ceilings` (moe_lab/measuring/ceilings.py) and checked against CEILINGS_SCHEMA here. Where no file
exists, the vendor's dense peaks stand in, and `Ceilings.source` says which was used.

Bandwidth: a file holds a copy bandwidth (`memory`, read + written) and, since the read
ceiling was added, a read bandwidth (`memory_read`, a reduction that only reads). Files
measured before have no `memory_read`: it is optional, and missing means not measured.
A roof uses the read bandwidth where one was measured (MoE weights and activations are
only read) and is not below the copy's, else the copy bandwidth; vendor specs give one
peak for both. `Ceilings.bandwidth_basis` says which.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from .errors import CorruptFile, UsageError

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CEILINGS_DIR = REPO_ROOT / "data" / "ceilings"


# --- vendor peaks -------------------------------------------------------------------

@dataclass(frozen=True)
class DeviceSpec:
    """Vendor DENSE peaks (no 2:4 sparsity). TFLOP/s and TB/s are decimal."""
    name: str
    vendor: str
    bf16_tflops: float
    fp8_tflops: float
    hbm_tb_s: float
    l2_mb: float  # last-level on-chip cache: L2 on NVIDIA, Infinity Cache (MALL) on AMD
    source: str
    # the fp8 its matrix cores take: OCP e4m3fn (NVIDIA Hopper/Blackwell, CDNA4 MI350/MI355)
    # or e4m3fnuz (CDNA3 MI300X/MI325X; aiter's utility/dtypes.py: gfx942 -> fnuz, gfx950 -> fn)
    fp8_format: str = "e4m3fn"


DEVICE_SPECS: dict[str, DeviceSpec] = {
    # AMD Instinct MI300X data sheet (amd.com/en/products/accelerators/instinct/mi300/mi300x.html):
    # 304 CUs x 2100 MHz x 2048 bf16 FLOP/clk/CU = 1307.4 TFLOP/s dense; fp8 x2 = 2614.9.
    # 5.3 TB/s HBM3; 256 MB Infinity Cache (MALL) in front of HBM; L2 is 4 MB per XCD x 8
    # (torch reports L2_cache_size=4MB: one XCD's, ROCm/legacy-rocm-build#4203).
    "mi300x": DeviceSpec("AMD Instinct MI300X", "amd", 1307.4, 2614.9, 5.3, 256.0,
                         "AMD Instinct MI300X data sheet: 1307.4 TFLOP/s bf16 dense, "
                         "2614.9 fp8 dense, 5.3 TB/s HBM3, 256 MB Infinity Cache", fp8_format="e4m3fnuz"),
    # AMD Instinct MI325X data sheet (amd.com/en/products/accelerators/instinct/mi300/mi325x.html):
    # same CDNA3 compute as MI300X, 256 GB HBM3E at 6.0 TB/s, 256 MB Infinity Cache.
    "mi325x": DeviceSpec("AMD Instinct MI325X", "amd", 1307.4, 2614.9, 6.0, 256.0,
                         "AMD Instinct MI325X data sheet: 1307.4 TFLOP/s bf16 dense, "
                         "2614.9 fp8 dense, 6.0 TB/s HBM3E, 256 MB Infinity Cache", fp8_format="e4m3fnuz"),
    # AMD Instinct MI355X data sheet (amd.com/en/products/accelerators/instinct/mi350/mi355x.html):
    # AMD quotes 2.5 PF bf16 and 5.0 PF fp8 dense; 256 CUs x 2400 MHz x 4096 (bf16) or
    # 8192 (fp8, ISSCC 2026) FLOP/clk/CU = 2516.6 / 5033.2 TFLOP/s. 8.0 TB/s HBM3E,
    # 256 MB Infinity Cache (CDNA 4 white paper).
    "mi355x": DeviceSpec("AMD Instinct MI355X", "amd", 2516.6, 5033.2, 8.0, 256.0,
                         "AMD Instinct MI355X data sheet: 2.5 PF bf16 dense (2516.6), "
                         "5.0 PF fp8 dense (5033.2), 8.0 TB/s HBM3E"),
    # NVIDIA H100 SXM5 data sheet (nvidia.com/en-us/data-center/h100/): 1979 bf16 / 3958 fp8
    # TFLOP/s are WITH sparsity; dense is half (989.4 / 1978.9, 132 SMs x 1830 MHz boost).
    # 3.35 TB/s HBM3, 50 MB L2.
    "h100-sxm": DeviceSpec("NVIDIA H100 SXM5 80GB", "nvidia", 989.4, 1978.9, 3.35, 50.0,
                           "NVIDIA H100 data sheet (SXM5): 1979/3958 TFLOP/s bf16/fp8 with "
                           "sparsity, halved for dense; 3.35 TB/s; 50 MB L2"),
    # NVIDIA H200 data sheet (nvidia.com/en-us/data-center/h200/): same GH100 compute as
    # H100 SXM (989.4 / 1978.9 dense), 141 GB HBM3E at 4.8 TB/s. NVIDIA quotes 50 MB L2
    # for GH100 products, but torch.cuda.get_device_properties reports L2_cache_size =
    # 62914560 (60 MiB) on the lent H200s (torch 2.11, CUDA 13): the spec keeps the
    # vendor's 50; measured ceilings record what the device reports.
    "h200-sxm": DeviceSpec("NVIDIA H200 SXM 141GB", "nvidia", 989.4, 1978.9, 4.8, 50.0,
                           "NVIDIA H200 data sheet (SXM): 1979/3958 TFLOP/s bf16/fp8 with "
                           "sparsity, halved for dense; 4.8 TB/s HBM3E; 50 MB L2 "
                           "(torch reports 60 MB)"),
    # NVIDIA HGX B200 (nvidia.com/en-us/data-center/hgx/): 4.5 PF bf16 / 9 PF fp8 with
    # sparsity -> 2250 / 4500 dense; 8 TB/s HBM3E (HGX table: 7.7 TB/s for the 180 GB
    # part; DGX B200: 8 TB/s). L2 is not on the data sheet: 126 MB is what CUDA reports
    # (two dies); treat it as unverified.
    "b200": DeviceSpec("NVIDIA B200", "nvidia", 2250.0, 4500.0, 8.0, 126.0,
                       "NVIDIA HGX/DGX B200 data sheet: 4.5/9 PF bf16/fp8 with sparsity, "
                       "halved for dense; 8 TB/s HBM3E (HGX B200 table: 7.7)"),
}

# torch device names -> DEVICE_SPECS keys. Order matters: first match wins.
_NAME_PATTERNS: list[tuple[str, str]] = [
    (r"MI355X", "mi355x"),
    (r"MI325X", "mi325x"),
    (r"MI300X", "mi300x"),
    (r"H200(?!\s*NVL)", "h200-sxm"),       # H200 NVL (PCIe, 600 W) has lower peaks
    (r"H100 80GB HBM3|H100 SXM", "h100-sxm"),
    (r"B200", "b200"),
]


def device_slug(device_name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200', the file name of its measured ceilings."""
    return re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")


def device_tag(device_name: str) -> str:
    """The short name a device's runs are prefixed with (`h200-vllm-...`, `h100-tune-...`):
    its vendor spec's key up to the first '-' ('NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB
    HBM3' -> 'h100', 'AMD Instinct MI300X' -> 'mi300x'), else its slug (a GPU with no spec,
    e.g. 'NVIDIA H100 PCIe' -> 'nvidia-h100-pcie': never another GPU's tag)."""
    spec = spec_for(device_name)
    key = spec_key(spec) if spec is not None else None
    return key.split("-")[0] if key else device_slug(device_name)


def file_device_name(device_name: str) -> str:
    """The device part of a tuned file's name, vLLM's (`get_config_file_name`): spaces as
    '_', and any H200 of the family (H200 NVL, ...) 'NVIDIA_H200'. An H100 SXM is
    'NVIDIA_H100_80GB_HBM3', what torch names it (vLLM also ships files named 'NVIDIA_H100',
    which its lookup never reads on that GPU)."""
    name = str(device_name).replace(" ", "_")
    return "NVIDIA_H200" if "H200" in name.split("_") else name


def shell_vars(device_name: str) -> str:
    """What the device scripts know of the GPU found, as shell assignments: GPU_NAME,
    DEVICE_SLUG (data/ceilings/<slug>.json, data/configs/<slug>/), DEVICE_TAG (the runs'
    prefix) and FILE_DEVICE (the device part of a tuned file's name)."""
    import shlex
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in (
        ("GPU_NAME", device_name), ("DEVICE_SLUG", device_slug(device_name)),
        ("DEVICE_TAG", device_tag(device_name)), ("FILE_DEVICE", file_device_name(device_name))))


def spec_for(device_name: str) -> DeviceSpec | None:
    """The vendor spec for a torch device name (or a DEVICE_SPECS key); None if unknown."""
    if device_name in DEVICE_SPECS:
        return DEVICE_SPECS[device_name]
    for pattern, key in _NAME_PATTERNS:
        if re.search(pattern, device_name, re.IGNORECASE):
            return DEVICE_SPECS[key]
    return None


def fp8_format_of_arch(arch: str) -> str:
    """The fp8 format a ROCm arch computes in: e4m3fnuz on CDNA3 (gfx94x: MI300X/MI325X,
    aiter's utility/dtypes.py), e4m3fn elsewhere (CDNA4 gfx950, NVIDIA, the CPU). The one
    place this rule is kept."""
    return "e4m3fnuz" if str(arch or "").split(":")[0].startswith("gfx94") else "e4m3fn"


def fp8_format_for(device_name: str) -> str:
    """'e4m3fn' or 'e4m3fnuz' for a device name: its spec's, else by the ROCm arch torch
    reports (gfx94x: CDNA3, fnuz), else e4m3fn (NVIDIA, CDNA4, and the CPU, which computes
    in the OCP format)."""
    spec = spec_for(device_name)
    if spec is not None:
        return spec.fp8_format
    import torch
    if torch.version.hip and torch.cuda.is_available():
        return fp8_format_of_arch(getattr(torch.cuda.get_device_properties(0), "gcnArchName", ""))
    return "e4m3fn"


def spec_key(spec: DeviceSpec) -> str | None:
    """The DEVICE_SPECS key of a spec (None for a spec not in the table)."""
    return next((k for k, v in DEVICE_SPECS.items() if v is spec), None)


# --- measured ceilings ------------------------------------------------------------------

SCHEMA_ID = "moe-lab/ceilings/v1"
_NUM = (int, float)
_OPT_NUM = (int, float, type(None))
_OPT_STR = (str, type(None))

# Groups a file may lack (absent = not measured: files written before they existed).
# When present, every field of the group is required.
OPTIONAL_GROUPS = ("memory_read",)

# dotted field -> (allowed types, meaning). Every field is required (it may be null
# where its types allow None), except the fields of an absent OPTIONAL_GROUPS group.
# Units are in the names.
CEILINGS_SCHEMA: dict[str, tuple[tuple[type, ...], str]] = {
    "schema": ((str,), f"always {SCHEMA_ID!r}"),
    "device.name": ((str,), "torch.cuda.get_device_name, e.g. 'NVIDIA H200'"),
    "device.slug": ((str,), "file name stem: lower case, non-alphanumerics -> '-'"),
    "device.vendor": ((str,), "'nvidia' or 'amd'"),
    "device.arch": ((str,), "'sm_90' on NVIDIA, gcnArchName on ROCm"),
    "device.multiprocessors": ((int,), "SMs (NVIDIA) or CUs (AMD)"),
    "device.total_memory_bytes": ((int,), "device memory as torch reports it"),
    "device.l2_cache_bytes": ((int, type(None)), "L2 as torch reports it (one XCD's on MI300)"),
    "memory.tb_per_s": (_NUM, "achievable bandwidth: median over calls, decimal TB/s"),
    "memory.best_tb_per_s": (_NUM, "the fastest call"),
    "memory.method": ((str,), "what was timed"),
    "memory.buffer_bytes": ((int,), "size of the source (and destination) buffer"),
    "memory.bytes_per_call": ((int,), "bytes counted per call (read + written)"),
    "memory.calls": ((int,), "timed calls"),
    "memory.median_us": (_NUM, "median time of one call"),
    "memory_read.tb_per_s": (_NUM, "OPTIONAL group (absent = not measured): read-only "
                             "bandwidth, median over calls, decimal TB/s; bytes = bytes read"),
    "memory_read.best_tb_per_s": (_NUM, "the fastest call"),
    "memory_read.method": ((str,), "what was timed (a reduction: reads the buffer, writes "
                           "one number)"),
    "memory_read.buffer_bytes": ((int,), "size of the buffer read = bytes counted per call"),
    "memory_read.calls": ((int,), "timed calls"),
    "memory_read.median_us": (_NUM, "median time of one call"),
    "gemm_bf16.tflops": (_NUM, "achievable bf16 matrix FLOP/s: median, decimal TFLOP/s"),
    "gemm_bf16.best_tflops": (_NUM, "the fastest call"),
    "gemm_bf16.method": ((str,), "what was timed"),
    "gemm_bf16.shape": ((list,), "[M, N, K]"),
    "gemm_bf16.calls": ((int,), "timed calls"),
    "gemm_bf16.median_us": (_NUM, "median time of one call"),
    "gemm_fp8.tflops": (_OPT_NUM, "achievable fp8 matrix FLOP/s, null if it could not run"),
    "gemm_fp8.best_tflops": (_OPT_NUM, "the fastest call"),
    "gemm_fp8.method": ((str,), "what was timed"),
    "gemm_fp8.shape": ((list,), "[M, N, K]"),
    "gemm_fp8.fp8_dtype": (_OPT_STR, "float8_e4m3fn or float8_e4m3fnuz"),
    "gemm_fp8.calls": ((int,), "timed calls (0 if it could not run)"),
    "gemm_fp8.median_us": (_OPT_NUM, "median time of one call"),
    "gemm_fp8.error": (_OPT_STR, "why fp8 could not run, else null"),
    "vendor.spec": (_OPT_STR, "DEVICE_SPECS key of this device, null if unknown"),
    "vendor.bf16_tflops": (_OPT_NUM, "vendor dense peak, for % of peak"),
    "vendor.fp8_tflops": (_OPT_NUM, "vendor dense peak"),
    "vendor.hbm_tb_s": (_OPT_NUM, "vendor peak bandwidth"),
    "manifest.device_name": ((str,), "as device.name"),
    "manifest.torch": ((str,), "torch.__version__"),
    "manifest.cuda": (_OPT_STR, "torch.version.cuda (null on ROCm)"),
    "manifest.hip": (_OPT_STR, "torch.version.hip (null on CUDA)"),
    "manifest.date": ((str,), "ISO 8601 UTC time of the measurement"),
    "manifest.command": ((str,), "the command line that measured it"),
    "manifest.git_commit": (_OPT_STR, "HEAD of the moe-lab checkout, 'unknown' outside git"),
    "manifest.hostname": ((str,), "platform.node()"),
}


def validate_ceilings(obj) -> None:
    """Raise ValueError naming the first field of `obj` that breaks CEILINGS_SCHEMA."""
    if not isinstance(obj, dict):
        raise ValueError("ceilings must be a JSON object")
    for g in OPTIONAL_GROUPS:
        if g in obj and not isinstance(obj[g], dict):
            raise ValueError(f"ceilings field {g!r} must be an object, or absent when not "
                             f"measured; got {type(obj[g]).__name__} {obj[g]!r}")
    for dotted, (types, meaning) in CEILINGS_SCHEMA.items():
        if dotted.split(".")[0] in OPTIONAL_GROUPS and dotted.split(".")[0] not in obj:
            continue
        node = obj
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ValueError(f"ceilings field {dotted!r} is missing ({meaning})")
            node = node[part]
        if isinstance(node, bool) or not isinstance(node, types):
            want = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise ValueError(f"ceilings field {dotted!r} must be {want}, "
                             f"got {type(node).__name__} {node!r}")
        if dotted.endswith(("tflops", "tb_per_s", "_us")) and node is not None and node <= 0:
            raise ValueError(f"ceilings field {dotted!r} must be > 0, got {node!r}")
    if obj["schema"] != SCHEMA_ID:
        raise ValueError(f"ceilings field 'schema' must be {SCHEMA_ID!r}, got {obj['schema']!r}")
    for g in ("gemm_bf16", "gemm_fp8"):
        shape = obj[g]["shape"]
        if len(shape) != 3 or not all(isinstance(s, int) and s > 0 for s in shape):
            raise ValueError(f"ceilings field '{g}.shape' must be [M, N, K] positive ints")
    if "memory_read" in obj:
        for f in ("buffer_bytes", "calls"):
            if obj["memory_read"][f] <= 0:
                raise ValueError(f"ceilings field 'memory_read.{f}' must be > 0, "
                                 f"got {obj['memory_read'][f]!r}")


@dataclass(frozen=True)
class Ceilings:
    """The ceilings a roof is drawn with. source: "measured" (data/ceilings/<slug>.json)
    or "vendor" (DEVICE_SPECS). tflops_fp8 is None when neither knows it.

    tb_s: the copy bandwidth (read + written) when measured, the vendor peak otherwise.
    tb_s_read: the read-only bandwidth (`memory_read`), None when not measured.
    A roof uses `roof_tb_s`: the read bandwidth when measured, else tb_s. Should a read
    kernel ever measure slower than the copy, the copy's stays: a roof is the highest
    rate shown achievable, and `bandwidth_text` says so."""
    device: str
    tflops_bf16: float
    tflops_fp8: float | None
    tb_s: float
    source: str
    note: str = ""
    tb_s_read: float | None = None

    def __post_init__(self):
        if self.tb_s_read is not None and not self.tb_s_read > 0:
            raise ValueError(f"tb_s_read must be > 0 or None, got {self.tb_s_read!r}")

    @property
    def bandwidth_basis(self) -> str:
        """Which bandwidth a roof uses: "read" (measured read-only), "copy" (measured
        copy) or "peak" (the vendor's)."""
        if self.tb_s_read is not None and self.tb_s_read >= self.tb_s:
            return "read"
        return "peak" if self.source == "vendor" else "copy"

    @property
    def roof_tb_s(self) -> float:
        """The bandwidth a roof uses, TB/s (see bandwidth_basis)."""
        return self.tb_s_read if self.bandwidth_basis == "read" else self.tb_s

    @property
    def bandwidth_text(self) -> str:
        """'read 4.9 TB/s', 'copy 4.28 TB/s' or 'peak 4.8 TB/s' (3 significant digits)."""
        text = f"{self.bandwidth_basis} {self.roof_tb_s:.3g} TB/s"
        if self.tb_s_read is not None and self.bandwidth_basis != "read":
            text += f" (read {self.tb_s_read:.3g} measured lower)"
        return text


def load_ceilings_file(path: str | Path) -> dict:
    """A ceilings JSON, validated; CorruptFile (one line, naming the file) if it is not."""
    path = Path(path)
    try:
        obj = json.loads(path.read_bytes().decode("utf-8"))
        validate_ceilings(obj)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptFile(path, exc) from None
    return obj


def measured_device_names(data_dir: str | Path | None = None) -> list[str]:
    """The devices with a measured ceilings file in `data_dir` (default: the repo's
    data/ceilings, read when called; its history/ is not looked in): each `<slug>.json`'s
    device name, sorted. CorruptFile (one line) for a file that is not valid."""
    data_dir = Path(data_dir) if data_dir is not None else DEFAULT_CEILINGS_DIR
    if not data_dir.is_dir():
        return []
    return sorted(load_ceilings_file(p)["device"]["name"] for p in data_dir.glob("*.json"))


def ceilings_for(device_name: str, data_dir: str | Path | None = None) -> Ceilings:
    """Measured ceilings from `<data_dir>/<device-slug>.json` when present, else the vendor
    peaks of DEVICE_SPECS; `source` says which. data_dir defaults to the repo's
    data/ceilings. A measured file lacking fp8 takes the vendor's fp8 and says so in note."""
    data_dir = Path(data_dir) if data_dir is not None else DEFAULT_CEILINGS_DIR
    spec = spec_for(device_name)
    path = data_dir / f"{device_slug(device_name)}.json"
    if path.is_file():
        obj = load_ceilings_file(path)
        fp8 = obj["gemm_fp8"].get("tflops")
        note = f"measured {obj['manifest']['date']} ({path.name})"
        if fp8 is None and spec is not None:
            fp8 = spec.fp8_tflops
            note += "; fp8 from vendor spec"
        read = obj["memory_read"]["tb_per_s"] if "memory_read" in obj else None
        c = Ceilings(obj["device"]["name"], obj["gemm_bf16"]["tflops"], fp8,
                     obj["memory"]["tb_per_s"], "measured", note, read)
        why = ("memory_read" if c.bandwidth_basis == "read" else
               "memory; no memory_read in the file (not measured)" if read is None else
               "memory")
        return replace(c, note=f"{note}; roof bandwidth: {c.bandwidth_text}, from {why}")
    if spec is None:
        raise UsageError(f"no measured ceilings ({path}) and no vendor spec for "
                         f"{device_name!r}; known specs: {', '.join(DEVICE_SPECS)}")
    return Ceilings(spec.name, spec.bf16_tflops, spec.fp8_tflops, spec.hbm_tb_s, "vendor",
                    f"{spec.source}; roof bandwidth: peak {spec.hbm_tb_s:.3g} TB/s "
                    "(vendor, for reads and writes alike)")


