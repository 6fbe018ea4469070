"""Hints that lead somewhere on the machine at hand (issue 35): a CPU user is not told to
install amd-aiter for backends that need a GPU anyway, `backends` says yes only where a
backend can run something here, the main job's setup does not download triton (1 GB) on
a CPU machine, and a notebook run prints no kernel TCP warning."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks what a CPU machine is told")


@no_gpu
def test_gpu_only_backends_say_they_need_a_gpu_not_an_install(monkeypatch):
    from moe_lab import backends
    from moe_lab.backends import aiter_ck, aiter_triton
    monkeypatch.setattr(aiter_ck, "aiter_root", lambda: None)  # amd-aiter not installed
    monkeypatch.setattr(aiter_triton, "aiter_root", lambda: None)
    for name in ("aiter", "aiter-triton", "aiter-triton-silu"):
        ok, why = backends.get(name).available()
        assert not ok and "GPU" in why and "pip install" not in why, (name, why)


@no_gpu
def test_backends_says_yes_only_where_a_backend_can_run_here():
    """`setup: N backends available here` counts these yes lines."""
    from moe_lab.commands.backends import table
    from moe_lab.core.problems import make_problem
    from moe_lab import backends
    rows = {r["backend"]: r for r in table("cpu")}
    assert not rows["torch-fp8-grouped"]["available"]  # no CPU kernel
    assert "CPU" in rows["torch-fp8-grouped"]["reason"]
    for name, r in rows.items():  # every yes runs some dtype on this CPU
        if r["available"]:
            be = backends.get(name)
            assert any(be.supports(make_problem("qwen3-30b-a3b", 4, d, 8, 1), "cpu")[0]
                       for d in ("bf16", "fp32", "fp8-tensor", "fp8-channel", "fp8-block128")), name


def _fake_python(tmp_path: Path, gpu: bool) -> tuple[Path, Path]:
    """A stand-in interpreter for setup.sh: torch present, triton absent, a GPU or not;
    every pip install is logged instead of run."""
    log = tmp_path / "pip.log"
    py = tmp_path / "python"
    py.write_text(textwrap.dedent(f"""\
        #!/usr/bin/env bash
        if [ "$1" = -m ] && [ "$2" = pip ]; then echo "$@" >> {log}; exit 0; fi
        case "$2" in
          *"import triton"*) exit 1 ;;
          *cuda.is_available*) exit {0 if gpu else 1} ;;
          *"print(torch.__version__)"*) echo 2.13.0+cpu; exit 0 ;;
          *"import torch"*) exit 0 ;;
        esac
        exit 0
        """))
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    return py, log


@pytest.mark.parametrize("gpu,arg,triton_alone", [(False, "", False), (True, "", True),
                                                  (False, "test", False)])
def test_setup_installs_triton_only_where_it_can_run(tmp_path, gpu, arg, triton_alone):
    py, log = _fake_python(tmp_path, gpu)
    r = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), *([arg] if arg else [])],
                       env={**os.environ, "PYTHON": str(py)}, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    installs = log.read_text().splitlines()
    assert any(l.endswith("-e .[notebooks,test]" if arg else "-e .[notebooks]") for l in installs)
    assert any(l.split()[-1] == "triton" for l in installs) == triton_alone, installs


def test_a_notebook_run_prints_no_kernel_tcp_warning(tmp_path):
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "t.ipynb")
    code = ("import sys; from moe_lab.report import execute_notebook; "
            f"nb = execute_notebook({str(tmp_path / 't.ipynb')!r}, 120, describe_figures=False); "
            "print(nb.cells[0].outputs[0]['data']['text/plain'])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "2", r.stderr
    assert "without encryption" not in r.stderr, r.stderr


def _plan(*pkgs: str) -> str:
    """pip's --dry-run --report JSON installing these name==version packages."""
    import json
    return json.dumps({"install": [{"metadata": dict(zip(("name", "version"), p.split("==")))}
                                   for p in pkgs]})


@pytest.mark.parametrize("plan,installs", [
    (_plan("torch==2.13.0+cpu", "sympy==1.14.0"), True),  # a mirror holding the CPU wheel
    (_plan("torch==2.13.0", "nvidia-cublas==13.1", "nvidia-cudnn-cu13==9.1", "sympy==1.14.0"), False),
    (_plan("torch==2.13.0+cu130"), False),
    ("", False),  # the index has no torch==2.13.0 (pip's dry run fails)
])
def test_setup_never_pulls_a_cuda_build_where_the_cpu_index_is_out_of_reach(tmp_path, plan,
                                                                                installs):
    """No torch, no GPU, PyTorch's CPU index out of reach: the configured index is taken only
    where what it resolves is the CPU build; PyPI's Linux torch (nvidia-* packages, gigabytes)
    is refused in one line, exit 2, nothing installed."""
    log = tmp_path / "pip.log"
    (tmp_path / "plan.json").write_text(plan)
    py = tmp_path / "python"
    py.write_text(textwrap.dedent(f"""\
        #!/usr/bin/env bash
        if [ "$1" = -m ] && [ "$2" = pip ]; then
          case "$*" in *--dry-run*) [ -s {tmp_path}/plan.json ] || exit 1
                                    cat {tmp_path}/plan.json; exit 0 ;; esac
          echo "$@" >> {log}; exit 0
        fi
        case "$2" in
          *"import json"*) exec {sys.executable} "$@" ;;
          *urlopen*|*"import torch"*|*"import triton"*) exit 1 ;;
        esac
        exit 0
        """))
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    bin_ = tmp_path / "bin"  # no nvidia-smi on the path
    bin_.mkdir()
    r = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], capture_output=True,
                       text=True, timeout=60,
                       env={**os.environ, "PYTHON": str(py),
                            "PATH": f"{bin_}{os.pathsep}/usr/bin{os.pathsep}/bin"})
    done = log.read_text().splitlines() if log.exists() else []
    torch_installs = [l for l in done if "torch==2.13.0" in l]
    if installs:
        assert r.returncode == 0, r.stderr
        assert torch_installs and "--index-url" not in torch_installs[0]
        assert "torch==2.13.0+cpu" in r.stdout
    else:
        assert r.returncode == 2 and not done, (r.returncode, done)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "install PyTorch's CPU build yourself" in lines[0], lines


@pytest.mark.parametrize("deps", [True, False])
def test_setup_with_no_package_index_runs_from_the_checkout_where_the_image_has_the_deps(
        tmp_path, deps):
    """The lent GPU machines have no package index: the editable install fails there. Where
    the image has torch and moe-lab's runtime packages (pandas, pyarrow, matplotlib, tqdm,
    numpy, scipy), setup goes on (the main job runs `python -m moe_lab` from the checkout)
    and says the notebook tools are missing; where it lacks them, one line, exit 2."""
    log = tmp_path / "pip.log"
    py = tmp_path / "python"
    py.write_text(textwrap.dedent(f"""\
        #!/usr/bin/env bash
        if [ "$1" = -m ] && [ "$2" = pip ]; then
          echo "$@" >> {log}
          case "$*" in *--no-index*) exit 0 ;; esac
          echo "ERROR: Could not find a version that satisfies the requirement pandas" >&2; exit 1
        fi
        case "$2" in
          *"import pandas, pyarrow"*) exit {0 if deps else 1} ;;
          *"import papermill"*) exit 1 ;;
          *"import triton"*) exit 0 ;;
          *"print(torch.__version__)"*) echo 2.11.0+cu130; exit 0 ;;
          *"import torch"*) exit 0 ;;
        esac
        exit 0
        """))
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    r = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "PYTHON": str(py)})
    said = [l for l in (r.stdout + r.stderr).splitlines() if "could not install" in l]
    assert len(said) == 1, r.stdout + r.stderr
    if deps:
        assert r.returncode == 0 and "running moe-lab from this checkout" in said[0]
        assert "no notebook tools (jupyterlab, papermill)" in said[0]
        assert any("--no-index" in l for l in log.read_text().splitlines())
    else:
        assert r.returncode == 2 and "lacks its runtime packages" in said[0]
