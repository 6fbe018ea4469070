"""Importing the installed aiter's Triton modules on any platform. `import aiter` runs
aiter/__init__.py, which needs ROCm; off ROCm we register empty package modules for
`aiter` and `aiter.ops` pointing at the installed package's folders, so that
`aiter.ops.triton.*` import without the ROCm-only top level. Below the backends and the
glue, which both load aiter's kernels through it."""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
import types

import torch


def aiter_root() -> str | None:
    """Folder of the installed `aiter` package, found without importing it."""
    mod = sys.modules.get("aiter")
    if mod is not None and getattr(mod, "__path__", None):
        return list(mod.__path__)[0]
    spec = importlib.util.find_spec("aiter")
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def load_aiter_triton():
    """(moe_op, moe_align_block_size) modules from the installed aiter, without running
    aiter/__init__.py off ROCm."""
    root = aiter_root()
    if root is None:
        raise ImportError("aiter is not installed (pip install amd-aiter)")
    if torch.version.hip is None and "aiter" not in sys.modules:
        for name, sub in (("aiter", ""), ("aiter.ops", "ops")):
            path = os.path.join(root, sub) if sub else root
            mod = types.ModuleType(name)
            mod.__path__ = [path]
            mod.__file__ = os.path.join(path, "__init__.py")
            mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
            mod.__spec__.submodule_search_locations = [path]
            mod.__moe_lab_stub__ = True
            sys.modules[name] = mod
        sys.modules["aiter"].ops = sys.modules["aiter.ops"]
    moe_op = importlib.import_module("aiter.ops.triton.moe_op")
    align = importlib.import_module("aiter.ops.triton.moe_align_block_size")
    return moe_op, align


def load_aiter_glue():
    """aiter's Triton glue modules (activation, fused_fp8_quant, quant) for moe_lab.glue.
    They read `aiter.dtypes.fp8` (the device's fp8 dtype, from ROCm-only code) at import
    as a default argument: off ROCm our package stub gets a stand-in `dtypes` whose fp8
    is e4m3fn; moe_lab.glue always passes the scheme's dtype explicitly."""
    load_aiter_triton()
    pkg = sys.modules["aiter"]
    if getattr(pkg, "__moe_lab_stub__", False) and not hasattr(pkg, "dtypes"):
        dtypes = types.ModuleType("aiter.dtypes")
        dtypes.fp8 = torch.float8_e4m3fn
        dtypes.__moe_lab_stub__ = True
        pkg.dtypes = dtypes
    return tuple(importlib.import_module(f"aiter.ops.triton.{m}")
                 for m in ("activation", "fused_fp8_quant", "quant"))


def load_silu_fused():
    """aiter's `moe_op_silu_fused` module (gemm1 with SiLU*mul in its epilogue)."""
    load_aiter_triton()  # the package stubs off ROCm
    return importlib.import_module("aiter.ops.triton.moe_op_silu_fused")


def aiter_version() -> str:
    try:
        from importlib.metadata import version
        return version("amd-aiter")
    except Exception:
        return "not installed"
