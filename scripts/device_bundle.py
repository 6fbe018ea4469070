"""What a GPU machine without network needs of amd-aiter and vLLM, cut to size for device
commands that carry at most 64 MiB each (the working tree included), and put together
again on the machine. Standard library only (it also runs on the device's python3).

Here (scripts/fetch-device-wheels.sh calls these):
  aiter-cut WHEEL_OR_SITE OUT.tar.gz
      the amd-aiter files moe-lab's aiter-triton backends import (AITER_KEEP: aiter's
      Triton MoE, align, activation and quant modules, what they import, aiter's MoE
      config JSONs) and its METADATA (for its version), from the wheel or an installed
      site folder; a few hundred KB instead of 40 MB.
  vllm-parts WHEEL DEPS_DIR OUT_DIR TREE_BYTES [AITER_CUT [ARCH]]
      vLLM's fused-MoE files (VLLM_SKIP: no flash-attention, FMHA, no vllm-rs binary, no
      .so but the two VLLM_SO and DeepGEMM's DEEP_GEMM_SO; DeepGEMM kept) and the wheels of DEPS_DIR under _wheels/, one
      tar.gz with a fixed order and times (the same inputs give the same bytes), split
      into N equal parts `vllm-<id>-K-of-N` (id: the first 8 hex digits of the whole
      archive's sha256), N the fewest that keep tree + aiter cut + one part under the
      limit with MARGIN to spare. Prints the parts. ARCH (a number, 90 for the H200's
      sm_90; `all`, the default, keeps everything): in the two libraries' CUDA fat
      binaries, each module keeps the image the driver loads on that GPU (its sm_ARCH
      code, else its newest PTX at or below ARCH, which the driver compiles) and the other
      GPUs' images are zeroed in place, nvprune's cut without moving a byte: the code
      that runs is the wheel's, the archive a third of the size (fewer calls to carry it).
      MOE_LAB_DEVICE_CODE.json in the archive says what was kept; the vllm backend puts
      it in every run's manifest.
On the device (scripts/device_vllm.sh):
  stage PARTS_DIR STAGE_DIR SITE_DIR
      copies the parts found in PARTS_DIR into STAGE_DIR (kept while the machine stays
      warm), says which are there and which are missing (exit 3: call again with the
      next), and once all N are there joins them, checks the sha256 against the id,
      unpacks into SITE_DIR and installs the _wheels/ whose distribution python3 lacks
      (exit 0). SITE_DIR/BUNDLE holds the id: a later call finds it ready. It removes
      and replaces only what it made: STAGE_DIR and SITE_DIR new, empty or its own
      (STAGE_MARK, BUNDLE), the three folders apart; else one line, exit 2, nothing touched.
  standins DIR NAME...
      for each NAME python3 cannot import, a stand-in package under DIR (version 0.0.0):
      vLLM imports openai and openai_harmony on its way to the fused MoE (and the issue's
      exploration saw mistral_common) and runs nothing of them there; any attribute of a
      stand-in is another stand-in, and a library that checks its version finds it too
      old to use (transformers probes mistral_common so). A package, module or dist-info
      of such a name in DIR that it did not write: one line, exit 2, none written.
"""
from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import zipfile

MIB = 1 << 20
LIMIT = 64 * MIB  # what one device command carries, the working tree included
MARGIN = 10 * MIB  # left for the tree to grow (runs committed between calls)
MIN_PART = 4 * MIB  # smaller parts would take too many calls: refused, the tree must shrink
AITER_KEEP = re.compile(
    r"^aiter/(__init__\.py|ops/__init__\.py|ops/triton/(__init__|moe_op|moe_op_silu_fused"
    r"|moe_align_block_size|activation|fused_fp8_quant|quant)\.py"
    r"|ops/triton/_triton_kernels/(__init__|moe_op|moe_op_silu_fused|moe_align_block_size"
    r"|activation|fused_fp8_quant|quant)\.py|ops/triton/utils/.*\.py"
    r"|ops/triton/configs/moe/[^/]+\.json)$"
    r"|^amd_aiter-[^/]+\.dist-info/(METADATA|top_level\.txt)$")
VLLM_SO = ("vllm/_C_stable_libtorch.abi3.so", "vllm/_moe_C_stable_libtorch.abi3.so")
VLLM_SKIP = ("vllm/vllm_flash_attn/", "vllm/third_party/fmha_sm100/",
             "vllm/third_party/tml_fa4/", "vllm/vllm-rs")
# DeepGEMM (vllm/third_party/deep_gemm: its Python, its CUDA headers for the JIT and its _C
# for the device's CPython) is kept: the deepgemm backend and vLLM's oracle use it
DEEP_GEMM_SO = "vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so"
FATBIN_MAGIC = 0xBA55ED50  # a CUDA fat binary's container header (nvcc's fatbinary format)
PTX, CUBIN = 1, 2  # the kinds of image a container holds
PART = re.compile(r"^vllm-([0-9a-f]{8})-(\d+)-of-(\d+)$")


def _members(src: str):
    """(name, bytes) of a wheel's files, or of an installed site folder's."""
    if not os.path.exists(src):
        raise SystemExit(f"{src}: no such wheel or folder")
    if os.path.isfile(src):
        if not zipfile.is_zipfile(src):
            raise SystemExit(f"{src}: not a wheel (not a zip file)")
        with zipfile.ZipFile(src) as z:
            for i in sorted(z.infolist(), key=lambda i: i.filename):
                if not i.is_dir():
                    yield i.filename, (lambda i=i: z.read(i))
        return
    for root, _, files in os.walk(src):
        for f in sorted(files):
            p = os.path.join(root, f)
            yield os.path.relpath(p, src).replace(os.sep, "/"), (lambda p=p: open(p, "rb").read())


def _tar(out: str, items) -> None:
    """A tar.gz of (name, bytes) in the order given, every time and owner fixed: the same
    files give the same archive. Written whole or not at all."""
    tmp = out + ".tmp"
    with open(tmp, "wb") as raw:
        import gzip
        with gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as t:
            for name, data in items:
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o755 if name.endswith(".so") else 0o644, 0
                t.addfile(info, io.BytesIO(data))
    os.replace(tmp, out)


def aiter_cut(src: str, out: str) -> list[str]:
    if not os.path.isfile(src):  # a site folder: its amd_aiter dist-info sits beside aiter/
        src = os.path.dirname(os.path.abspath(src)) if os.path.basename(
            os.path.normpath(src)) == "aiter" else src
    items = sorted((n, read()) for n, read in _members(src) if AITER_KEEP.match(n))
    names = [n for n, _ in items]
    if not any(n.endswith("ops/triton/moe_op.py") for n in names):
        raise SystemExit(f"{src}: no aiter/ops/triton/moe_op.py in it (not amd-aiter?)")
    _tar(out, items)
    return names


def _elf_section(data: bytes, name: bytes) -> tuple[int, int] | None:
    """(offset, size) of a 64-bit little-endian ELF file's section, None if it has none
    (or the file is not such an ELF)."""
    if data[:6] != b"\x7fELF\x02\x01":
        return None
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    head = lambda i: struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)  # noqa: E731
    strings = head(shstrndx)[4]
    for i in range(shnum):
        at, _, _, _, off, size = head(i)
        start = strings + at
        if data[start:data.index(b"\0", start)] == name:
            return off, size
    return None


def device_code_cut(data: bytes, arch: int) -> tuple[bytes, dict]:
    """A shared library with the images its CUDA fat binaries hold for other GPUs zeroed
    in place: each container keeps its sm_<arch> cubins, else its newest PTX at or below
    arch (what the driver of an sm_<arch> GPU loads; a container with neither is of no use
    there and keeps nothing), and images of a kind it does not know. Headers, sizes and
    offsets stay as they are. Returns the bytes and what was kept and zeroed."""
    where = _elf_section(data, b".nv_fatbin")
    report = dict(arch=f"sm_{arch}", kept_bytes=0, zeroed_bytes=0, modules=0, modules_without=0)
    if where is None:
        return data, report
    out, (pos, size) = bytearray(data), where
    end_all = pos + size
    while pos + 16 <= end_all:
        magic, _, hsize, fsize = struct.unpack_from("<IHHQ", out, pos)
        if magic != FATBIN_MAGIC:  # the padding between containers
            pos += 8
            continue
        images, e, end = [], pos + hsize, pos + hsize + fsize
        while e < end:
            kind, _, ehsize, psize = struct.unpack_from("<HHIQ", out, e)
            images.append((kind, struct.unpack_from("<I", out, e + 28)[0], e + ehsize, psize))
            e += ehsize + psize
        keep = {i for i, (k, a, _, _) in enumerate(images) if k == CUBIN and a == arch} or \
            {max(((a, i) for i, (k, a, _, _) in enumerate(images) if k == PTX and a <= arch),
                 default=(0, None))[1]} - {None}
        report["modules"] += 1
        report["modules_without"] += not keep
        for i, (kind, _, at, n) in enumerate(images):
            if i in keep or kind not in (PTX, CUBIN):
                report["kept_bytes"] += n
            else:
                out[at:at + n] = bytes(n)
                report["zeroed_bytes"] += n
        pos = end
    return bytes(out), report


def parts_needed(total: int, tree_bytes: int, cut_bytes: int) -> int:
    room = LIMIT - tree_bytes - cut_bytes - MARGIN
    if room < MIN_PART:
        raise SystemExit(f"the working tree ({tree_bytes / MIB:.1f} MiB) leaves no room for a "
                         f"part under the {LIMIT // MIB} MiB a device command carries")
    return -(-total // room)


def vllm_parts(wheel: str, deps: str, out_dir: str, tree_bytes: int, cut_bytes: int = 0,
               arch: int | None = None):
    def keep(n):
        return (n in VLLM_SO or n == DEEP_GEMM_SO or re.match(r"^vllm-[^/]+\.dist-info/", n) and not n.endswith("RECORD")
                or n.startswith("vllm/") and not n.startswith(VLLM_SKIP) and not n.endswith(".so"))
    items = [(n, read()) for n, read in _members(wheel) if keep(n)]
    if not any(n.startswith("vllm/") for n, _ in items):  # was: an empty bundle, exit 0,
        raise SystemExit(f"{wheel}: no vllm/ files in it (not a vLLM wheel?)")  # parts gone
    if arch is not None:
        code = {}
        for i, (n, data) in enumerate(items):
            if n in VLLM_SO:
                data, code[n] = device_code_cut(data, arch)
                items[i] = (n, data)
        items.append(("MOE_LAB_DEVICE_CODE.json", (json.dumps(dict(
            wheel=os.path.basename(wheel), arch=f"sm_{arch}", libraries=code,
            rule=f"in each fat-binary module, the sm_{arch} cubins, else the newest PTX at or "
                 f"below {arch}, are the wheel's bytes; other GPUs' images zeroed in place"),
            indent=1, sort_keys=True) + "\n").encode()))
    for w in sorted(glob.glob(os.path.join(deps, "*.whl"))):
        items.append((f"_wheels/{os.path.basename(w)}", open(w, "rb").read()))
    os.makedirs(out_dir, exist_ok=True)
    whole = os.path.join(out_dir, "vllm-bundle.tar.gz")
    _tar(whole, items)
    data = open(whole, "rb").read()
    os.remove(whole)
    bid = hashlib.sha256(data).hexdigest()[:8]
    n = parts_needed(len(data), tree_bytes, cut_bytes)
    for old in glob.glob(os.path.join(out_dir, "vllm-*-of-*")):
        os.remove(old)
    size = -(-len(data) // n)
    names = []
    for k in range(n):
        name = os.path.join(out_dir, f"vllm-{bid}-{k}-of-{n}")
        with open(name, "wb") as f:
            f.write(data[k * size:(k + 1) * size])
        names.append(name)
    return names, len(data), len(items)


# --- on the device ---------------------------------------------------------------------

def _parts(folder: str) -> dict[str, dict]:
    """{id: {"n": N, "have": {K: path}}} of the parts in a folder."""
    out: dict[str, dict] = {}
    for p in sorted(glob.glob(os.path.join(folder, "vllm-*-of-*"))):
        m = PART.match(os.path.basename(p))
        if m:
            d = out.setdefault(m[1], dict(n=int(m[3]), have={}))
            d["have"][int(m[2])] = p
    return out


STAGE_MARK = ".moe-lab-vllm-stage"  # in a staging folder stage made: its parts are copies


def _inside(a: str, b: str) -> bool:
    """Whether folder `a` is `b` or lies under it (real paths)."""
    a, b = os.path.realpath(a), os.path.realpath(b)
    return a == b or a.startswith(b.rstrip(os.sep) + os.sep)


def _entries(folder: str, cmd: str = "stage") -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise SystemExit(f"{cmd}: {folder}: cannot list it ({exc.strerror or exc})")


def _stage_refusals(parts_dir: str, stage_dir: str, site: str) -> None:
    """Before anything is copied, removed or unpacked (SystemExit: one line, exit 2): stage
    removes only what it made. STAGE_DIR is new, empty or one it made (STAGE_MARK): the
    parts it removes there (another build's, parts that do not join) are its own copies;
    SITE_DIR is new, empty or a bundle it unpacked (BUNDLE), the folder it replaces whole.
    Before: a VLLM_SITE that was a user's folder was deleted with its files, and a staging
    folder that was the parts folder lost the carried parts ("set aside")."""
    named = {"PARTS_DIR": parts_dir, "STAGE_DIR": stage_dir, "SITE_DIR": site}
    for a, fa in named.items():
        for b, fb in named.items():
            if a != b and _inside(fa, fb):
                raise SystemExit(f"stage: {a} {fa} is {'' if os.path.realpath(fa) == os.path.realpath(fb) else 'inside '}"
                                 f"{b} {fb}: give three separate folders (VLLM_PARTS, VLLM_STAGE, "
                                 "VLLM_SITE), stage removes and replaces files in the last two")
    held = [n for n in _entries(stage_dir) if n != STAGE_MARK]
    if held and STAGE_MARK not in _entries(stage_dir):
        raise SystemExit(f"stage: STAGE_DIR {stage_dir} holds {len(held)} files stage did not "
                         f"put there (no {STAGE_MARK}; e.g. {held[0]}): give a new or empty "
                         "folder (VLLM_STAGE); stage removes parts there")
    if os.path.exists(site) and not os.path.isdir(site):
        raise SystemExit(f"stage: SITE_DIR {site} is a file, not a folder")
    held = _entries(site)
    if held and "BUNDLE" not in held:
        raise SystemExit(f"stage: SITE_DIR {site} holds {len(held)} files stage did not unpack "
                         f"(no BUNDLE; e.g. {held[0]}): give a new or empty folder (VLLM_SITE); "
                         "stage replaces it whole")


def stage(parts_dir: str, stage_dir: str, site: str) -> int:
    _stage_refusals(parts_dir, stage_dir, site)
    os.makedirs(stage_dir, exist_ok=True)
    if not os.path.exists(os.path.join(stage_dir, STAGE_MARK)):
        with open(os.path.join(stage_dir, STAGE_MARK), "w") as f:
            f.write("parts copied here by scripts/device_bundle.py stage; removed by it\n")
    carried = _parts(parts_dir)
    for bid, d in carried.items():
        for k, p in d["have"].items():
            dest = os.path.join(stage_dir, os.path.basename(p))
            if not (os.path.exists(dest) and os.path.getsize(dest) == os.path.getsize(p)):
                shutil.copyfile(p, dest + ".tmp")
                os.replace(dest + ".tmp", dest)
            print(f"stage: {os.path.basename(p)} carried in, kept in {stage_dir}")
    ready = open(os.path.join(site, "BUNDLE")).read().strip() \
        if os.path.isfile(os.path.join(site, "BUNDLE")) else None
    staged = _parts(stage_dir)
    want = next(iter(carried), None) or (ready if ready else next(iter(staged), None))
    if want is not None and want == ready:
        print(f"stage: vLLM bundle {ready} is unpacked in {site}")
        return 0
    if want is None:
        print(f"stage: no vLLM part carried in and none staged in {stage_dir}: carry "
              f".whl/vllm/parts/vllm-<id>-0-of-<N> (scripts/fetch-device-wheels.sh vllm)")
        return 3
    d = staged[want]
    missing = [k for k in range(d["n"]) if k not in d["have"]]
    for other in set(staged) - {want}:  # another build's parts: never joined with these
        print(f"stage: parts of another bundle ({other}) in {stage_dir} removed (stage's "
              "copies)")
        for p in staged[other]["have"].values():
            os.remove(p)
    if missing:
        print(f"stage: bundle {want}: {len(d['have'])} of {d['n']} parts here; missing: "
              + ", ".join(f".whl/vllm/parts/vllm-{want}-{k}-of-{d['n']}" for k in missing)
              + " (call again at once, carrying the next: the machine keeps /tmp for 30 s)")
        return 3
    h = hashlib.sha256()
    joined = os.path.join(stage_dir, f"vllm-{want}.tar.gz")
    with open(joined, "wb") as out:
        for k in range(d["n"]):
            data = open(d["have"][k], "rb").read()
            h.update(data)
            out.write(data)
    if not h.hexdigest().startswith(want):
        for p in d["have"].values():
            os.remove(p)
        os.remove(joined)
        print(f"stage: the {d['n']} parts of {want} do not join into it (sha256 "
              f"{h.hexdigest()[:8]}): removed; carry them again from part 0")
        return 1  # (was: an empty SITE_DIR.tmp left beside SITE_DIR)
    parent = os.path.dirname(os.path.abspath(site))
    os.makedirs(parent, exist_ok=True)  # a folder of its own: never one that was there
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(site))}.", dir=parent)
    os.chmod(tmp, 0o755)
    try:
        with tarfile.open(joined) as t:
            try:
                t.extractall(tmp, filter="data")
            except TypeError:  # a Python without extraction filters
                t.extractall(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # its own folder: nothing else is touched
        raise
    os.remove(joined)
    wheels = sorted(glob.glob(os.path.join(tmp, "_wheels", "*.whl")))
    need = [w for w in wheels if not _installed(os.path.basename(w).split("-")[0])]
    if need:
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index",
                            "--no-deps", "--no-compile", "--target", tmp, *need])
        if r.returncode:
            shutil.rmtree(tmp, ignore_errors=True)
            print(f"stage: pip could not install {', '.join(_dist(w) for w in need)} here "
                  f"(wheels for Python 3.12: DEVICE_PYTHON of scripts/fetch-device-wheels.sh)")
            return 1
    print(f"stage: {len(need)} wheels installed ({', '.join(_dist(w) for w in need)}); "
          f"already here: {', '.join(_dist(w) for w in wheels if w not in need) or 'none'}")
    shutil.rmtree(os.path.join(tmp, "_wheels"), ignore_errors=True)
    with open(os.path.join(tmp, "BUNDLE"), "w") as f:
        f.write(want + "\n")
    _stage_refusals(parts_dir, stage_dir, site)  # again: the unpacking took a while
    shutil.rmtree(site, ignore_errors=True)  # new, empty or a bundle stage unpacked
    os.replace(tmp, site)
    print(f"stage: vLLM bundle {want} unpacked in {site}")
    return 0


def _dist(wheel: str) -> str:
    return "-".join(os.path.basename(wheel).split("-")[:2])


def _installed(dist: str) -> bool:
    from importlib.metadata import PackageNotFoundError, distribution
    try:
        distribution(dist.replace("_", "-"))
        return True
    except PackageNotFoundError:
        return False


STANDIN = '''"""A stand-in written by scripts/device_bundle.py: vLLM imports this package on its way
to its fused MoE and runs nothing of it there. Any attribute is another stand-in."""
import importlib.abc, importlib.machinery, sys, types


class _Any(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any(name, (), {})

    def __call__(cls, *a, **k):
        return cls

    def __getitem__(cls, key):
        return cls

    def __or__(cls, other):
        return cls

    __ror__ = __or__


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Any(name, (), {})


class _Sub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any(name, (), {})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _Sub(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass


sys.meta_path.append(_Finder())
'''


def _metadata(name: str) -> str:
    return (f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: 0.0.0\n"
            "Summary: a stand-in of scripts/device_bundle.py, nothing of it runs\n")


def _standin_files(folder: str, name: str) -> dict[str, str]:
    """{path: text} of one stand-in: its package and, version 0.0.0 (a library that checks
    the version, as transformers does for mistral_common, takes it for one too old to
    use, never for a working one), its METADATA."""
    return {os.path.join(folder, name, "__init__.py"): STANDIN,
            os.path.join(folder, f"{name}-0.0.0.dist-info", "METADATA"): _metadata(name)}


def _not_mine(path: str, text: str) -> bool:
    """A file (or anything else) at `path` that is not the stand-in's own `text`."""
    if not os.path.lexists(path):
        return False
    try:
        with open(path) as f:
            return f.read() != text
    except (OSError, UnicodeDecodeError):
        return True


def standins(folder: str, names: list[str]) -> list[str]:
    """Every name checked before one is written (SystemExit, one line: exit 2): a package,
    module or dist-info of that name in DIR that is not a stand-in written here is never
    overwritten (was: a user's DIR/foo/__init__.py replaced by the stand-in)."""
    import importlib.util
    todo = [n for n in dict.fromkeys(names) if importlib.util.find_spec(n) is None]
    for name in todo:
        files = _standin_files(folder, name)
        theirs = [p for p, text in files.items() if _not_mine(p, text)]
        pkg = os.path.join(folder, name)
        extra = [os.path.join(pkg, x) for x in _entries(pkg, "standins") if x not in ("__init__.py", "__pycache__")] \
            if os.path.isdir(pkg) else []
        theirs += extra + [p for p in (pkg + ".py",) if os.path.lexists(p)]
        if os.path.lexists(pkg) and not os.path.isdir(pkg):
            theirs.append(pkg)
        if theirs:
            raise SystemExit(f"standins: {theirs[0]} is there and is not a stand-in this script "
                             f"wrote: left as it is; give another DIR (VLLM_STANDINS)")
    made = []
    for name in todo:
        for path, text in _standin_files(folder, name).items():
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".tmp", "w") as f:  # whole files: a kill leaves none half written
                f.write(text)
            os.replace(path + ".tmp", path)
        made.append(name)
    print(f"standins: {', '.join(made) or 'none needed'} in {folder}")
    return made


def _parents(path: str) -> list[str]:
    """The folders above `path`, nearest first."""
    out, p = [], os.path.dirname(os.path.abspath(path))
    while p not in out:
        out.append(p)
        p = os.path.dirname(p)
    return out


USAGE = {"aiter-cut": (2, 2, "WHEEL_OR_SITE OUT.tar.gz"),
         "vllm-parts": (4, 6, "WHEEL DEPS_DIR OUT_DIR TREE_BYTES [AITER_CUT [ARCH]]"),
         "stage": (3, 3, "PARTS_DIR STAGE_DIR SITE_DIR"), "standins": (1, None, "DIR NAME...")}


def main(argv: list[str]) -> int:
    """A refusal (wrong arguments, an input that is not what it should be) is one line on
    stderr and exit 2, nothing written."""
    try:
        return _main(argv)
    except SystemExit as exc:
        if not isinstance(exc.code, str):
            raise
        print(f"device_bundle: error: {exc.code}", file=sys.stderr)
        return 2


def _main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 2
    if argv[0] not in USAGE:  # was: the whole doc on stdout, nothing on stderr
        raise SystemExit(f"unknown command {argv[0]!r}; one of {', '.join(USAGE)}")
    cmd, args = argv[0], argv[1:]
    lo, hi, usage = USAGE[cmd]
    if len(args) < lo or (hi is not None and len(args) > hi):
        raise SystemExit(f"usage: device_bundle.py {cmd} {usage}")
    folders = {"stage": args[1:3], "standins": args[:1]}.get(cmd, [])
    for f in folders:  # was: a traceback (FileExistsError, NotADirectoryError)
        up = next((p for p in [f, *_parents(f)] if os.path.exists(p)), None)
        if up is not None and not os.path.isdir(up):
            raise SystemExit(f"{cmd}: {f}: {up} is a file, not a folder")
    bad = [n for n in args[1:] if not n.isidentifier()] if cmd == "standins" else []
    if bad:  # was: a traceback ('a.b', '../x') or a stand-in written into DIR itself ('')
        raise SystemExit(f"standins: {bad[0]!r} is not a top-level module name")
    if cmd == "vllm-parts" and not args[3].isdigit():
        raise SystemExit(f"vllm-parts: TREE_BYTES {args[3]!r} is not a number of bytes")
    if cmd == "vllm-parts" and len(args) > 5 and not (args[5] == "all" or args[5].isdigit()):
        raise SystemExit(f"vllm-parts: ARCH {args[5]!r} is not a GPU architecture number "
                         f"(90 for sm_90) or `all`")
    if cmd == "aiter-cut":
        names = aiter_cut(args[0], args[1])
        print(f"{args[1]}: {len(names)} files, {os.path.getsize(args[1]) / MIB:.2f} MiB")
        return 0
    if cmd == "vllm-parts":
        cut = os.path.getsize(args[4]) if len(args) > 4 and os.path.isfile(args[4]) else 0
        arch = int(args[5]) if len(args) > 5 and args[5] != "all" else None
        names, total, files = vllm_parts(args[0], args[1], args[2], int(args[3]), cut, arch)
        print(f"vLLM bundle: {files} files, {total / MIB:.1f} MiB packed, in {len(names)} parts "
              f"of {os.path.getsize(names[0]) / MIB:.1f} MiB (tree {int(args[3]) / MIB:.1f} MiB"
              f" + aiter cut {cut / MIB:.1f} MiB + a part stays under {LIMIT // MIB} MiB "
              f"with {MARGIN // MIB} MiB to spare); device code: "
              + (f"sm_{arch} (other GPUs' images zeroed)" if arch else "every GPU's"))
        for n in names:
            print(f"  {n}")
        return 0
    if cmd == "stage":
        return stage(*args[:3])
    if cmd == "standins":
        standins(args[0], args[1:])
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
