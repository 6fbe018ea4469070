"""Run folders: schema, atomic writes, resumption, environment capture.

A run is `data/runs/<run_id>/` with
    manifest.json      environment, command line, start/end (write_manifest/update_manifest)
    results.parquet    one row per point, RESULT_COLUMNS first (extra columns allowed)
    kernels.parquet    per point and kernel: KERNEL_COLUMNS
    traces/*.json.gz   optional Chrome traces

Every write goes to a temporary file in the same folder and is renamed over the old
one (os.replace is atomic on POSIX), so a process killed at any moment leaves the
previous complete file. `append` rewrites the parquet files per call: simple and fast
enough for a few thousand points. A point id that is appended again replaces its old
row (and its old kernel rows), so a resumed sweep never duplicates points.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

ID_FIELDS = ("model", "tp", "ep", "ep_rank", "dtype", "backend", "mode", "tokens", "routing")
RESULT_COLUMNS = (*ID_FIELDS, "status", "error", "median_us", "p10_us", "p90_us", "n",
                  "kernel_us", "max_rel_err", "flops", "bytes", "roof_us", "pct_of_roof",
                  "warning", "noisy", "point_id")
STATUSES = ("ok", "incorrect", "unsupported", "unavailable", "failed", "oom", "timeout")
KERNEL_COLUMNS = ("point_id", "kernel", "phase", "calls", "total_us")
ENV_PREFIXES = ("VLLM_", "AITER_", "TORCH_", "NCCL_", "PYTORCH_", "TRITON_", "HIP_", "ROCM_",
                "HSA_", "CUDA_", "OMP_")
ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
RESULTS, KERNELS, MANIFEST = "results.parquet", "kernels.parquet", "manifest.json"


def point_id(d: dict) -> str:
    """Stable 16-hex id from the identifying fields (missing ones count as empty).
    Numbers are normalised (8 == 8.0 == "8"), so ids survive a parquet round trip."""
    parts = []
    for k in ID_FIELDS:
        v = d.get(k, "")
        if v is None or (isinstance(v, float) and v != v):
            v = ""
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if hasattr(v, "item") and not isinstance(v, (str, bytes)):  # numpy scalars
            v = v.item()
        parts.append(f"{k}={v}")
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:16]


# --- atomic file helpers ---------------------------------------------------------------

def _atomic_write_bytes(path: Path, write) -> None:
    """write(tmp_path) then rename over `path`; the tmp file lives in the same folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def atomic_write_json(path: Path, obj: dict) -> None:
    def w(tmp):
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2, sort_keys=True, default=str)
            f.write("\n")
    _atomic_write_bytes(path, w)


def atomic_write_parquet(path: Path, df: pd.DataFrame) -> None:
    _atomic_write_bytes(path, lambda tmp: df.to_parquet(tmp, index=False))


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# --- results frames --------------------------------------------------------------------

def _results_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows -> DataFrame with RESULT_COLUMNS first (missing ones as NA), extras after."""
    recs = []
    for r in rows:
        r = dict(r)
        if r.get("status") is not None and r["status"] not in STATUSES:
            raise ValueError(f"status {r['status']!r} is not one of {', '.join(STATUSES)}")
        r.setdefault("point_id", point_id(r))
        recs.append(r)
    df = pd.DataFrame(recs)
    for c in RESULT_COLUMNS:
        if c not in df:
            df[c] = None
    extra = [c for c in df.columns if c not in RESULT_COLUMNS]
    return _typed(df[list(RESULT_COLUMNS) + extra])


INT_COLUMNS = ("tp", "ep", "ep_rank", "tokens", "n")
FLOAT_COLUMNS = ("median_us", "p10_us", "p90_us", "kernel_us", "max_rel_err", "flops", "bytes",
                 "roof_us", "pct_of_roof", "calls", "total_us")
STR_COLUMNS = ("model", "dtype", "backend", "mode", "routing", "status", "error", "warning",
               "point_id", "kernel", "phase")


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    """Fixed column types, so frames with missing values concatenate and round-trip."""
    df = df.copy()
    for c in df.columns:
        if c in INT_COLUMNS:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("Int64")
        elif c in FLOAT_COLUMNS:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
        elif c == "noisy":
            df[c] = df[c].astype("boolean")
        elif c in STR_COLUMNS:
            df[c] = df[c].map(lambda v: None if v is None or (isinstance(v, float) and v != v)
                              or v is pd.NA else str(v)).astype(object)
    return df


def _kernels_frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(list(rows), columns=None if rows else list(KERNEL_COLUMNS))
    for c in KERNEL_COLUMNS:
        if c not in df:
            df[c] = None
    extra = [c for c in df.columns if c not in KERNEL_COLUMNS]
    return _typed(df[list(KERNEL_COLUMNS) + extra])


def _concat(old: pd.DataFrame | None, new: pd.DataFrame) -> pd.DataFrame:
    if old is None or old.empty:
        return new.reset_index(drop=True)
    if new.empty:
        return old.reset_index(drop=True)
    # object columns that are all-NA in one frame would otherwise trip pyarrow
    return pd.concat([old, new], ignore_index=True, sort=False)


def _read(path: Path) -> pd.DataFrame | None:
    return pd.read_parquet(path) if path.exists() else None


class RunStore:
    """One run folder. Not safe for several writer processes at once (one sweep writes)."""

    def __init__(self, run_dir: str | os.PathLike):
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        for stale in self.dir.glob(".*.tmp"):  # left by a writer that was killed
            try:
                stale.unlink()
            except OSError:
                pass

    # manifest
    @property
    def manifest_path(self) -> Path:
        return self.dir / MANIFEST

    def write_manifest(self, manifest: dict) -> None:
        atomic_write_json(self.manifest_path, dict(manifest))

    def read_manifest(self) -> dict:
        if not self.manifest_path.exists():
            return {}
        with open(self.manifest_path) as f:
            return json.load(f)

    def update_manifest(self, **fields) -> dict:
        m = self.read_manifest()
        m.update(fields)
        self.write_manifest(m)
        return m

    # results
    @property
    def results_path(self) -> Path:
        return self.dir / RESULTS

    @property
    def kernels_path(self) -> Path:
        return self.dir / KERNELS

    def load_results(self) -> pd.DataFrame:
        df = _read(self.results_path)
        return df if df is not None else _results_frame([])

    def load_kernels(self) -> pd.DataFrame:
        df = _read(self.kernels_path)
        return df if df is not None else _kernels_frame([])

    def done_ids(self) -> set[str]:
        df = _read(self.results_path)
        return set() if df is None else set(df["point_id"].astype(str))

    def append(self, rows: list[dict], kernel_rows: list[dict] | None = None) -> None:
        """Add points (and their kernel rows); an id already present is replaced.

        Kernel rows without `point_id` are an error unless exactly one point is appended
        (then they belong to it). Kernels are written first, results last: a kill in
        between leaves kernel rows for a point that is not done yet, which the rerun of
        that point replaces."""
        new = _results_frame(rows)
        ids = set(new["point_id"].astype(str))
        krows = []
        for k in kernel_rows or []:
            k = dict(k)
            if not k.get("point_id"):
                if len(ids) != 1:
                    raise ValueError("kernel rows need a point_id when several points are appended")
                k["point_id"] = next(iter(ids))
            krows.append(k)
        new = new.drop_duplicates("point_id", keep="last")

        old_k = _read(self.kernels_path)
        stale = old_k is not None and old_k["point_id"].astype(str).isin(ids).any()
        if krows or stale or old_k is None:
            keep = None if old_k is None else old_k[~old_k["point_id"].astype(str).isin(ids)]
            atomic_write_parquet(self.kernels_path, _concat(keep, _kernels_frame(krows)))

        old = _read(self.results_path)
        if old is not None:
            old = old[~old["point_id"].astype(str).isin(ids)]
        atomic_write_parquet(self.results_path, _concat(old, new))

    def append_table(self, name: str, rows: list[dict], key: tuple[str, ...] | None = None) -> None:
        """Extra per-run table `<name>.parquet` (e.g. compile): rows appended atomically;
        with `key`, a row whose key columns match an existing row replaces it."""
        if not rows:
            return
        path = self.dir / f"{name}.parquet"
        new = pd.DataFrame(rows)
        old = _read(path)
        if old is not None and key:
            old_k = old[list(key)].astype(str).agg("|".join, axis=1)
            new_k = set(new[list(key)].astype(str).agg("|".join, axis=1))
            old = old[~old_k.isin(new_k)]
        atomic_write_parquet(path, new if old is None else pd.concat([old, new], ignore_index=True))

    def load_table(self, name: str) -> pd.DataFrame:
        df = _read(self.dir / f"{name}.parquet")
        return df if df is not None else pd.DataFrame()

    # traces
    def trace_path(self, pid: str, suffix: str = "") -> Path:
        d = self.dir / "traces"
        d.mkdir(exist_ok=True)
        return d / f"{pid}{('-' + suffix) if suffix else ''}.json.gz"


def load_run(run_dir: str | os.PathLike) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """(manifest, results, kernels) of one run folder."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        from .errors import UsageError
        raise UsageError(f"no run folder {run_dir}")
    s = RunStore(run_dir)
    return s.read_manifest(), s.load_results(), s.load_kernels()


def latest_run(data_dir: str | os.PathLike = "data/runs") -> Path | None:
    """The most recently started run folder (by manifest `started`, else folder mtime)."""
    d = Path(data_dir)
    if not d.is_dir():
        return None
    runs = [p for p in d.iterdir() if p.is_dir() and not p.name.startswith(".")]
    if not runs:
        return None

    def key(p: Path):
        started = ""
        try:
            with open(p / MANIFEST) as f:
                started = str(json.load(f).get("started", ""))
        except (OSError, ValueError):
            pass
        return (started, p.stat().st_mtime, p.name)
    return max(runs, key=key)


def new_run_id(tag: str = "") -> str:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{tag}" if tag else stamp


# --- environment -----------------------------------------------------------------------

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


def git_state(repo_dir: str | os.PathLike | None = None) -> dict:
    """{"commit": sha or None, "dirty": bool or None} of the repo holding this package."""
    repo = str(repo_dir or Path(__file__).resolve().parent.parent)
    told = os.environ.get("MOE_LAB_GIT_COMMIT")
    if told:  # a copy sent to another machine: the sender says which commit it is (a .git
        # that travelled with the copy can be stale: the lent GPUs reported an older HEAD)
        return {"commit": told, "dirty": os.environ.get("MOE_LAB_GIT_DIRTY", "unknown")}
    sha = _run(["git", "rev-parse", "HEAD"], cwd=repo)
    if sha is None:
        return {"commit": None, "dirty": None}
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo)
    return {"commit": sha, "dirty": bool(status) if status is not None else None}


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
                    l2_cache_bytes=getattr(props, "L2_cache_size", None))
        arch = getattr(props, "gcnArchName", None)
        if arch:
            info["arch"] = arch
        else:
            info["arch"] = "sm_%d%d" % torch.cuda.get_device_capability(0)
    return info


def _repo_relative(argv: list[str], repo_dir=None) -> list[str]:
    """argv with paths inside the repository made relative to it (manifests travel)."""
    root = str(Path(repo_dir or Path(__file__).resolve().parent.parent).resolve()) + os.sep
    return [a[len(root):] if a.startswith(root) else a for a in argv]


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
        python=sys.version.split()[0],
        platform=platform.platform(),
        hostname=socket.gethostname(),
        cpu_count=os.cpu_count(),
        env={k: v for k, v in sorted(os.environ.items())
             if k in ENV_NAMES or k.startswith(ENV_PREFIXES)},
        argv=_repo_relative(sys.argv, repo_dir),
        captured=_now(),
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
    return env
