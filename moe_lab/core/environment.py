"""Where a measurement was made: device, driver, library versions, git commit, command.

`git_commit()` is the one place that reads the checkout's commit; every manifest, row and
figure footer that names a commit gets it from here (or from the rows themselves).
"""
from __future__ import annotations

import datetime as _dt
import functools
import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path

ENV_PREFIXES = ("VLLM_", "AITER_", "TORCH_", "NCCL_", "PYTORCH_", "TRITON_", "HIP_", "ROCM_",
                "HSA_", "CUDA_", "OMP_")
ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
REPO_ROOT = Path(__file__).resolve().parents[2]


def now_iso() -> str:
    """Local time with its UTC offset, the format of every `measured_at`."""
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def _version(dist: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _run(cmd: list[str], cwd=None, timeout=10) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


UNKNOWN_COMMIT = "unknown"  # what a row records when no commit can be known
NO_COMMIT_WARNING = ("no git commit known (no .git here and MOE_LAB_GIT_COMMIT unset): rows "
                     "record git_commit 'unknown'; set MOE_LAB_GIT_COMMIT=<sha> to name it")


def git_commit(repo_dir: str | os.PathLike | None = None) -> str:
    """The commit these numbers come from: MOE_LAB_GIT_COMMIT when set, else HEAD, else
    UNKNOWN_COMMIT (never None: no row without a commit)."""
    return git_state(repo_dir)["commit"]


def git_state(repo_dir: str | os.PathLike | None = None) -> dict:
    """{"commit": sha, "dirty": bool or None} of the repo holding this package; a copy with
    no .git and no MOE_LAB_GIT_COMMIT: commit UNKNOWN_COMMIT, and "warning" says so."""
    repo = str(repo_dir or REPO_ROOT)
    told = os.environ.get("MOE_LAB_GIT_COMMIT")
    if told and not re.fullmatch(r"[0-9a-f]{7,40}", told):
        from .errors import UsageError
        raise UsageError(f"MOE_LAB_GIT_COMMIT={told!r} is not a commit sha (7-40 hex digits)")
    if told:  # a copy sent to another machine: the sender says which commit it is (a .git
        # that travelled with the copy can be stale: the lent GPUs reported an older HEAD)
        return {"commit": told, "dirty": os.environ.get("MOE_LAB_GIT_DIRTY", "unknown")}
    sha = _run(["git", "rev-parse", "HEAD"], cwd=repo)
    if sha is None:
        return {"commit": UNKNOWN_COMMIT, "dirty": None, "warning": NO_COMMIT_WARNING}
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo)
    return {"commit": sha, "dirty": bool(status) if status is not None else None}


SOURCE_PARTS = ("moe_lab", "scripts")  # what a measurement's code is: the package, the scripts


def _source_file(rel: str) -> bool:
    return rel.startswith("scripts/") or (rel.startswith("moe_lab/") and rel.endswith(".py"))


def _digest(items) -> str:
    import hashlib
    h = hashlib.sha256()
    for rel, data in sorted(items):
        h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()[:16]


def source_digest(root: str | os.PathLike | None = None) -> str:
    """The code a measurement ran, as one hash: every moe_lab/**/*.py and scripts/* file
    here (path and bytes). Recorded in every manifest, on machines without git too (the lent
    GPUs get a copy of the tree and no .git), so a run can be checked against its commit:
    commit_source_digest(commit) is the same hash over that commit's files."""
    base = Path(root or REPO_ROOT)
    items = []
    for part in SOURCE_PARTS:
        for f in (base / part).rglob("*"):
            rel = f.relative_to(base).as_posix()
            if f.is_file() and "__pycache__" not in rel and _source_file(rel):
                items.append((rel, f.read_bytes()))
    return _digest(items)


@functools.lru_cache(maxsize=None)  # a commit's files do not change: read once per commit
def commit_source_digest(commit: str, repo_dir=None) -> str | None:
    """source_digest over `commit`'s tracked files (git), None without git or the commit:
    a run whose manifest's source_digest equals it ran that commit's code unchanged."""
    repo = str(repo_dir or REPO_ROOT)
    names = _run(["git", "ls-tree", "-r", "--name-only", commit, "--", *SOURCE_PARTS], cwd=repo)
    if names is None:
        return None
    rels = [n for n in names.splitlines() if _source_file(n)]
    try:
        out = subprocess.run(["git", "cat-file", "--batch"], cwd=repo, capture_output=True,
                             timeout=60, input="".join(f"{commit}:{r}\n" for r in rels).encode())
    except (OSError, subprocess.SubprocessError):
        return None
    data, items, at = out.stdout, [], 0
    for rel in rels:  # "<sha> blob <size>\n<bytes>\n" per object
        nl = data.index(b"\n", at)
        size = int(data[at:nl].split()[2])
        items.append((rel, data[nl + 1:nl + 1 + size]))
        at = nl + 1 + size + 1
    return _digest(items)


def code_state(env: dict, repo_dir=None) -> str:
    """Whether a manifest's environment ran its commit's code: `as committed` (its
    source_digest is the commit's), `changed` (it is not), `commit not here`; without a
    digest, git's word where it had one (`clean`/`changed (git status)`), else `not recorded`."""
    digest, commit = env.get("source_digest"), str(env.get("git_commit") or "")
    if digest:
        want = commit_source_digest(commit, str(repo_dir or REPO_ROOT)) if commit else None
        return "commit not here" if want is None else "as committed" if want == digest else "changed"
    dirty = env.get("git_dirty")
    return {True: "changed (git status)", False: "clean"}.get(dirty, "not recorded")


def _device_info() -> dict:
    import torch
    info = {"device": "cpu", "device_name": platform.processor() or platform.machine(),
            "vendor": "CPU", "device_count": 0}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(device="cuda", device_name=props.name, device_count=torch.cuda.device_count(),
                    vendor="ROCm" if torch.version.hip else "CUDA",
                    device_memory_gb=round(props.total_memory / 2**30, 1),
                    multiprocessors=props.multi_processor_count,
                    l2_cache_bytes=getattr(props, "L2_cache_size", None),
                    gpu_uuid=str(getattr(props, "uuid", "") or "") or None)
        arch = getattr(props, "gcnArchName", None)
        if arch:
            info["arch"] = arch
        else:
            info["arch"] = "sm_%d%d" % torch.cuda.get_device_capability(0)
    return info


def _repo_relative(argv: list[str], repo_dir=None) -> list[str]:
    """argv with paths inside the repository made relative to it (manifests travel)."""
    root = str(Path(repo_dir or REPO_ROOT).resolve()) + os.sep
    return [a[len(root):] if a.startswith(root) else a for a in argv]


def boot_id() -> str | None:
    """This machine's boot (Linux's random boot_id): lent machines share one hostname, so
    this is what tells a run resumed on another lease from one measured on one machine."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def vllm_device_code() -> str | None:
    """Which compiled GPU code of vLLM's libraries is here (None without vllm): a vLLM
    brought to a machine by scripts/device_bundle.py with an ARCH says so in
    MOE_LAB_DEVICE_CODE.json beside the package (that GPU's images kept as the wheel has
    them, the others' zeroed); any other install is whatever it is. Found without
    importing vllm."""
    import importlib.util
    import json
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    site = os.path.dirname(list(spec.submodule_search_locations)[0])
    try:
        with open(os.path.join(site, "MOE_LAB_DEVICE_CODE.json")) as f:
            d = json.load(f)
        return f"{d['arch']} only, from {d['wheel']}: {d['rule']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "as installed"


def capture_environment(repo_dir: str | os.PathLike | None = None) -> dict:
    """What a reader needs to trust and reproduce the numbers of a run."""
    import torch
    env = _device_info()
    env.update(
        torch=torch.__version__,
        cuda_runtime=torch.version.cuda,
        hip_runtime=torch.version.hip,
        driver=None,
        triton=_version("triton") or _version("pytorch-triton-rocm"),
        aiter=_version("amd-aiter"),
        vllm=_version("vllm"),
        vllm_device_code=vllm_device_code(),
        python=sys.version.split()[0],
        platform=platform.platform(),
        hostname=socket.gethostname(),
        boot_id=boot_id(),
        cpu_count=os.cpu_count(),
        env={k: v for k, v in sorted(os.environ.items())
             if k in ENV_NAMES or k.startswith(ENV_PREFIXES)},
        argv=_repo_relative(sys.argv, repo_dir),
        captured=now_iso(),
    )
    if env["vendor"] == "CUDA":
        env["driver"] = _run(["nvidia-smi", "--query-gpu=driver_version",
                              "--format=csv,noheader"], timeout=20)
        if env["driver"]:
            env["driver"] = env["driver"].splitlines()[0].strip()
    elif env["vendor"] == "ROCm":
        out = _run(["rocm-smi", "--showdriverversion"], timeout=20)
        if out:
            env["driver"] = next((ln.split(":", 1)[1].strip() for ln in out.splitlines()
                                  if "version" in ln.lower() and ":" in ln), out.splitlines()[-1])
    g = git_state(repo_dir)
    env["git_commit"], env["git_dirty"] = g["commit"], g["dirty"]
    env["source_digest"] = source_digest(repo_dir)  # the code that ran, checkable later
    if g.get("warning"):
        env["git_warning"] = g["warning"]
    return env


def device_name(device: str) -> str:
    """What rows call the device: torch's GPU name, or `cpu (<processor>)`."""
    if str(device).startswith("cuda"):
        import torch
        return torch.cuda.get_device_name()
    return f"cpu ({platform.processor() or platform.machine()})"


def command_line(argv: list[str] | None = None) -> str:
    """`moe-lab VERB ...` for the CLI, else the script and its arguments."""
    argv = list(sys.argv if argv is None else argv)
    argv0 = argv[0] if argv else ""
    if argv0 in ("-c", ""):
        return f"{Path(sys.executable).name} -c (inline code)"
    return " ".join([Path(argv0).name] + _repo_relative(argv[1:]))
