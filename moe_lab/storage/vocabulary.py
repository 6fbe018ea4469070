"""The rows' vocabulary: the names and limits a stored row, a run's phases and kernels,
an eager split and a distributed row are written in, declared once beside the result row
(rows.py). Measuring writes in it; analysis, plots and the findings read in it, so none of
them needs the code that measures. (A row's `mode` is modes.py.)

    PHASES          the phases a kernel is classified into (measuring.profiling)
    GEMMS           the two GEMM phases (the ledger's, the targets', the FP8 GEMM section's)
    COVERAGE_RANGE  a graph point's profiled kernel sum over its graph median, accepted
    NOISE_LIMIT     (p90 - p10) / median above this marks a point `noisy`
    PARTS, PART_LABELS  an eager call's wall time, cut into three parts (the eager split)
    VARIANTS        the `parallel` column of a distributed row (moe_lab.distributed)
"""
from __future__ import annotations

PHASES = ("route", "align", "gemm1", "act", "gemm2", "combine", "quant", "other")
GEMMS = ("gemm1", "gemm2")
COVERAGE_RANGE = (0.7, 1.05)
NOISE_LIMIT = 0.1  # the README states it ('p10-p90 over 10% of the median')

PARTS = ("host_us", "gap_us", "kernel_us")
PART_LABELS = {"host_us": "Python and dispatch (host)", "gap_us": "launch gaps (device idle)",
               "kernel_us": "kernels (device busy)"}

VARIANTS = ("tp-allreduce", "ep-allreduce", "ep-alltoall")
