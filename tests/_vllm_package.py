"""The real vLLM package for the CPU tests of the `vllm` backend (tests/test_vllm_api.py).

vLLM's wheel is 304 MB (flash-attention and its CUDA libraries); the tests need its Python
files only. `vllm_site()` keeps, in a cache folder, the wheel's `*.py`, its JSON configs
(the shipped fused-MoE configurations among them) and its dist-info (7.8 MB packed, 36 MB
unpacked), plus the few pure-Python packages vLLM imports on the way to its fused MoE that
a moe-lab test environment lacks (DEPS); the wheel itself is not kept. Built once:

    ${MOE_LAB_CACHE:-~/.cache/moe-lab}/vllm-0.26.0/{site,deps}/

from a wheel given by MOE_LAB_VLLM_WHEEL (a file or a folder holding it), or `.whl/` or
`.whl/vllm/` (scripts/fetch-device-wheels.sh vllm puts it there) at the
repo root, else downloaded with `pip download --no-deps vllm==0.26.0`. When none of that
works (no network and no copy) the tests skip, saying so.

Imported like this, vLLM detects no GPU platform (UnspecifiedPlatform) and its compiled
ops are absent; modules it imports on the way that no MoE code runs (its OpenAI server,
Mistral's tokenizer, aiohttp) are empty stand-ins when not installed (STUBBED): the
ones scripts/device_bundle.py writes for the GPU machine (version 0.0.0), in the cache."""
from __future__ import annotations

import fcntl
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

VERSION = "0.26.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# pure-Python (or small binary) packages vLLM imports before its fused MoE is reached,
# pinned to versions that satisfy vllm 0.26.0's requirements
DEPS = ("regex==2026.11.19", "cachetools==8.0.2", "blake3==1.0.11", "msgspec==0.23.0",
        "cbor2==6.3.0", "pybase64==1.5.1", "pydantic==2.14.4", "pydantic-core==2.50.5",
        "annotated-types==0.8.0", "typing-inspection==0.4.5", "transformers==5.25.0",
        "tokenizers==0.23.3", "safetensors==0.8.0", "huggingface-hub==2.4.0")
STUBBED = ("openai", "openai_harmony", "mistral_common", "aiohttp", "httpx2", "httpcore2")
_KEEP = (".py", ".json", ".jinja")
_SKIP_DIRS = ("vllm/vllm_flash_attn/", "vllm/third_party/deep_gemm/",
              "vllm/third_party/fmha_sm100/", "vllm/third_party/tml_fa4/")


def cache_dir() -> str:
    base = os.environ.get("MOE_LAB_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                           "moe-lab")
    return os.path.join(base, f"vllm-{VERSION}")


def _find_wheel() -> str | None:
    for where in (os.environ.get("MOE_LAB_VLLM_WHEEL"), os.path.join(ROOT, ".whl"),
                  os.path.join(ROOT, ".whl", "vllm")):  # scripts/fetch-device-wheels.sh vllm
        if not where:
            continue
        if os.path.isfile(where):
            return where
        hits = sorted(glob.glob(os.path.join(where, f"vllm-{VERSION}-*.whl")))
        if hits:
            return hits[0]
    return None


def _pip(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=900)


def _extract(wheel: str, dest: str) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist()
                 if (n.startswith("vllm/") and n.endswith(_KEEP)
                     and not n.startswith(_SKIP_DIRS))
                 or (n.startswith(f"vllm-{VERSION}.dist-info/") and not n.endswith("RECORD"))]
        z.extractall(dest, members=names)


def _build(out: str) -> str:
    """Build out/{site,deps} in a temporary folder and rename it into place; "" or why not."""
    tmp = tempfile.mkdtemp(prefix="build-", dir=os.path.dirname(out))
    try:
        wheel = _find_wheel()
        if wheel is None:
            r = _pip("download", "-q", "--no-deps", "--only-binary=:all:", f"vllm=={VERSION}",
                     "-d", tmp)
            hits = glob.glob(os.path.join(tmp, "vllm-*.whl"))
            if r.returncode or not hits:
                return (f"pip download vllm=={VERSION} failed: "
                        f"{(r.stderr.strip().splitlines() or ['?'])[-1][:200]}")
            wheel = hits[0]
        _extract(wheel, os.path.join(tmp, "site"))
        for w in glob.glob(os.path.join(tmp, "vllm-*.whl")):
            os.remove(w)  # 304 MB: the extracted files are what is kept
        r = _pip("install", "-q", "--no-deps", "--target", os.path.join(tmp, "deps"), *DEPS)
        if r.returncode:
            return (f"pip install of vLLM's import dependencies failed: "
                    f"{(r.stderr.strip().splitlines() or ['?'])[-1][:200]}")
        os.rename(tmp, out)
        tmp = None
        return ""
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def vllm_site() -> tuple[str | None, str]:
    """(cache folder holding site/ and deps/, "") or (None, why the package cannot be had)."""
    out = cache_dir()
    if os.path.isdir(os.path.join(out, "site", "vllm")):
        return out, ""
    try:
        os.makedirs(os.path.dirname(out), exist_ok=True)
    except OSError as exc:
        return None, f"cache folder {os.path.dirname(out)} cannot be made: {exc}"
    with open(out + ".lock", "w") as lock:  # one builder at a time (xdist workers)
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.isdir(os.path.join(out, "site", "vllm")):
            return out, ""
        try:
            why = _build(out)
        except (OSError, subprocess.SubprocessError, zipfile.BadZipFile) as exc:
            why = f"{type(exc).__name__}: {exc}"
    return (out, "") if not why else (None, f"vllm {VERSION} cannot be had here ({why}); "
                                            f"set MOE_LAB_VLLM_WHEEL to a downloaded wheel")


def import_vllm():
    """Put the cached vLLM on sys.path (its deps after the environment's own packages) and
    import its fused-MoE modules: (fused_moe module, config module), or raise
    ImportError/OSError with why."""
    folder, why = vllm_site()
    if folder is None:
        raise OSError(why)
    site, deps = os.path.join(folder, "site"), os.path.join(folder, "deps")
    if site not in sys.path:
        sys.path.insert(0, site)
    if deps not in sys.path:
        sys.path.append(deps)
    import importlib.util
    missing = [n for n in STUBBED if n not in sys.modules and importlib.util.find_spec(n) is None]
    # the stand-ins scripts/device_bundle.py writes on the GPU machine, the same files here
    spec = importlib.util.spec_from_file_location(
        "_moe_lab_device_bundle", os.path.join(ROOT, "scripts", "device_bundle.py"))
    bundle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bundle)
    standins = os.path.join(folder, "standins")
    bundle.standins(standins, missing)
    if standins not in sys.path:
        sys.path.append(standins)
    # vLLM disables Triton where it finds no active driver unless CUDA_VISIBLE_DEVICES is
    # set and empty (its distributed-start leniency): keep triton.jit real for the tests
    old = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    try:
        import vllm.model_executor.layers.fused_moe.config as qc
        import vllm.model_executor.layers.fused_moe.fused_moe as fm
    finally:
        if old is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = old
    return fm, qc
