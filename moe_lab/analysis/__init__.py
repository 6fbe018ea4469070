"""The analysis layer: functions from runs or frames to frames (as HTA's analyzers are).
Notebooks import this one module (`from moe_lab import analysis as an`) and `moe_lab.plots`
to draw what it returns:

    runs              which run a question reads (the one module that chooses runs)
    targets, metrics  the workbook's targets (one record each), the one evaluation, and
                      the metric frames it is evaluated on
    ledger            every phase against its floor (the floors: moe_lab.cost.ledger)
    kernel_time (01), compile_tables (02), roofline_tables (03), fp8 (01, 03),
    fp8_gemm (03), devices (01, 03, 04), tuning and tuned (05: the tuned files' room),
    expert_parallel (06), vllm_files (vLLM's own files its lookup misses on a GPU),
    vllm_compare (05: ours over vLLM as shipped), eager_split (where an eager call's time
    goes, from its trace), eager_split_tables (the review export)
    tuned             the tuned files' room: required shapes, inventory, the tuned and
                      default pairs, published tunings, the tuned layer's % of roof
    findings          docs/findings.md, generated from the committed runs
"""
from . import (  # noqa: F401
    compile_tables, devices, eager_split, eager_split_tables, expert_parallel, fp8, fp8_gemm,
    kernel_time, ledger, metrics, roofline_tables, runs, targets, tuned, tuning, vllm_compare,
    vllm_files)
from .targets import TARGETS, Target, evaluate, held_back_by, summary  # noqa: F401
