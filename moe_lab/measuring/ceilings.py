"""`moe-lab ceilings`: measure this GPU's achievable ceilings into data/ceilings/<slug>.json.

Four numbers, each the median of many timed calls (device events around every call):
  memory    device-to-device copy of a large buffer (default 2 GiB, far beyond any L2 or
            Infinity Cache); bytes = read + written = 2 x buffer per call.
  memory_read  torch.sum over the same buffer viewed as float32 (refilled with randn):
            a reduction that reads every byte once and writes one number; bytes = bytes
            read. MoE weights are only read, so the roof uses this one where measured
            (moe_lab.devices.Ceilings.roof_tb_s). fp32 (not bf16 or uint8) so that each
            thread loads 16 bytes at a time and accumulates without conversions.
  gemm_bf16 torch.matmul of 8192 x 8192 x 8192 on random bf16 data (never zeros: the
            power, hence the clock, depends on the bits that toggle).
  gemm_fp8  torch._scaled_mm, same shape, float8_e4m3fn (e4m3fnuz on MI300 / gfx94x),
            fp32 scalar scales, second operand column-major, bf16 out. Null with an error
            when this torch/device cannot run it.
What it cannot see: clocks drop under sustained load; a 1-2 ms kernel repeated back to
back is the steady state of a busy GPU, which is what the sweeps measure too.

The JSON schema is moe_lab.devices.CEILINGS_SCHEMA; `validate_ceilings` checks an object.
"""
from __future__ import annotations

import datetime as _dt
import os
import platform
import statistics
from pathlib import Path

from ..core.atomic import atomic_write_json
from ..core.devices import SCHEMA_ID, device_slug, spec_for, spec_key, validate_ceilings
from ..core.environment import command_line, git_commit
from ..core.errors import UsageError

# --- measuring -------------------------------------------------------------------------

def _time_calls(fn, calls: int, warmup: int) -> list[float]:
    """Microseconds of each of `calls` calls, device events around each."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(calls)]
    for start, end in ev:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in ev]


def _fp8_dtype(device):
    """e4m3fnuz on MI300 (gfx94x), e4m3fn elsewhere (NVIDIA sm89+, MI350 gfx950)."""
    import torch
    from ..core.devices import fp8_format_of_arch
    from ..core.quant import FORMATS
    arch = getattr(torch.cuda.get_device_properties(device), "gcnArchName", "") or ""
    return FORMATS[fp8_format_of_arch(arch) if torch.version.hip else "e4m3fn"]


def _measure_read(buf, calls: int, warmup: int, gen) -> dict:
    """The memory_read group: torch.sum over `buf` (uint8, on the device) viewed as
    float32 and refilled with randn; bytes counted = bytes read."""
    import torch
    n = buf.numel() // 4 * 4
    x = buf[:n].view(torch.float32)
    x.normal_(generator=gen)
    t = _time_calls(lambda: torch.sum(x), calls, warmup)
    med = statistics.median(t)
    return dict(tb_per_s=n / med / 1e6, best_tb_per_s=n / min(t) / 1e6,
                method=f"torch.sum(x), x float32 randn, {n / 2**30:g} GiB; reads x once, "
                       "writes one float; bytes = bytes read; median of calls, device events",
                buffer_bytes=n, calls=calls, median_us=med)


def _measure_memory(dev, size_gib: float, calls: int, warmup: int, gen) -> tuple[dict, dict]:
    """The memory and memory_read groups: a D2D copy of `size_gib` GiB of random bytes,
    then a read of the same buffer; the buffers are freed before returning."""
    import torch
    n = int(size_gib * 2**30)
    src = torch.empty(n, dtype=torch.uint8, device=dev).random_(0, 256, generator=gen)
    dst = torch.empty_like(src)
    t = _time_calls(lambda: dst.copy_(src), calls, warmup)
    med = statistics.median(t)
    memory = dict(tb_per_s=2 * n / med / 1e6, best_tb_per_s=2 * n / min(t) / 1e6,
                  method=f"dst.copy_(src), uint8 random, {size_gib:g} GiB each; "
                         "bytes = read + written; median of calls, device events",
                  buffer_bytes=n, bytes_per_call=2 * n, calls=calls, median_us=med)
    del dst
    memory_read = _measure_read(src, calls, warmup, gen)
    del src
    torch.cuda.empty_cache()
    return memory, memory_read


def _measure_gemms(dev, gemm_n: int, calls: int, warmup: int, gen) -> tuple[dict, dict]:
    """The gemm_bf16 and gemm_fp8 groups: square `gemm_n` GEMMs by torch.matmul and
    torch._scaled_mm (fp8's error, not a raise, where this torch or GPU lacks it)."""
    import torch
    M = N = K = gemm_n
    flop = 2.0 * M * N * K
    a = torch.randn(M, K, device=dev, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(K, N, device=dev, dtype=torch.bfloat16, generator=gen)
    t = _time_calls(lambda: torch.matmul(a, b), calls, warmup)
    med = statistics.median(t)
    gemm_bf16 = dict(tflops=flop / med / 1e6, best_tflops=flop / min(t) / 1e6,
                     method="torch.matmul(a, b), bf16 randn, row-major; median of calls, "
                            "device events", shape=[M, N, K], calls=calls, median_us=med)

    fp8_t = _fp8_dtype(dev)
    gemm_fp8 = dict(tflops=None, best_tflops=None, shape=[M, N, K],
                    fp8_dtype=str(fp8_t).replace("torch.", ""), calls=0, median_us=None,
                    error=None,
                    method="torch._scaled_mm(a, b.t()), randn cast to fp8, fp32 scalar "
                           "scales, b column-major, bf16 out; median of calls, device events")
    try:
        a8 = a.to(fp8_t)
        b8 = torch.randn(N, K, device=dev, dtype=torch.bfloat16, generator=gen).to(fp8_t).t()
        one = torch.ones((), device=dev, dtype=torch.float32)
        t = _time_calls(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one,
                                                 out_dtype=torch.bfloat16), calls, warmup)
        med = statistics.median(t)
        gemm_fp8.update(tflops=flop / med / 1e6, best_tflops=flop / min(t) / 1e6,
                        calls=calls, median_us=med)
    except (RuntimeError, TypeError, AttributeError) as exc:  # old torch / unsupported arch
        gemm_fp8["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    del a, b
    torch.cuda.empty_cache()
    return gemm_bf16, gemm_fp8


def measure_ceilings(device: str = "cuda", size_gib: float = 2.0, gemm_n: int = 8192,
                     calls: int = 50, warmup: int = 10, command: str | None = None) -> dict:
    """Measure copy and read bandwidth and bf16/fp8 GEMM ceilings on `device`; returns a dict that
    validates against CEILINGS_SCHEMA (manifest included). Needs a CUDA/ROCm GPU.
    command: recorded in the manifest (default: this process's command line)."""
    import torch

    if not torch.cuda.is_available():
        raise UsageError(f"no GPU: torch {torch.__version__} sees no CUDA/ROCm device; "
                         "run `moe-lab ceilings` on a GPU machine")
    dev = torch.device(device)
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(dev)
    props = torch.cuda.get_device_properties(dev)
    name = props.name
    gen = torch.Generator(device=dev).manual_seed(0)

    memory, memory_read = _measure_memory(dev, size_gib, calls, warmup, gen)
    gemm_bf16, gemm_fp8 = _measure_gemms(dev, gemm_n, calls, warmup, gen)

    spec = spec_for(name)
    hip = torch.version.hip
    result = {
        "schema": SCHEMA_ID,
        "device": dict(name=name, slug=device_slug(name), vendor="amd" if hip else "nvidia",
                       arch=(getattr(props, "gcnArchName", "") if hip
                             else f"sm_{props.major}{props.minor}"),
                       multiprocessors=props.multi_processor_count,
                       total_memory_bytes=props.total_memory,
                       l2_cache_bytes=getattr(props, "L2_cache_size", None)),
        "memory": memory,
        "memory_read": memory_read,
        "gemm_bf16": gemm_bf16,
        "gemm_fp8": gemm_fp8,
        "vendor": dict(spec=spec_key(spec) if spec else None,
                       bf16_tflops=spec.bf16_tflops if spec else None,
                       fp8_tflops=spec.fp8_tflops if spec else None,
                       hbm_tb_s=spec.hbm_tb_s if spec else None),
        "manifest": dict(device_name=name, torch=torch.__version__, cuda=torch.version.cuda,
                         hip=hip,
                         date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                         command=command or command_line(),
                         git_commit=git_commit(), hostname=platform.node()),
    }
    validate_ceilings(result)
    return result


def write_ceilings(result: dict, data_dir: str | os.PathLike = "data/ceilings") -> Path:
    """Validate and write `<data_dir>/<device-slug>.json` atomically (tmp, then rename)."""
    validate_ceilings(result)
    out_dir = Path(data_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{result['device']['slug']}.json"
    atomic_write_json(path, result)
    return path


def summary_lines(result: dict) -> list[str]:
    """Human lines: each ceiling, and % of the vendor peak where one is known."""
    v = result["vendor"]

    def pct(x, peak):
        return f" ({100 * x / peak:.0f}% of vendor {peak:g})" if x and peak else ""
    m, g, f = result["memory"], result["gemm_bf16"], result["gemm_fp8"]
    lines = [f"device  {result['device']['name']} ({result['device']['arch']})",
             f"copy    {m['tb_per_s']:.2f} TB/s{pct(m['tb_per_s'], v['hbm_tb_s'])} "
             "(read + written)"]
    r = result.get("memory_read")
    if r is not None:
        lines.append(f"read    {r['tb_per_s']:.2f} TB/s{pct(r['tb_per_s'], v['hbm_tb_s'])}"
                     + (" (read only: the roof's bandwidth)" if r["tb_per_s"] >= m["tb_per_s"]
                        else " (read only, below the copy: the roof keeps the copy's)"))
    else:
        lines.append("read    not measured (roofs use the copy bandwidth)")
    lines.append(f"bf16    {g['tflops']:.0f} TFLOP/s{pct(g['tflops'], v['bf16_tflops'])}")
    if f["tflops"] is not None:
        lines.append(f"fp8     {f['tflops']:.0f} TFLOP/s{pct(f['tflops'], v['fp8_tflops'])}")
    else:
        lines.append(f"fp8     not measured: {f['error']}")
    return lines
