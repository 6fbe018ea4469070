"""Per-kernel device time of one MoE call, each kernel classified into a phase.

    profile_kernels(fn, args)  -> DataFrame[kernel, phase, calls, total_us]  (per forward)
    classify(name) / classify_sequence(names) -> phases
    check_kernel_coverage(kernel_us, graph_median_us) -> (ok, warning)
    export_trace(fn, args, path)  -> Chrome trace .json.gz (opens in Perfetto)

Phases: route, align, gemm1, act, gemm2, combine, quant, other.

Classification is by ordered name patterns (first match wins), for CUDA kernel names
(Triton `_fused_moe_kernel*`, CUTLASS / cuBLAS / nvjet GEMMs, PyTorch's elementwise,
sort, scan and reduce kernels, vLLM's CUDA MoE kernels), ROCm names (aiter asm `fmoe_*`,
CK `kernel_moe_gemm`, CK-tile `MoeSorting*` / `MoeFlatmmKernel`, hipBLASLt `Cijk_*`,
aiter's HIP topk/act/quant kernels) and, for profiles on the CPU, `aten::` op names.

GEMM1 vs GEMM2 is often not in the name (the Triton fused-MoE kernel, cuBLAS, CUTLASS
grouped GEMMs, CK's `kernel_moe_gemm` all run both), so `classify_sequence` uses call
order within one forward: the 1st, 3rd, ... MoE/GEMM launch is gemm1, the 2nd, 4th, ...
gemm2 (a per-expert loop alternates up- and down-projection). Names with an explicit
stage (`fmoe_stage1`, `moe_ck2stages_gemm2`, `kFFN_gemm2`) keep it. A single fused
kernel that does the whole expert MLP (aiter asm 1-stage `fmoe_*`, CK-tile
`FusedMoeGemmKernel`) is reported as gemm1. cuBLAS split-K reduce kernels take the phase
of the GEMM before them; torch._grouped_mm's `prepare_grouped_gemm_data` the one after.

Code that knows its phase can say so: a `moe_lab.<phase>` record_function range (e.g.
`moe_lab.quant` around PyTorch activation quantisation, whose amax/divide/cast kernels are
generic; `moe_lab.gemm1`/`gemm2` around the GEMMs of a loop that runs every gemm1 before
any gemm2). On the CPU that range is one top-level op of that phase. On a GPU the profiler
mirrors it as a device-side annotation: a kernel that starts inside it is named
`moe_lab.<phase>/<kernel>` and takes that phase. Library quant kernels (aiter's
`*quant*`) are `quant` by name.

What the profiler cannot see: graph-replayed kernels (profile eager calls; on ROCm they
may vanish from traces), and work on the host. The CPU profile (device="cpu") reports
the top-level aten ops inside each forward with their inclusive CPU time.
"""
from __future__ import annotations

import gzip
import os
import re
import shutil
import tempfile
from typing import Callable, Sequence

from ..core.constants import PROFILE_ITERS
from ..storage.traces import RANGE_NAME
from ..storage.vocabulary import COVERAGE_RANGE, PHASES

PHASE_RANGES = {f"moe_lab.{p}": p for p in PHASES}  # record_function name -> phase

# order-dependent kinds, resolved by classify_sequence
GEMM, GEMM_AUX, GEMM_PREP = "GEMM", "GEMM_AUX", "GEMM_PREP"

_I = re.IGNORECASE
# C++ integer element types as they appear in kernel template arguments
_INT_T = (r"(?:(?:unsigned|signed)\s+)?(?:char|short|int|long\s+long|long|bool|"
          r"u?int(?:8|16|32|64)_t)\b")
# (compiled pattern, phase or kind). First match wins: specific before generic.
PATTERNS: list[tuple[re.Pattern, str]] = [(re.compile(p, f), k) for p, f, k in [
    # kernels inside a `moe_lab.<phase>` range (module doc), and the range on the CPU
    *[(rf"^moe_lab\.{ph}(/|$)", 0, ph) for ph in PHASES],
    # copies and fills: never part of a phase
    (r"^(memcpy|memset)|\bmemcpy\b|\bmemset\b|hipMemcpy|hipMemset", _I, "other"),
    # alignment / sorting tokens by expert (before "stage1" markers: align has stages too)
    (r"moe_align_block_size|count_and_sort_expert_tokens|moe_sorting|MoeSorting", _I, "align"),
    # explicit stage markers
    (r"fmoe_stage1|ck_moe_stage1|moe_ck2stages_gemm1|kFFN_gemm1|MoeFlatmmKind\)[01]\b", 0, "gemm1"),
    (r"fmoe_stage2|ck_moe_stage2|moe_ck2stages_gemm2|kFFN_gemm2|MoeFlatmmKind\)2\b", 0, "gemm2"),
    # single-kernel fused MoE (whole expert MLP in one launch): reported as gemm1
    (r"(^|[^a-z])fmoe_|fmoe_kernel_func|FusedMoeGemmKernel|fused_moegemm", _I, "gemm1"),
    # GEMM helpers
    (r"splitKreduce|splitK_reduce|reduce_splitk", _I, GEMM_AUX),
    (r"prepare_grouped_gemm_data", _I, GEMM_PREP),
    # MoE / grouped / library GEMMs: stage by order (aiter's fused_moe_silu / _gelu run
    # gemm1 with the activation in its epilogue: a GEMM, not the act glue)
    (r"fused_moe_kernel|fused_moe_(silu|gelu)_kernel|fused_moe_persistent|kernel_moe_gemm|MoeFlatmm|moe_gemm|_moe_mm", _I, GEMM),
    (r"grouped_?(gemm|mm)|GroupProblemShape|GemmUniversal|cutlass|Kernel2|xmma_gemm|"
     r"s16816gemm|s1688gemm|nvjet|gemm|Cijk_|wvSplitK|LLGemm|"
     r"^aten::(mm|matmul|bmm|addmm|baddbmm|linear|_grouped_mm|_scaled_grouped_mm|_scaled_mm\w*)$", _I, GEMM),
    # router
    (r"topk|top_k_per|softmax|sigmoid|moe_fused_gate|gating|"
     r"^aten::(topk|_softmax|softmax|sigmoid)$", _I, "route"),
    # SiLU*mul with gemm2's quantisation in one kernel (aiter's act_mul_and_*_quant,
    # moe_lab.glue's fused act step): the activation, which also writes fp8
    (r"act_mul_and_\w*quant", _I, "act"),
    # quantisation
    (r"quant|data_to_scale|scaled_fp8|per_token_group|fp8_conversion", _I, "quant"),
    # activation
    (r"act_and_mul|silu|gelu|swiglu|swish|activation_kernel|^aten::(silu|gelu|mul|mul_)$", _I, "act"),
    # sort / histogram / scan: the bookkeeping of alignment
    (r"radixsort|radix_sort|bitonicSort|warpMergeSort|sortKeyValue|segmented_?sort|"
     r"DeviceMergeSort|histogram|bincount|index_put|indexPut|cumsum|scan|cub::|MinNanFunctor|"
     r"MaxNanFunctor|"
     r"searchsorted|"
     r"^aten::(sort|argsort|bincount|histc|cumsum|index_put_?|repeat_interleave|unique\w*|"
     r"searchsorted)$",
     _I, "align"),
    # comparisons, selects, index arithmetic: bookkeeping, not the activation
    (r"compare_scalar|compare_kernel|where_kernel|div_floor|div_trunc|remainder_kernel|"
     r"bitwise_|logical_|clamp_", _I, "other"),
    # Integer adds are bookkeeping, not the combine. The same aten kernels serve both:
    # index_add_ is indexFunc{Small,Large}Index<T, index_t, ...ReduceAdd> and sum() is
    # reduce_kernel<..., sum_functor<T, acc_t, out_t>>, with the element type T first. The
    # combine adds the k weighted expert outputs of each token in a floating type (fp32
    # accumulators, bf16/fp16 outputs); an integer T means token bookkeeping: counting
    # tokens per expert (torch-grouped's counts.index_add_ of int32 ones, which feeds the
    # grouped GEMM's offsets), or counting (token, slot) pairs routed to remote experts
    # (the reference's int64 (ids < 0).sum()). That is `align`, with the histograms,
    # scans (cumsum) and sorts below. CPU profiles see only `aten::index_add_` /
    # `aten::sum`, which carry no dtype: they stay `combine`.
    (r"(indexFunc(Small|Large)Index|sum_functor)<\s*" + _INT_T + r"\s*[,>]", 0, "align"),
    # combine: weighted sum of the k expert outputs per token
    # (torch-grouped sums each token's k rows with embedding_bag's per-sample weights)
    (r"moe_sum|index_add|indexFunc(Small|Large)Index|scatter_add|_scatter_gather|"
     r"reduce_kernel|sum_functor|unpermute|finalize_moe|moe_finalize|EmbeddingBag|"
     r"embedding_bag|^aten::(index_add_?|scatter_add_?|scatter_reduce_?|sum|embedding_bag|"
     r"_embedding_bag)$", _I, "combine"),
    # gathers into expert order
    (r"index_elementwise|indexSelect|index_select|gather|^aten::(index|index_select|gather|take)$",
     _I, "align"),
    # fills, copies, aranges
    (r"fill|FillFunctor|direct_copy|copy_kernel|arange|elementwise_kernel_with_index|"
     r"^aten::(empty\w*|zeros\w*|full\w*|ones\w*|fill_|zero_|copy_|to|_to_copy|arange|clone|"
     r"contiguous|view|reshape|t|transpose|slice|select|narrow|expand|as_strided|lt|ge|gt|le|"
     r"eq|ne|where|item|_local_scalar_dense)$", _I, "other"),
    # any other pointwise kernel (PyTorch, Inductor): the activation's neighbourhood
    (r"elementwise|triton_poi_", _I, "act"),
]]


def kind(name: str) -> str:
    """A phase, or GEMM / GEMM_AUX / GEMM_PREP for kernels whose phase depends on order."""
    for pat, k in PATTERNS:
        if pat.search(name):
            return k
    return "other"


def classify(kernel_name: str, context: dict | None = None) -> str:
    """Phase of one kernel. `context` may hold:
    gemm_index: how many order-dependent GEMM launches came before it in this forward
                (0 -> gemm1, 1 -> gemm2, 2 -> gemm1, ...; default 0),
    prev_gemm / next_gemm: phase of the GEMM before / after (for split-K reduce, prep),
    router: True when the kernel runs inside the router (everything is `route`).
    Without context an order-dependent GEMM is gemm1; use classify_sequence."""
    ctx = context or {}
    if ctx.get("router"):
        return "route"
    k = kind(kernel_name)
    if k == GEMM:
        return "gemm1" if int(ctx.get("gemm_index", 0)) % 2 == 0 else "gemm2"
    if k == GEMM_AUX:
        return ctx.get("prev_gemm") or "gemm1"
    if k == GEMM_PREP:
        return ctx.get("next_gemm") or "gemm1"
    return k


def classify_sequence(names: Sequence[str], contexts: Sequence[dict | None] | None = None) -> list[str]:
    """Phases of the kernels of ONE forward, in launch order (see module doc)."""
    kinds = [kind(n) for n in names]
    ctxs = list(contexts) if contexts is not None else [None] * len(names)
    out: list[str | None] = [None] * len(names)
    n_gemm, prev = 0, None
    for i, (name, k) in enumerate(zip(names, kinds)):
        ctx = dict(ctxs[i] or {})
        if ctx.get("router"):
            out[i] = "route"
            continue
        if k == GEMM:
            out[i] = classify(name, {"gemm_index": n_gemm})
            n_gemm += 1
            prev = out[i]
        elif k in ("gemm1", "gemm2"):
            out[i] = k
            prev = k
            # an explicit stage sets the parity: after an explicit gemm1 comes gemm2
            n_gemm = 1 if k == "gemm1" else 0
        elif k == GEMM_AUX:
            out[i] = prev or "gemm1"
    nxt = None
    for i in range(len(names) - 1, -1, -1):
        if out[i] in ("gemm1", "gemm2"):
            nxt = out[i]
        elif out[i] is None:
            out[i] = (nxt or "gemm1") if kinds[i] == GEMM_PREP else kinds[i]
    return out  # type: ignore[return-value]


# --- profiler ---------------------------------------------------------------------------

def _is_gpu(device) -> bool:
    return str(device).startswith("cuda")


def _dur_us(e) -> float:
    tr = e.time_range
    return float(tr.end - tr.start)


def _kernel_name(e) -> str:
    return getattr(e, "trace_name", None) or e.name


def split_iterations(ranges: list[tuple[float, float]], events: list[tuple[float, str, float]],
                     iters: int, slack_us: float = 5.0) -> tuple[list[list[tuple[str, float]]], str]:
    """Assign (start_us, name, dur_us) events to forward ranges [(start, end)].

    A kernel belongs to the range its start falls in (the forward synchronises before its
    range closes). If that fails to place every kernel (clock skew between host and
    device timestamps), fall back to equal chunks in time order when the count divides
    by `iters`, else one sequence; the second value says which way was taken."""
    events = sorted(events)
    if len(ranges) == iters and ranges:
        seqs: list[list[tuple[str, float]]] = [[] for _ in ranges]
        placed = 0
        for start, name, dur in events:
            for j, (lo, hi) in enumerate(ranges):
                if lo - slack_us <= start <= hi + slack_us:
                    seqs[j].append((name, dur))
                    placed += 1
                    break
        if placed == len(events):
            return seqs, "ranges"
    if iters > 0 and events and len(events) % iters == 0:
        m = len(events) // iters
        return [[(n, d) for _, n, d in events[i * m:(i + 1) * m]] for i in range(iters)], "chunks"
    return [[(n, d) for _, n, d in events]], "single"


def kernel_table(sequences: list[list[tuple[str, float]]], iters: int):
    """DataFrame[kernel, phase, calls, total_us] per forward from per-forward sequences of
    (kernel name, duration us); rows in order of first appearance."""
    import pandas as pd
    acc: dict[tuple[str, str], list[float]] = {}
    for seq in sequences:
        phases = classify_sequence([n for n, _ in seq])
        for (name, dur), ph in zip(seq, phases):
            a = acc.setdefault((name, ph), [0.0, 0.0])
            a[0] += 1
            a[1] += dur
    n = max(1, iters)
    rows = [dict(kernel=k, phase=p, calls=c / n, total_us=t / n) for (k, p), (c, t) in acc.items()]
    return pd.DataFrame(rows, columns=["kernel", "phase", "calls", "total_us"])


def _run_profiled(fn: Callable, args: tuple, iters: int, device, activities,
                  range_name: str = RANGE_NAME):
    import torch
    from torch.profiler import profile, record_function
    gpu = _is_gpu(device)
    fn(*args)  # JIT compile, autotune, allocate: outside the profile
    if gpu:
        torch.cuda.synchronize()
    import inspect
    kw = {"acc_events": True} if "acc_events" in inspect.signature(profile).parameters else {}
    with profile(activities=activities, **kw) as prof:
        for _ in range(iters):
            with record_function(range_name):
                fn(*args)
                if gpu:
                    torch.cuda.synchronize()
    return prof


def profile_kernels(fn: Callable, args: tuple, iters: int = PROFILE_ITERS, device: str = "cuda",
                    range_name: str = RANGE_NAME):
    """Per-kernel time of one call of fn(*args), averaged over `iters` profiled calls.

    GPU: device-side kernel/memcpy events of torch.profiler (ProfilerActivity.CUDA, which
    also covers HIP on ROCm). CPU: the top-level aten ops inside each forward, with their
    inclusive CPU time. Returns DataFrame[kernel, phase, calls, total_us], per call;
    `df.attrs["split"]` says how kernels were assigned to forwards."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity
    gpu = _is_gpu(device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    prof = _run_profiled(fn, tuple(args), iters, device, acts, range_name)
    evs = list(prof.events())
    fwd = [e for e in evs if e.name == range_name and e.device_type == DeviceType.CPU]
    fwd.sort(key=lambda e: e.time_range.start)
    ranges = [(e.time_range.start, e.time_range.end) for e in fwd]
    if gpu:
        spans = [(e.time_range.start, e.time_range.end, e.name) for e in evs
                 if e.device_type == DeviceType.CUDA and e.name in PHASE_RANGES]

        def named(e):
            t = e.time_range.start
            inside = next((n for lo, hi, n in spans if lo <= t <= hi), None)
            return f"{inside}/{_kernel_name(e)}" if inside else _kernel_name(e)
        items = [(e.time_range.start, named(e), _dur_us(e)) for e in evs
                 if e.device_type == DeviceType.CUDA
                 and not getattr(e, "is_user_annotation", False)
                 and e.name != range_name and e.name not in PHASE_RANGES
                 and not e.name.startswith("ProfilerStep")]
        seqs, how = split_iterations(ranges, items, iters)
    else:
        fwd_ids = {id(e) for e in fwd}
        seqs = [[] for _ in fwd]
        index = {id(e): j for j, e in enumerate(fwd)}
        tops = [e for e in evs if e.device_type == DeviceType.CPU and e.cpu_parent is not None
                and id(e.cpu_parent) in fwd_ids]
        if not tops:  # cpu_parent objects may be copies: match by time instead
            tops = [e for e in evs if e.device_type == DeviceType.CPU and e.name != range_name
                    and e.cpu_parent is not None and e.cpu_parent.name == range_name]
            items = [(e.time_range.start, e.name, _dur_us(e)) for e in tops]
            seqs, how = split_iterations(ranges, items, iters)
        else:
            for e in sorted(tops, key=lambda e: e.time_range.start):
                seqs[index[id(e.cpu_parent)]].append((e.name, _dur_us(e)))
            how = "ranges"
    df = kernel_table(seqs, iters)
    df.attrs["split"] = how
    return df


def kernel_us(df) -> float:
    """Sum of per-call kernel time in a profile_kernels table."""
    return float(df["total_us"].sum()) if len(df) else 0.0


def phase_table(df):
    """Per-phase totals (DataFrame[phase, total_us, calls]) in PHASES order."""
    import pandas as pd
    g = df.groupby("phase", as_index=False)[["total_us", "calls"]].sum()
    g["phase"] = pd.Categorical(g["phase"], PHASES, ordered=True)
    return g.sort_values("phase").reset_index(drop=True)


def check_kernel_coverage(kernel_us: float, graph_median_us: float,
                          lo: float = COVERAGE_RANGE[0], hi: float = COVERAGE_RANGE[1]) -> tuple[bool, str]:
    """Does the profiled kernel sum explain the graph-replay time? ok when lo <= ratio <= hi."""
    if not graph_median_us or graph_median_us != graph_median_us or graph_median_us <= 0:
        return False, "no graph time to compare the kernel sum with"
    if kernel_us != kernel_us or kernel_us <= 0:
        return False, ("the profiler recorded no kernel time: kernels lost by the profiler "
                       "(tracing off or unsupported on this device)")
    r = kernel_us / graph_median_us
    if r < lo:
        return False, (f"kernels sum to {r:.0%} of the graph time ({kernel_us:.1f} of "
                       f"{graph_median_us:.1f} us, expected >= {lo:.0%}): the profiler lost "
                       "kernels (e.g. asm/graph kernels missing from ROCm traces), or the "
                       "graph replay has launch gaps / idle time between kernels")
    if r > hi:
        return False, (f"kernels sum to {r:.0%} of the graph time ({kernel_us:.1f} of "
                       f"{graph_median_us:.1f} us, expected <= {hi:.0%}): kernels overlap "
                       "(several streams), profiled calls ran slower than timed ones (cold "
                       "cache, clocks, profiler overhead), or the graph misses work")
    return True, ""


def export_trace(fn: Callable, args: tuple, path: str, iters: int = 3, device: str = "cuda") -> str:
    """Profile `iters` calls and write a Chrome trace (.json.gz, opens in Perfetto)."""
    from torch.profiler import ProfilerActivity
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if _is_gpu(device) else [])
    prof = _run_profiled(fn, tuple(args), iters, device, acts)
    path = str(path)
    if not path.endswith(".json.gz"):
        path += ".json.gz"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd, tmp_json = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    tmp_gz = path + ".tmp"
    try:
        prof.export_chrome_trace(tmp_json)
        with open(tmp_json, "rb") as src, gzip.open(tmp_gz, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(tmp_gz, path)
    finally:
        for p in (tmp_json, tmp_gz):
            if os.path.exists(p):
                os.remove(p)
    return path


def profile_point(model: str, tokens: int, backend: str, tp: int, ep: int, ep_rank: int,
                  dtype: str, routing: str, device: str, iters: int, trace: str | None,
                  seed: int, config: str = "default"):
    """One point under the profiler, after a check (values already checked, device
    resolved; `config` a tunable backend's launch configuration: default, tuned or a file):
    (per-kernel table with phases, path of the Chrome trace). The notebook API's `profile`
    and `moe-lab profile` both call this."""
    from .correctness import checked_point
    from .progress import native_log_filter
    prob, fn, inp, chk = checked_point(model, tokens, backend, tp, ep, ep_rank, dtype, routing,
                                       device, seed, config=config)
    with native_log_filter():
        df = profile_kernels(fn, inp.args(), iters=iters, device=device)
    df.attrs.update(check=chk, point=prob.describe())
    tag = "" if config == "default" else "_" + os.path.basename(config).removesuffix(".json")
    trace = trace or os.path.join("out", "traces", f"{prob.model.name}_{prob.sharding}_"
                                  f"T{prob.tokens}_{backend}{tag}.json.gz")
    os.makedirs(os.path.dirname(os.path.abspath(trace)), exist_ok=True)
    with native_log_filter():  # the path written: `.json.gz` added where the name lacks it
        trace = export_trace(fn, inp.args(), trace, device=device)  # (was: the path given)
    return df, trace
