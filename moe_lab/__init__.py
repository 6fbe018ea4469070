"""moe-lab: a performance investigation workbook for fused Mixture-of-Experts kernels.

    import moe_lab as ml
    ml.runs(); run = ml.open_run(); ml.check(...); ml.measure(...); ml.profile(...)

(moe_lab.api has the details; attributes load on first use, so `import moe_lab` is cheap.)
"""
__version__ = "0.1.0"
__all__ = ["runs", "open_run", "find_runs", "check", "measure", "profile", "Run", "UsageError"]


def __getattr__(name):
    if name in __all__:
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'moe_lab' has no attribute {name!r}")
