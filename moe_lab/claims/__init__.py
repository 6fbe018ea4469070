"""Check published performance claims: parse the benchmark text a PR pastes, keep every
numeric claim in a registry (data/claims/registry.json), check each claim, and say what
it implies for the MoE kernels.

    from moe_lab import claims
    reg = claims.load_registry()
    table = claims.run_checks(reg)          # pass / warn / fail with reasons
    claims.shown(table, ['warn', 'fail'])   # those statuses only
    imp = claims.implications(reg)          # per-MoE-layer saving vs roofline floor
    avv = claims.aiter_vs_vllm(None, imp)   # aiter vs vLLM measured, beside the claims
"""
from .verdicts import format_report, run_checks, shown, summary
from .implications import aiter_vs_vllm, implications, measured_folders
from .parser import parse_file, parse_text, to_frame, tidy
from .registry import build_registry, load_registry

__all__ = ["aiter_vs_vllm", "build_registry", "format_report", "implications", "load_registry", "measured_folders", "parse_file",
           "parse_text", "run_checks", "shown", "summary", "tidy", "to_frame"]
