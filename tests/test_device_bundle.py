"""What a GPU machine without network gets of amd-aiter and vLLM (scripts/device_bundle.py,
scripts/fetch-device-wheels.sh, scripts/device_vllm.sh), checked on the CPU: the aiter cut
is enough for moe-lab's aiter-triton modules on its own; vLLM's archive leaves out what
its fused MoE never loads, is the same bytes from the same inputs and splits into parts
that fit beside the tree; and the device script gathers the parts one call at a time,
says which are missing, refuses parts that do not join, and unpacks once (fake parts of a
small archive here, through the script itself)."""
from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import struct
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import device_bundle as db  # noqa: E402


def _tar_names(path) -> list[str]:
    with tarfile.open(path) as t:
        return t.getnames()


# --- amd-aiter ------------------------------------------------------------------------------

def test_the_aiter_cut_alone_serves_the_aiter_triton_backends(tmp_path):
    spec = importlib.util.find_spec("aiter")
    if spec is None:
        pytest.skip("amd-aiter is not installed here")
    src = list(spec.submodule_search_locations)[0]
    out = tmp_path / "aiter-cut.tar.gz"
    names = db.aiter_cut(src, str(out))
    assert out.stat().st_size < 1 << 20  # the 40 MB wheel's few hundred KB that matter
    assert not any(n.startswith("aiter_meta") or n.endswith(".so") for n in names)
    site = tmp_path / "site"
    with tarfile.open(out) as t:
        t.extractall(site)
    code = ("import sys\n"
            "from moe_lab.core.aiter_import import aiter_root, aiter_version, load_aiter_glue, "
            "load_aiter_triton, load_silu_fused\n"
            "from moe_lab.backends.aiter_triton import aiter_moe_configs\n"
            "load_aiter_triton(); load_aiter_glue(); load_silu_fused()\n"
            "assert aiter_moe_configs() and aiter_moe_configs(fp8=True)\n"
            "outside = [m.__name__ for m in list(sys.modules.values()) if m.__name__.startswith"
            "('aiter') and getattr(m, '__file__', None) and not m.__file__.startswith(sys.argv[1])]\n"
            "print(aiter_root(), aiter_version(), outside)\n")
    r = subprocess.run([sys.executable, "-c", code, str(site)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=f"{site}{os.pathsep}{ROOT}"), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    root, version, outside = r.stdout.split(" ", 2)
    assert root == str(site / "aiter") and outside.strip() == "[]"
    assert version != "not installed"  # its METADATA travels: rows name the version
    again = tmp_path / "again.tar.gz"
    db.aiter_cut(src, str(again))
    assert again.read_bytes() == out.read_bytes()  # the same files, the same bytes


# --- vLLM's parts ---------------------------------------------------------------------------

def _fake_wheel(path: Path, so_mib: float = 1.0, instead: dict | None = None) -> Path:
    rnd = lambda n: os.urandom(int(n))  # noqa: E731 (compiled code does not compress)
    files = {"vllm/__init__.py": b"__version__ = '0.26.0'\n",
             "vllm/model_executor/layers/fused_moe/fused_moe.py": b"# the fused MoE\n",
             "vllm/model_executor/layers/fused_moe/configs/E=8,N=64,device_name=NVIDIA_H200.json": b"{}",
             "vllm/third_party/__init__.py": b"", "vllm/third_party/pynvml.py": b"# nvml\n",
             "vllm/third_party/deep_gemm/__init__.py": b"", "vllm/vllm_flash_attn/__init__.py": b"",
             "vllm/third_party/deep_gemm/include/deep_gemm/impls/sm90.cuh": b"// jit\n",
             "vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so": b"\x7fELF312",
             "vllm/third_party/deep_gemm/_C.cpython-311-x86_64-linux-gnu.so": b"\x7fELF311",
             "vllm/_C_stable_libtorch.abi3.so": rnd(so_mib * 2 ** 20),
             "vllm/_moe_C_stable_libtorch.abi3.so": rnd(so_mib * 2 ** 20),
             "vllm/_flashmla_C.abi3.so": rnd(2 ** 16), "vllm/vllm-rs": rnd(2 ** 18),
             "vllm-0.26.0.dist-info/METADATA": b"Name: vllm\nVersion: 0.26.0\n",
             "vllm-0.26.0.dist-info/RECORD": b""}
    files.update(instead or {})
    with zipfile.ZipFile(path, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
    return path


def _fake_dep(folder: Path, name="moelabfake") -> Path:
    """A minimal pure-Python wheel pip installs offline."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-1.0-py3-none-any.whl"
    files = {f"{name}/__init__.py": b"X = 1\n",
             f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
             f"{name}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{n},,\n" for n in files) + f"{name}-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
        z.writestr(f"{name}-1.0.dist-info/RECORD", record)
    return path


def _parts(tmp_path, monkeypatch, n_wanted=3, tag="a") -> list[Path]:
    """Parts of a fake vLLM archive, sized so that there are n_wanted of them."""
    wheel = _fake_wheel(tmp_path / f"vllm-0.26.0-{tag}.whl")
    deps = tmp_path / f"deps-{tag}"
    _fake_dep(deps)
    monkeypatch.setattr(db, "LIMIT", 8 << 20)
    monkeypatch.setattr(db, "MARGIN", 1 << 20)
    monkeypatch.setattr(db, "MIN_PART", 1 << 18)
    room = (2.2 * 2 ** 20) / n_wanted  # the archive is ~2.1 MiB (the two .so)
    names, total, _ = db.vllm_parts(str(wheel), str(deps), str(tmp_path / f"parts-{tag}"),
                                    int(7 * 2 ** 20 - room), 0)
    assert len(names) == n_wanted
    return [Path(n) for n in names]


def test_the_vllm_archive_keeps_the_fused_moe_and_fits_each_part_beside_the_tree(tmp_path, monkeypatch):
    parts = _parts(tmp_path, monkeypatch)
    bid = parts[0].name.split("-")[1]
    data = b"".join(p.read_bytes() for p in parts)
    assert hashlib.sha256(data).hexdigest().startswith(bid)
    assert [p.name for p in parts] == [f"vllm-{bid}-{k}-of-3" for k in range(3)]
    sizes = [p.stat().st_size for p in parts]
    assert sizes[0] == sizes[1] >= sizes[2]
    names = tarfile.open(fileobj=io.BytesIO(data)).getnames()
    assert {"vllm/_C_stable_libtorch.abi3.so", "vllm/_moe_C_stable_libtorch.abi3.so",
            "vllm/third_party/pynvml.py", "vllm-0.26.0.dist-info/METADATA",
            "_wheels/moelabfake-1.0-py3-none-any.whl"} <= set(names)
    # DeepGEMM travels (issue 64's deepgemm backend): its Python, the headers its JIT compiles
    # and its extension for the device's CPython 3.12, not the other CPythons'
    assert {"vllm/third_party/deep_gemm/__init__.py", db.DEEP_GEMM_SO,
            "vllm/third_party/deep_gemm/include/deep_gemm/impls/sm90.cuh"} <= set(names)
    for gone in ("vllm/vllm-rs", "vllm/_flashmla_C.abi3.so", "vllm/vllm_flash_attn/__init__.py",
                 "vllm/third_party/deep_gemm/_C.cpython-311-x86_64-linux-gnu.so",
                 "vllm-0.26.0.dist-info/RECORD"):
        assert gone not in names
    # a tree too large for any part is refused, not split into parts that cannot travel
    with pytest.raises(SystemExit, match="no room"):
        db.parts_needed(10, 7 << 20, 0)


def test_the_same_inputs_give_the_same_parts(tmp_path, monkeypatch):
    a = _parts(tmp_path, monkeypatch, tag="a")
    wheel, deps = tmp_path / "vllm-0.26.0-a.whl", tmp_path / "deps-a"
    names, _, _ = db.vllm_parts(str(wheel), str(deps), str(tmp_path / "again"),
                                int(7 * 2 ** 20 - 2.2 * 2 ** 20 / 3), 0)
    assert [Path(n).name for n in names] == [p.name for p in a]
    assert all(Path(n).read_bytes() == p.read_bytes() for n, p in zip(names, a))


# --- only the H200's compiled code travels ----------------------------------------------------

def _image(kind: int, arch: int, payload: bytes) -> bytes:
    """One image of a fat-binary container: nvcc's 64-byte entry header (kind, header size,
    payload size, the SM number at byte 28), then the payload."""
    head = bytearray(64)
    struct.pack_into("<HHIQ", head, 0, kind, 0x101, 64, len(payload))
    struct.pack_into("<I", head, 28, arch)
    return bytes(head) + payload


def _container(*images: bytes) -> bytes:
    body = b"".join(images)
    return struct.pack("<IHHQ", db.FATBIN_MAGIC, 1, 16, len(body)) + body


def _elf(fatbin: bytes, text: bytes = b"host code") -> bytes:
    """A 64-bit little-endian ELF file with a .text and a .nv_fatbin section."""
    names = b"\0.shstrtab\0.text\0.nv_fatbin\0"
    body = names + text + fatbin
    shoff = 64 + len(body)
    head = bytearray(64)
    head[:7] = b"\x7fELF\x02\x01\x01"
    struct.pack_into("<Q", head, 0x28, shoff)
    struct.pack_into("<HHH", head, 0x3A, 64, 4, 1)
    sections = [(0, 0, 0), (1, 64, len(names)), (11, 64 + len(names), len(text)),
                (17, 64 + len(names) + len(text), len(fatbin))]
    table = b"".join(struct.pack("<IIQQQQIIQQ", n, 1, 0, 0, off, size, 0, 0, 1, 0)
                     for n, off, size in sections)
    return bytes(head) + body + table


def test_the_h200_cut_keeps_what_its_driver_loads_byte_for_byte_and_zeroes_the_rest():
    sm90, ptx80, ptx90 = b"SASS-90" * 9, b"PTX-80" * 11, b"PTX-90" * 5
    fatbin = (_container(_image(2, 80, b"SASS-80" * 7), _image(2, 90, sm90), _image(1, 80, ptx80))
              + bytes(8)  # the padding between containers
              + _container(_image(2, 80, b"x" * 30), _image(1, 75, b"y" * 20),
                           _image(1, 80, ptx80), _image(1, 100, b"z" * 40))
              + _container(_image(2, 100, b"w" * 50), _image(4, 90, b"ltoir" * 3))
              + _container(_image(1, 80, b"q" * 12), _image(1, 90, ptx90)))
    lib = _elf(fatbin)
    cut, report = db.device_code_cut(lib, 90)
    assert len(cut) == len(lib)  # nothing moves: offsets, headers and the host code as they were
    changed = [i for i in range(len(lib)) if cut[i] != lib[i]]
    assert changed and all(cut[i] == 0 for i in changed)  # only zeroed, never rewritten
    for kept in (sm90, ptx80, ptx90, b"ltoir" * 3, b"host code"):
        assert kept in cut  # module 1: its sm_90 cubin; 2: newest PTX <= 90; 4: PTX 90
    for gone in (b"SASS-80", b"x" * 30, b"y" * 20, b"z" * 40, b"w" * 50, b"q" * 12):
        assert gone not in cut
    assert cut.count(ptx80) == 1  # module 1 has sm_90 code: its PTX is not what loads
    assert report == dict(arch="sm_90", modules=4, modules_without=1,  # module 3: sm_100 only
                          kept_bytes=len(sm90) + len(ptx80) + len(ptx90) + 15,
                          zeroed_bytes=49 + 66 + 30 + 20 + 40 + 50 + 12)
    # a file that is not such an ELF, or one without CUDA code, passes as it is
    assert db.device_code_cut(b"not an elf", 90)[0] == b"not an elf"
    plain = _elf(b"", b"host only")
    assert db.device_code_cut(plain, 90) == (plain, dict(arch="sm_90", kept_bytes=0,
                                                         zeroed_bytes=0, modules=0,
                                                         modules_without=0))


def test_the_archive_says_which_code_it_carries_and_the_backend_reports_it(tmp_path, monkeypatch):
    wheel = _fake_wheel(tmp_path / "vllm-0.26.0-a.whl", instead={  # a library with two GPUs' code
        "vllm/_moe_C_stable_libtorch.abi3.so": _elf(_container(
            _image(2, 90, b"sm90" * 4), _image(2, 120, b"sm120" * 4)))})
    deps = tmp_path / "deps"
    _fake_dep(deps)
    names, _, _ = db.vllm_parts(str(wheel), str(deps), str(tmp_path / "parts"), 0, 0, 90)
    with tarfile.open(names[0]) as t:
        t.extractall(tmp_path / "site", filter="data")
    said = json.loads((tmp_path / "site" / "MOE_LAB_DEVICE_CODE.json").read_text())
    lib = said["libraries"]["vllm/_moe_C_stable_libtorch.abi3.so"]
    assert (said["arch"], lib["kept_bytes"], lib["zeroed_bytes"]) == ("sm_90", 16, 20)
    data = (tmp_path / "site" / "vllm" / "_moe_C_stable_libtorch.abi3.so").read_bytes()
    assert b"sm90" * 4 in data and b"sm120" not in data
    # what every run's manifest says (its environment, sweep and tune alike; the vllm
    # backend's own entry too)
    from moe_lab.core import environment
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    said = environment.capture_environment()["vllm_device_code"]
    assert said.startswith("sm_90 only, from vllm-0.26.0-a.whl: in each fat-binary")
    (tmp_path / "site" / "MOE_LAB_DEVICE_CODE.json").unlink()
    assert environment.vllm_device_code() == "as installed"
    # without ARCH every image travels, and the archive has no such file
    names, _, _ = db.vllm_parts(str(wheel), str(deps), str(tmp_path / "all"), 0, 0)
    with tarfile.open(names[0]) as t:
        assert "MOE_LAB_DEVICE_CODE.json" not in t.getnames()
        assert b"sm120" * 4 in t.extractfile("vllm/_moe_C_stable_libtorch.abi3.so").read()


# --- the device script gathers them ---------------------------------------------------------

GPU_PY = ('#!/bin/sh\n# python3 of a machine whose torch sees one H200 (the rest: the real one)\n'
          'case "$2" in *"device_count()"*) echo 1; exit 0 ;; *"get_device_name"*) '
          'echo "NVIDIA H200"; exit 0 ;; esac\nexec "$REAL_PY" "$@"\n')


def _gpu_bin(tmp_path) -> Path:
    """A folder whose python3 answers as the GPU machine's does (GPU_PY): `stage` runs
    only there (scripts/device_env.sh's check)."""
    fake = tmp_path / "gpu-bin"
    if not fake.exists():
        fake.mkdir()
        (fake / "python3").write_text(GPU_PY)
        (fake / "python3").chmod(0o755)
    return fake


def _call(tmp_path, carried: list[Path], site="site", mode="stage", **extra):
    """One device call of scripts/device_vllm.sh, carrying `carried` parts, on a machine
    whose torch sees a GPU (GPU_PY)."""
    call = tmp_path / "call"
    if call.exists():
        for p in call.iterdir():
            p.unlink()
    call.mkdir(exist_ok=True)
    for p in carried:
        (call / p.name).write_bytes(p.read_bytes())
    env = dict(os.environ, VLLM_PARTS=str(call), VLLM_STAGE=str(tmp_path / "stage"),
               VLLM_SITE=str(tmp_path / site), VLLM_STANDINS=str(tmp_path / "standins"),
               OUT=str(tmp_path / "out"), REAL_PY=sys.executable,
               PATH=f"{_gpu_bin(tmp_path)}{os.pathsep}{os.environ['PATH']}", **extra)
    r = subprocess.run(["bash", "scripts/device_vllm.sh", mode], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout + r.stderr


def test_the_device_script_gathers_the_parts_one_call_at_a_time(tmp_path, monkeypatch):
    parts = _parts(tmp_path, monkeypatch)
    bid = parts[0].name.split("-")[1]
    rc, out = _call(tmp_path, [])
    assert rc == 0 and "no vLLM part carried in and none staged" in out
    assert "nothing measured" in out
    rc, out = _call(tmp_path, [parts[0]])
    assert rc == 0 and "1 of 3 parts here" in out
    assert f"missing: .whl/vllm/parts/vllm-{bid}-1-of-3, .whl/vllm/parts/vllm-{bid}-2-of-3" in out
    assert not (tmp_path / "site").exists()
    rc, out = _call(tmp_path, [parts[2]])  # any order
    assert rc == 0 and f"missing: .whl/vllm/parts/vllm-{bid}-1-of-3 " in out
    rc, out = _call(tmp_path, [parts[1]])
    assert rc == 0 and f"vLLM bundle {bid} unpacked" in out, out
    site = tmp_path / "site"
    assert (site / "BUNDLE").read_text().strip() == bid
    assert (site / "vllm" / "_moe_C_stable_libtorch.abi3.so").is_file()
    assert (site / "moelabfake" / "__init__.py").is_file()  # its import deps installed
    assert not (site / "_wheels").exists()
    for name in ("openai", "openai_harmony"):  # stand-ins for what the image lacks
        if importlib.util.find_spec(name) is None:
            assert (tmp_path / "standins" / name / "__init__.py").is_file()
    rc, out = _call(tmp_path, [])  # a later call on the warm machine: ready
    assert rc == 0 and f"vLLM bundle {bid} is unpacked" in out


def test_parts_that_do_not_join_are_refused_and_another_builds_set_aside(tmp_path, monkeypatch):
    parts = _parts(tmp_path, monkeypatch)
    bad = tmp_path / "bad" / parts[1].name
    bad.parent.mkdir()
    data = bytearray(parts[1].read_bytes())
    data[100] ^= 0xFF
    bad.write_bytes(bytes(data))
    _call(tmp_path, [parts[0]])
    _call(tmp_path, [bad])
    rc, out = _call(tmp_path, [parts[2]])
    assert rc == 1 and "do not join" in out and "carry them again from part 0" in out
    assert not any((tmp_path / "stage").glob("vllm-*")) and not (tmp_path / "site").exists()
    # a part of another build (the tree grew, the parts were cut again) is never joined
    other = _parts(tmp_path, monkeypatch, n_wanted=2, tag="b")
    _call(tmp_path, [parts[0]])
    rc, out = _call(tmp_path, [other[0]])
    assert rc == 0 and "parts of another bundle" in out and "1 of 2 parts here" in out
    assert sorted(p.name for p in (tmp_path / "stage").glob("vllm-*")) == [other[0].name]


def test_the_script_header_names_the_parts_fetch_makes():
    """The run calls at the top of scripts/device_vllm.sh carry the parts by the names
    scripts/fetch-device-wheels.sh gives them (db.PART, with the id and count it prints
    put in) and the aiter cut."""
    text = (ROOT / "scripts" / "device_vllm.sh").read_text()
    import re
    named = re.findall(r"\.whl/vllm/parts/(vllm-<id>-\d+-of-N)", text)
    assert named and all(db.PART.match(n.replace("<id>", "d9fcb09a").replace("N", "3"))
                         for n in named)
    assert "vllm-<id>-K-of-N" in text and "d9fcb09a" in text  # the form, and the id it has
    assert text.count('".whl/aiter-cut.tar.gz"') >= 5


FAKE_PY = r'''#!/bin/sh
# python3 of a dry run: moe-lab's sweep and tune recorded (a sweep leaves a complete run
# folder), the vllm check says available, `backends` and the GPU count answered; the
# rest is the real python
if [ "$1" = -m ] && [ "$2" = moe_lab ] && { [ "$3" = sweep ] || [ "$3" = tune ]; }; then
  echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES $*" >> "$DRY_LOG"
  [ "$3" = tune ] && exit 0
  exec "$REAL_PY" -c '
import json, os, sys
import pandas as pd
a = sys.argv[1:]
d = os.path.join(a[a.index("--data-dir") + 1], a[a.index("--run-id") + 1])
os.makedirs(d, exist_ok=True)
json.dump({"status": "complete"}, open(os.path.join(d, "manifest.json"), "w"))
p = os.path.join(d, "results.parquet")
old = pd.read_parquet(p) if os.path.exists(p) else pd.DataFrame()
cfg = a[a.index("--config") + 1]
err = os.environ.get("DRY_ERROR")  # what vllm rows say, where a test sets it
new = pd.DataFrame([dict(backend=b, config=cfg, status="error" if err and b == "vllm" else "ok",
                         error=err if b == "vllm" else None)
                    for b in a[a.index("--backends") + 1].split(",")])
pd.concat([old, new]).to_parquet(p)
print("done")' "$@"
fi
[ "$1" = -m ] && [ "$2" = moe_lab ] && [ "$3" = backends ] && { echo "(backends)"; exit 0; }
case "$2" in
  *"get('vllm').available()"*) echo "vllm: available"; exit 0 ;;
  *"device_count()"*) echo "${DRY_NGPU:-1}"; exit 0 ;;
  *"get_device_name"*) echo "${DRY_GPU:-NVIDIA H200}"; exit 0 ;;
esac
exec "$REAL_PY" "$@"
'''


def _dry_repo(tmp_path):
    """(fake bin folder, repo copy): python3 recording moe-lab's sweep and tune (FAKE_PY),
    an nvidia-smi naming an H200, and what travels (scripts, moe_lab, data/configs),
    without this checkout's .whl/ or runs."""
    import shutil
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text(FAKE_PY)
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho NVIDIA H200\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    repo = tmp_path / "repo"
    for sub in ("scripts", "moe_lab", "data/configs"):
        shutil.copytree(ROOT / sub, repo / sub, ignore=shutil.ignore_patterns("__pycache__"))
    return fake, repo


def test_a_dry_run_of_the_sweep_tune_and_tuned_calls(tmp_path, monkeypatch):
    """The script's jobs end to end with moe-lab's sweep and tune recorded instead of run
    (no GPU here): one run folder per job, vLLM as shipped beside the scheme's own
    backends, aiter-triton tuned after, the summary, the bundle; tune hands the 8 vllm
    shapes to device_tune.sh; tuned finds no vllm file committed yet and says so."""
    import shutil
    parts = _parts(tmp_path, monkeypatch)
    for p in parts:
        _call(tmp_path, [p])
    fake, repo = _dry_repo(tmp_path)
    log = tmp_path / "dry.log"
    env = dict(os.environ, AITER_SITE=str(tmp_path / "aiter-site"), PATH=f"{fake}{os.pathsep}{os.environ['PATH']}", DRY_LOG=str(log),
               REAL_PY=sys.executable, VLLM_PARTS=str(tmp_path / "none"),
               VLLM_STAGE=str(tmp_path / "stage"), VLLM_SITE=str(tmp_path / "site"),
               VLLM_STANDINS=str(tmp_path / "standins"), VLLM_RUNSTAGE=str(tmp_path / "runstage"),
               TUNE_STAGE=str(tmp_path / "tunestage"), MOE_LAB_GIT_COMMIT="abc1234",
               MOE_LAB_DATA=str(tmp_path / "no-runs"))  # no search complete: tune takes all 8

    def call(mode, *then):
        out = tmp_path / f"out-{mode}"
        if out.exists():
            shutil.rmtree(out)
        out.mkdir()
        r = subprocess.run(["bash", "scripts/device_vllm.sh", mode, *then], cwd=repo, timeout=600,
                           env=dict(env, OUT=str(out)), capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr, out
    rc, out, where = call("sweep")
    assert rc == 0, out[-3000:]
    calls = log.read_text().splitlines()
    sweeps = [c for c in calls if " sweep " in c]
    # the job's models with a committed vLLM file (the sweep reads data/configs as it
    # travels): every backend with --config default,tuned in one process; the others with
    # --config default, then aiter-triton tuned (no aiter-triton for fp8-channel)
    def arg(c, k):
        return c.split(f"--{k} ")[1].split()[0]
    both = {arg(c, "run-id"): c for c in sweeps if "--config default,tuned " in c}
    from moe_lab.analysis.tuned import inventory
    inv = inventory(device="NVIDIA H200")  # the GPU the fake nvidia-smi names
    have = inv[(inv["backend"] == "vllm") & (inv["file"] != "")]
    for (dt, sh), g in have.groupby(["dtype", "sharding"]):  # the models with a file, only
        run = f"h200-vllm-{dt}-{'tp8' if sh == 'TP8' else 'tp8ep8'}"
        assert set(arg(both[run], "models").split(",")) == set(g["model"])
    assert both and len(both) == have.groupby(["dtype", "sharding"]).ngroups
    want = {"h200-vllm-bf16-tp8": ("vllm,aiter-triton,torch-grouped",
                                   "llama4-scout-16e,llama4-maverick-128e,qwen3-235b-a22b"),
            "h200-vllm-bf16-tp8ep8": ("vllm,aiter-triton,torch-grouped", "deepseek-r1"),
            "h200-vllm-fp8-block128-tp8": ("vllm,aiter-triton,torch-fp8", "deepseek-r1"),
            "h200-vllm-fp8-block128-tp8ep8": ("vllm,aiter-triton,torch-fp8", "deepseek-r1"),
            "h200-vllm-fp8-channel-tp8": ("vllm,torch-fp8-grouped,torch-fp8",
                                          "llama4-scout-16e,llama4-maverick-128e")}
    n = 0
    for run, (backends, models) in want.items():
        mine = [c for c in sweeps if f"--run-id {run} " in c]
        full = [c for c in mine if f"--backends {backends} --config default" in c]
        # every model once with the job's backends; aiter-triton tuned for each (not fp8-channel)
        assert sorted(m for c in full for m in arg(c, "models").split(",")) == sorted(models.split(","))
        rest = [c for c in full if c not in both.values()]
        at = [c for c in mine if "--backends aiter-triton --config tuned" in c]
        assert [arg(c, "models") for c in at] == ([] if "fp8-channel" in run else
                                                  [arg(c, "models") for c in rest])
        for c in mine:
            assert "--tokens 1,16,64,256,1024,2048,4096,8192" in c
            assert "--modes graph" in c and "--tp 8" in c and ("--ep 8" in c) == run.endswith("ep8")
        n += len(mine)
    assert n == len(sweeps)
    assert "sweep: every job complete" in out
    with tarfile.open(where / "bundle.tar.gz") as t:
        names = t.getnames()
    assert all(f"bundle/runs/{r}/results.parquet" in names for r in want)
    assert "bundle/logs/backends.txt" in names
    assert "no kernel image" not in out
    # vLLM's libraries brought with too little GPU code (fetch-device-wheels.sh's sm_90
    # cut, on another GPU): the summary says how to bring them whole
    env["DRY_ERROR"] = "CUDA error: no kernel image is available for execution on the device"
    env["TAG"], env["JOBS"] = "kernels", "bf16:8:deepseek-r1"
    rc, out, _ = call("sweep")
    assert rc == 0 and "h200-vllm-kernels-bf16-tp8ep8: rows say 'no kernel image is available'" in out
    assert "VLLM_ARCH=all bash scripts/fetch-device-wheels.sh vllm" in out
    for k in ("DRY_ERROR", "TAG", "JOBS"):
        del env[k]
    # tune: device_tune.sh with the 8 vllm shapes first, then the aiter-triton* searches
    # left (so a call whose vLLM searches end early spends the rest of its budget)
    log.write_text("")
    rc, out, where = call("tune")
    tunes = [c for c in log.read_text().splitlines() if " tune " in c]
    backends = [c.split("--backend ")[1].split()[0] for c in tunes]
    assert rc == 0 and backends[:8] == ["vllm"] * 8, out[-3000:]
    assert len(backends) > 8 and set(backends[8:]) <= {"aiter-triton", "aiter-triton-silu"}
    assert {c.split("--dtype ")[1].split()[0] for c in tunes[:8]} == {"bf16", "fp8-block128",
                                                                       "fp8-channel"}
    # align tune: the glue points into their own run folders, then the searches, one bundle
    log.write_text("")
    rc, out, where = call("align", "tune")
    calls = log.read_text().splitlines()
    sweeps = [c for c in calls if " sweep " in c]
    assert rc == 0 and len(sweeps) == 4, out[-3000:]
    assert {c.split("--run-id ")[1].split()[0] for c in sweeps} == {
        "h200-vllm-align-bf16-tp8", "h200-vllm-align-fp8-block128-tp8"}
    assert all("--tokens 1,16,64 " in c for c in sweeps)
    assert sum("--backends vllm,aiter-triton --config default" in c for c in sweeps) == 2
    assert len([c for c in calls if " tune " in c]) == len(tunes) and "align: every job complete" in out
    with tarfile.open(where / "bundle.tar.gz") as t:
        assert "bundle/runs/h200-vllm-align-bf16-tp8/results.parquet" in t.getnames()
    rc, out, _ = call("sweep", "stage")
    assert rc == 2 and "usage:" in out
    # a step skipped for want of time is named, and the call does not say complete
    log.write_text("")
    env["BUDGET"] = "50"
    rc, out, _ = call("sweep")
    del env["BUDGET"]
    assert rc == 0 and "sweep: not complete: call again" in out, out[-2000:]
    assert "every job complete" not in out and not log.read_text().strip()
    assert "left for the next call: h200-vllm-bf16-tp8 vllm,aiter-triton,torch-grouped --config default" in out
    # TAG: a shape measured again into its own run folder
    log.write_text("")
    env["TAG"], env["JOBS"] = "retuned", "bf16:8:deepseek-r1"
    rc, out, where = call("sweep")
    del env["TAG"], env["JOBS"]
    ids = {c.split("--run-id ")[1].split()[0] for c in log.read_text().splitlines() if " sweep " in c}
    assert rc == 0 and ids == {"h200-vllm-retuned-bf16-tp8ep8"}, out[-2000:]
    # tuned: vllm --config tuned for exactly the models with a committed tuned vllm file
    from moe_lab.core.problems import make_problem
    from moe_lab.storage.configs import load_tuned
    log.write_text("")
    rc, out, where = call("tuned")
    assert rc == 0, out[-3000:]
    jobs = [("bf16", 1, "llama4-scout-16e,llama4-maverick-128e,qwen3-235b-a22b"),
            ("bf16", 8, "deepseek-r1"), ("fp8-block128", 1, "deepseek-r1"),
            ("fp8-block128", 8, "deepseek-r1"), ("fp8-channel", 1, "llama4-scout-16e,llama4-maverick-128e")]
    want = {(m, ep, d) for d, ep, ms in jobs for m in ms.split(",")
            if load_tuned("vllm", make_problem(m, 1, d, 8, ep), "NVIDIA H200",
                          str(ROOT / "data/configs/nvidia-h200"))}
    assert ("llama4-scout-16e", 1, "fp8-channel") in want  # adopted from its search

    tuned = [c for c in log.read_text().splitlines() if " sweep " in c]
    assert all("--backends vllm --config tuned" in c for c in tuned)
    got = {(m, int(arg(c, "ep")), arg(c, "dtype")) for c in tuned for m in arg(c, "models").split(",")}
    assert got == want
    assert ("no tuned vllm file" in out) == (len({(d, ep) for _, ep, d in want}) < len(jobs))


def test_a_dry_run_of_the_tune_verify_and_sweep_modes_on_two_gpus(tmp_path):
    """scripts/device_tune.sh with moe-lab recorded instead of run (no GPU here), on two
    GPUs: the shapes dealt to them in turn, each mode's command and run folder (tune: the
    winners into the bundle, never the committed files; verify: against the committed
    files, no file written; sweep: default and tuned at the 19 keys, graph), a bad mode
    refused."""
    fake, repo = _dry_repo(tmp_path)
    log = tmp_path / "dry.log"
    shapes = ("aiter-triton-silu:deepseek-r1:8:1:bf16 aiter-triton-silu:deepseek-r1:8:8:bf16 "
              "aiter-triton:qwen3-235b-a22b:8:8:fp8-block128")
    env = dict(os.environ, AITER_SITE=str(tmp_path / "aiter-site"), DRY_LOG=str(log),
               PATH=f"{fake}{os.pathsep}{os.environ['PATH']}", REAL_PY=sys.executable,
               DRY_NGPU="2", TUNE_STAGE=str(tmp_path / "stage"), SHAPES=shapes, BUDGET="300",
               MOE_LAB_GIT_COMMIT="abc1234", MOE_LAB_DATA=str(tmp_path / "no-runs"))

    def call(*mode):
        log.write_text("")
        out = tmp_path / f"out-{len(list(tmp_path.glob('out-*')))}"
        out.mkdir()
        r = subprocess.run(["bash", "scripts/device_tune.sh", *mode], cwd=repo, timeout=300,
                           env=dict(env, OUT=str(out)), capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr, log.read_text().splitlines()
    rc, out, calls = call()
    assert rc == 0 and len(calls) == 3, out[-2000:]
    by_run = {c.split("--run-id ")[1].split()[0]: c for c in calls}
    assert set(by_run) == {"h200-tune-aiter-triton-silu-deepseek-r1-tp8-bf16",
                           "h200-tune-aiter-triton-silu-deepseek-r1-tp8ep8-bf16",
                           "h200-tune-aiter-triton-qwen3-235b-a22b-tp8ep8-fp8-block128"}
    from moe_lab.analysis.tuned import search_run as _search_run  # left() finds started searches so
    assert {_search_run(w, "NVIDIA H200") for w in shapes.split()} == set(by_run)
    gpu = {r: c.split()[0] for r, c in by_run.items()}
    assert gpu["h200-tune-aiter-triton-silu-deepseek-r1-tp8-bf16"] == "CUDA_VISIBLE_DEVICES=0"
    assert gpu["h200-tune-aiter-triton-silu-deepseek-r1-tp8ep8-bf16"] == "CUDA_VISIBLE_DEVICES=1"
    assert all(" tune --backend " in c and "/bundle/configs" in c and "--verify" not in c
               for c in calls)
    rc, out, calls = call("verify")
    assert rc == 0 and len(calls) == 3, out[-2000:]
    assert all("--run-id h200-verify-" in c and "--verify 4 --configs-dir data/configs/nvidia-h200"
               in c for c in calls)
    rc, out, calls = call("sweep")
    assert rc == 0 and len(calls) == 3, out[-2000:]
    keys = "1,2,4,8,16,24,32,48,64,96,128,256,512,1024,1536,2048,3072,4096,8192"
    assert all("--run-id h200-grid-" in c and " sweep --backends " in c and
               f"--config default,tuned --modes graph --tokens {keys}" in c for c in calls)
    fp8 = [c for c in calls if "h200-grid-aiter-triton-qwen3-235b-a22b-tp8ep8-fp8-block128" in c]
    assert len(fp8) == 1 and "--backends aiter-triton --config" in fp8[0]
    assert "--dtype fp8-block128" in fp8[0] and "--ep 8" in fp8[0]
    # PUBLISHED: aiter-triton also with the file vLLM names for its shape, where there is one
    pub = tmp_path / "published"
    pub.mkdir()
    name = "E=16,N=1536,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
    (pub / name).write_text("{}")
    env["PUBLISHED"] = str(pub)
    rc, out, calls = call("sweep")
    assert rc == 0 and len(calls) == 3, out[-2000:]
    fp8 = [c for c in calls if "fp8-block128" in c]
    assert f"--config default,tuned,{pub}/{name} " in fp8[0]
    assert len([c for c in calls if c not in fp8]) == 2  # the two silu shapes
    assert all("--config default,tuned " in c for c in calls if c not in fp8)  # silu: none
    del env["PUBLISHED"]
    rc, out, calls = call("search")
    assert rc == 2 and "usage:" in out and not calls
    # no SHAPES: what is left of the required aiter-triton* shapes (the committed files but
    # no runs: no search is complete, so every such shape is searched, and none is swept);
    # verify has no default
    from moe_lab.analysis.tuned import REQUIRED
    del env["SHAPES"]
    rc, out, calls = call()
    assert rc == 0 and len(calls) == sum(b != "vllm" for _, b, *_ in REQUIRED), out[-2000:]
    assert "device_tune tune: left: aiter-triton" in out and "vllm" not in " ".join(calls)
    rc, out, calls = call("sweep")
    assert rc == 0 and "device_tune sweep: left: nothing" in out and not calls
    rc, out, calls = call("verify")
    assert rc != 0 and "verify takes no default" in out and not calls


def test_on_an_h100_the_runs_files_and_vllms_unread_files_follow_the_device(tmp_path, monkeypatch):
    """The lent H100 (issue 63): device_vllm.sh names its runs h100-vllm-*, measures its
    ceilings, runs aiter-triton tuned nowhere (no H100 file committed), times vllm with
    vLLM's own files for the GPU that its lookup never reads there (Scout bf16 and Maverick
    fp8-channel: `device_name=NVIDIA_H100`), never one it reads or another GPU's; tune
    hands device_tune.sh the H100's required shapes (vllm first), into h100-tune-* runs."""
    import shutil
    for p in _parts(tmp_path, monkeypatch):
        _call(tmp_path, [p])
    fake, repo = _dry_repo(tmp_path)
    pub = tmp_path / "published"
    pub.mkdir()
    unread = ["E=16,N=1024,device_name=NVIDIA_H100.json",
              "E=128,N=1024,device_name=NVIDIA_H100,dtype=fp8_w8a8.json"]
    for n in unread + ["E=128,N=192,device_name=NVIDIA_H100_80GB_HBM3.json",  # it reads this
                       "E=16,N=1024,device_name=NVIDIA_H200.json",
                       "E=16,N=1024,device_name=NVIDIA_H100_PCIe.json"]:
        (pub / n).write_text('{"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, '
                             '"GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}}')
    log = tmp_path / "dry.log"
    env = dict(os.environ, AITER_SITE=str(tmp_path / "aiter-site"),
               PATH=f"{fake}{os.pathsep}{os.environ['PATH']}", DRY_LOG=str(log),
               DRY_GPU="NVIDIA H100 80GB HBM3", PUBLISHED=str(pub),
               REAL_PY=sys.executable, VLLM_PARTS=str(tmp_path / "none"),
               VLLM_STAGE=str(tmp_path / "stage"), VLLM_SITE=str(tmp_path / "site"),
               VLLM_STANDINS=str(tmp_path / "standins"), VLLM_RUNSTAGE=str(tmp_path / "runstage"),
               TUNE_STAGE=str(tmp_path / "tunestage"), MOE_LAB_GIT_COMMIT="abc1234",
               MOE_LAB_DATA=str(tmp_path / "no-runs"))

    def call(mode):
        out = tmp_path / f"out-{mode}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        log.write_text("")
        r = subprocess.run(["bash", "scripts/device_vllm.sh", mode], cwd=repo, timeout=600,
                           env=dict(env, OUT=str(out)), capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr, out, log.read_text().splitlines()
    rc, out, where, calls = call("sweep")
    assert rc == 0 and "1 x NVIDIA H100 80GB HBM3: runs h100-*" in out, out[-3000:]
    runs = {c.split("--run-id ")[1].split()[0] for c in calls}
    assert runs == {"h100-vllm-bf16-tp8", "h100-vllm-bf16-tp8ep8", "h100-vllm-fp8-block128-tp8",
                    "h100-vllm-fp8-block128-tp8ep8", "h100-vllm-fp8-channel-tp8"}
    assert not [c for c in calls if "--config tuned" in c or "default,tuned" in c]
    files = sorted((c.split("--run-id ")[1].split()[0], c.split("--models ")[1].split()[0],
                    c.split("--config ")[1].split()[0].rsplit("/", 1)[1])
                   for c in calls if f"--config {pub}" in c)
    assert files == [("h100-vllm-bf16-tp8", "llama4-scout-16e", unread[0]),
                     ("h100-vllm-fp8-channel-tp8", "llama4-maverick-128e", unread[1])]
    assert all("--backends vllm " in c for c in calls if f"--config {pub}" in c)
    with tarfile.open(where / "bundle.tar.gz") as t:
        assert "bundle/logs/ceilings.log" in t.getnames()  # measured (here: no GPU, refused)
    rc, out, where, calls = call("tune")
    from moe_lab.analysis.tuned import REQUIRED_63
    tunes = [c for c in calls if " tune " in c]
    assert rc == 0 and len(tunes) == len(REQUIRED_63), out[-3000:]
    assert [c.split("--backend ")[1].split()[0] for c in tunes] == sorted(
        (r[1] for r in REQUIRED_63), key=lambda b: b != "vllm")
    assert all(c.split("--run-id ")[1].split()[0].startswith("h100-tune-") for c in tunes)


@pytest.mark.parametrize("script,mode", [("device_tune.sh", "tune"), ("device_tune.sh", "sweep"),
                                         ("device_tune.sh", "verify"), ("device_vllm.sh", "sweep"),
                                         ("device_vllm.sh", "tune"), ("device_vllm.sh", "stage")])
def test_the_device_scripts_refuse_a_machine_that_is_not_the_gpu_one(tmp_path, script, mode):
    """The README's `bash scripts/device_tune.sh [tune|verify|sweep]` and `device_vllm.sh
    sweep|tune` typed on a machine without a GPU: one line, exit 2, nothing staged or
    written. Without OUT they stopped at `OUT: unbound variable` (exit 1); with it,
    device_tune.sh ran its sweeps on the CPU for the whole budget and said rc=0."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text('#!/bin/sh\ncase "$2" in *"device_count()"*) echo 0; exit 0 ;; '
                                  'esac\nexec "$REAL_PY" "$@"\n')
    (fake / "python3").chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, PATH=f"{fake}{os.pathsep}{os.environ['PATH']}", REAL_PY=sys.executable,
               VLLM_PARTS=str(tmp_path / "parts"), VLLM_STAGE=str(tmp_path / "stage"),
               VLLM_SITE=str(tmp_path / "site"), VLLM_STANDINS=str(tmp_path / "standins"),
               AITER_SITE=str(tmp_path / "aiter-site"), TUNE_STAGE=str(tmp_path / "tunestage"),
               SHAPES="aiter-triton:qwen3-30b-a3b:8:1:bf16", BUDGET="60")
    env.pop("OUT", None)
    for with_out, says in ((False, "OUT is not set"), (True, "no GPU visible to torch here")):
        r = subprocess.run(["bash", f"scripts/{script}", mode], cwd=ROOT, timeout=120,
                           env=dict(env, OUT=str(out)) if with_out else env,
                           capture_output=True, text=True)
        lines = (r.stdout + r.stderr).strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and says in lines[0], (r.returncode, lines)
        assert "this script runs on the lent GPU machine" in lines[0]
    assert not any(out.iterdir())
    assert not [p.name for p in tmp_path.iterdir() if p.name not in ("bin", "out")]
    # GPUs of two kinds in one machine: one run would hold two devices' points as one's
    (fake / "python3").write_text('#!/bin/sh\ncase "$2" in *"device_count()"*) echo 2; exit 0 ;; '
                                  '*"get_device_name"*) printf "NVIDIA H100 80GB HBM3\\nNVIDIA H200\\n"; exit 0 ;; '
                                  'esac\nexec "$REAL_PY" "$@"\n')
    r = subprocess.run(["bash", f"scripts/{script}", mode], cwd=ROOT, timeout=120,
                       env=dict(env, OUT=str(out)), capture_output=True, text=True)
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, (r.returncode, lines)
    assert "GPUs are of several kinds (NVIDIA H100 80GB HBM3,NVIDIA H200)" in lines[0]
    assert not any(out.iterdir())
    assert not [p.name for p in tmp_path.iterdir() if p.name not in ("bin", "out")]
    r = subprocess.run(["bash", f"scripts/{script}", "bogus"], cwd=ROOT, env=env, timeout=60,
                       capture_output=True, text=True)
    assert r.returncode == 2 and (r.stdout + r.stderr).startswith("usage: bash scripts/")


# --- wrong arguments ------------------------------------------------------------------------

@pytest.mark.parametrize("argv,says", [
    (["aiter-cut"], "usage: device_bundle.py aiter-cut WHEEL_OR_SITE OUT.tar.gz"),  # IndexError
    (["stage", "parts"], "usage: device_bundle.py stage PARTS_DIR STAGE_DIR SITE_DIR"),  # TypeError
    (["standins"], "usage: device_bundle.py standins DIR NAME..."),  # IndexError
    (["vllm-parts", "w.whl", "deps", "out", "7MiB"],
     "vllm-parts: TREE_BYTES '7MiB' is not a number of bytes"),  # ValueError
    (["vllm-parts", "w.whl", "deps", "out", "100", "cut.tar.gz", "sm_90"],
     "vllm-parts: ARCH 'sm_90' is not a GPU architecture number (90 for sm_90) or `all`"),
    (["aiter-cut", "{tmp}/nope.whl", "{tmp}/cut.tar.gz"], "{tmp}/nope.whl: no such wheel or folder"),
    (["aiter-cut", "{tmp}/notes.whl", "{tmp}/cut.tar.gz"],  # zipfile.BadZipFile
     "{tmp}/notes.whl: not a wheel (not a zip file)"),
    # was exit 0: an empty bundle written, the parts already in OUT_DIR removed
    (["vllm-parts", "{tmp}/nope.whl", "{tmp}", "{tmp}/parts", "100"],
     "{tmp}/nope.whl: no such wheel or folder"),
    (["vllm-parts", "{tmp}/site", "{tmp}", "{tmp}/parts", "100"],
     "{tmp}/site: no vllm/ files in it (not a vLLM wheel?)"),
    (["aiter-cut", "{tmp}/site", "{tmp}/cut.tar.gz"],  # was exit 1
     "{tmp}/site: no aiter/ops/triton/moe_op.py in it (not amd-aiter?)"),
    # was: the whole doc on stdout, nothing on stderr
    (["stgae", "a", "b", "c"], "unknown command 'stgae'; one of aiter-cut, vllm-parts, stage, "
                               "standins"),
    (["stage", "{tmp}/parts", "{tmp}/notes.whl", "{tmp}/s"],  # was: FileExistsError
     "stage: {tmp}/notes.whl: {tmp}/notes.whl is a file, not a folder"),
    (["stage", "{tmp}/parts", "{tmp}/stage", "{tmp}/notes.whl/site"],
     "stage: {tmp}/notes.whl/site: {tmp}/notes.whl is a file, not a folder"),
    (["standins", "{tmp}/notes.whl", "foo"],  # was: NotADirectoryError
     "standins: {tmp}/notes.whl: {tmp}/notes.whl is a file, not a folder"),
    (["standins", "{tmp}/si", "../evil"], "standins: '../evil' is not a top-level module name"),
    (["standins", "{tmp}/si", "a.b"], "standins: 'a.b' is not a top-level module name"),
    # was: exit 0, a stand-in __init__.py written into DIR itself
    (["standins", "{tmp}/si", ""], "standins: '' is not a top-level module name"),
])
def test_wrong_arguments_are_one_line_and_exit_2_and_nothing_written(tmp_path, capsys, argv,
                                                                       says):
    (tmp_path / "notes.whl").write_text("not a zip")
    (tmp_path / "site" / "other").mkdir(parents=True)
    (tmp_path / "site" / "other" / "x.py").write_text("")
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "vllm-0123abcd-0-of-1").write_bytes(b"a part made before")
    around = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert db.main([a.format(tmp=tmp_path) for a in argv]) == 2
    out = capsys.readouterr()
    assert out.err.strip() == "device_bundle: error: " + says.format(tmp=tmp_path)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == around
    assert (tmp_path / "parts" / "vllm-0123abcd-0-of-1").read_bytes() == b"a part made before"


@pytest.mark.parametrize("names", [["vllm-0123abcd-0-of-2", "vllm-0123abcd-1-of-2"],
                                   ["vllm-0123abcd-0-of-1", "vllm-4567abcd-0-of-1"]])
def test_parts_that_do_not_join_leave_no_stray_site_tmp(tmp_path, capsys, names):
    """Before: stage made SITE_DIR.tmp before it checked the parts' sha256, and a refusal
    left it behind, empty, beside SITE_DIR."""
    (tmp_path / "parts").mkdir()
    for n in names:
        (tmp_path / "parts" / n).write_bytes(b"not a part of " + n.encode())
    assert db.stage(str(tmp_path / "parts"), str(tmp_path / "stage"), str(tmp_path / "site")) == 1
    assert "do not join" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parts", "stage"]


def test_a_dry_run_of_the_paths_call_puts_vllms_hopper_paths_beside_its_triton(tmp_path, monkeypatch):
    """`device_vllm.sh paths` (issue 64): every seed shape and scheme (the sweep's, and
    Qwen3-235B TP8+EP8 bf16 and fp8-block128) with vLLM's Hopper paths and vllm-deployed
    beside vllm and the workbook's layers of the scheme, into <tag>-vllm-paths-* runs, the
    GPU's ceilings measured first, no vLLM unread-file timing (that is the sweep's)."""
    import shutil
    for p in _parts(tmp_path, monkeypatch):
        _call(tmp_path, [p])
    fake, repo = _dry_repo(tmp_path)
    log = tmp_path / "dry.log"
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, AITER_SITE=str(tmp_path / "aiter-site"),
               PATH=f"{fake}{os.pathsep}{os.environ['PATH']}", DRY_LOG=str(log),
               DRY_GPU="NVIDIA H100 80GB HBM3", REAL_PY=sys.executable,
               VLLM_PARTS=str(tmp_path / "none"), VLLM_STAGE=str(tmp_path / "stage"),
               VLLM_SITE=str(tmp_path / "site"), VLLM_STANDINS=str(tmp_path / "standins"),
               VLLM_RUNSTAGE=str(tmp_path / "runstage"), TUNE_STAGE=str(tmp_path / "tunestage"),
               MOE_LAB_GIT_COMMIT="abc1234", MOE_LAB_DATA=str(tmp_path / "no-runs"), OUT=str(out))
    # FlashInfer's JIT module is built on this machine (an earlier call's background build)
    (tmp_path / "runstage").mkdir()
    (tmp_path / "runstage" / "flashinfer-jit.log").write_text("built in 312 s\n")
    r = subprocess.run(["bash", "scripts/device_vllm.sh", "paths"], cwd=repo, timeout=600,
                       env=env, capture_output=True, text=True)
    text = r.stdout + r.stderr
    assert r.returncode == 0 and "paths: every job complete" in text, text[-3000:]
    calls = [c for c in log.read_text().splitlines() if " sweep " in c]

    def arg(c, k):
        return c.split(f"--{k} ")[1].split()[0]
    got = {}
    for c in calls:
        got.setdefault((arg(c, "run-id"), arg(c, "backends")), set()).update(
            arg(c, "models").split(","))
    paths = {"bf16": "vllm,vllm-deployed,flashinfer-cutlass,triton-kernels,aiter-triton,torch-grouped",
             "fp8-block128": "vllm,vllm-deployed,deepgemm,flashinfer-cutlass,vllm-cutlass,aiter-triton,torch-fp8",
             "fp8-channel": "vllm,vllm-deployed,vllm-cutlass,flashinfer-cutlass,deepgemm,torch-fp8-grouped,torch-fp8"}
    want = {("h100-vllm-paths-bf16-tp8", paths["bf16"]):
            {"llama4-scout-16e", "llama4-maverick-128e", "qwen3-235b-a22b"},
            ("h100-vllm-paths-bf16-tp8ep8", paths["bf16"]): {"deepseek-r1", "qwen3-235b-a22b"},
            ("h100-vllm-paths-fp8-block128-tp8", paths["fp8-block128"]): {"deepseek-r1"},
            ("h100-vllm-paths-fp8-block128-tp8ep8", paths["fp8-block128"]):
            {"deepseek-r1", "qwen3-235b-a22b"},
            ("h100-vllm-paths-fp8-channel-tp8", paths["fp8-channel"]):
            {"llama4-scout-16e", "llama4-maverick-128e"}}
    assert {k: v for k, v in got.items() if k in want} == want
    assert all(arg(c, "run-id").startswith("h100-vllm-paths-") for c in calls)
    assert all("--modes graph" in c and "--tokens 1,16,64,256,1024,2048,4096,8192" in c for c in calls)
    with tarfile.open(out / "bundle.tar.gz") as t:
        assert "bundle/logs/ceilings.log" in t.getnames()
        assert "bundle/logs/flashinfer-jit.log" in t.getnames()
    # not built yet (and no flashinfer to build it with here): its points wait, the rest go on
    shutil.rmtree(out)
    out.mkdir()
    shutil.rmtree(tmp_path / "runstage")
    log.write_text("")
    r = subprocess.run(["bash", "scripts/device_vllm.sh", "paths"], cwd=repo, timeout=600,
                       env=dict(env, JOBS="bf16:8:deepseek-r1"), capture_output=True, text=True)
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    calls = [c for c in log.read_text().splitlines() if " sweep " in c]
    assert calls and all(arg(c, "backends") == paths["bf16"].replace("flashinfer-cutlass,", "")
                         for c in calls)
    shutil.rmtree(out)
