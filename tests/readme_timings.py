"""How long the README's commands take on a fresh clone, and what they install: measured,
kept as a small committed record (data/timings/readme-commands.json) that the README's
sentence is checked against (tests/test_readme.py). Not a test module: run it by hand on the
machine whose times the README should state, on a committed tree:

    python tests/readme_timings.py [--out data/timings/readme-commands.json] [--no-report]

It clones HEAD into a temporary folder, makes the virtualenv the README asks for, and runs
in it, one after the other: `bash scripts/main.sh`, `bash scripts/test.sh`, the README's
notebook-API example block (`python -c` of it), then `python -m moe_lab report`; per command
its wall time, exit status and how much it added to the virtualenv (what it downloaded and
installed), with the machine (CPUs, memory), the commit and the date; for `main.sh`, how many
of the points of the run it wrote are flagged noisy. The file is written whole at the end
(nothing on failure: the command that failed is said). What the record must show (the
README's promises, checked by tests/test_readme.py): MAIN_NOISY_SHARE_MAX, EXAMPLES_MAX_S."""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = "python3 tests/readme_timings.py --examples"  # the README's block, as a user runs it
COMMANDS = (("main", "bash scripts/main.sh"), ("test", "bash scripts/test.sh"),
            ("examples", EXAMPLES), ("report", "python -m moe_lab report"))
MAIN_NOISY_SHARE_MAX = 0.25  # main.sh's CPU sweep: at most this share of its points noisy
EXAMPLES_MAX_S = 60.0        # the README's notebook-API block, on the same CPU


def example_block(readme: Path) -> str:
    """The README's notebook-API example: the python block after '## The notebook API'."""
    text = readme.read_text()
    part = text.split("## The notebook API", 1)[1]
    return part.split("```python\n", 1)[1].split("```", 1)[0]


def main_noise(clone: Path) -> dict:
    """The points of the run main.sh wrote (the newest under the clone's data/runs) and how
    many of them are flagged noisy."""
    import pandas as pd
    runs = sorted((clone / "data" / "runs").glob("*/results.parquet"),
                  key=lambda f: f.stat().st_mtime)
    tracked = subprocess.run(["git", "ls-files", "data/runs"], cwd=clone, capture_output=True,
                             text=True).stdout.split()
    runs = [f for f in runs if str(f.relative_to(clone)) not in tracked]
    if not runs:
        return {}
    df = pd.read_parquet(runs[-1])
    ok = df[df["status"] == "ok"]
    return dict(run=runs[-1].parent.name, points=int(len(ok)), noisy=int(ok["noisy"].sum()))


def _size_mb(path: Path) -> float:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total / 2 ** 20


def _machine() -> dict:
    mem = None
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                mem = round(int(line.split()[1]) / 2 ** 20, 1)
    except OSError:
        pass
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                   if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return dict(cpus=os.cpu_count(), cpu=cpu, memory_gb=mem, python=sys.version.split()[0],
                platform=platform.platform())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "data" / "timings" / "readme-commands.json"))
    ap.add_argument("--no-report", action="store_true", help="leave out `report`")
    ap.add_argument("--examples", action="store_true",
                    help="run the README's notebook-API block here (what the record times)")
    args = ap.parse_args(argv)
    if args.examples:
        exec(compile(example_block(ROOT / "README.md"), "README.md", "exec"), {})
        return 0
    if subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                      capture_output=True, text=True).stdout.strip():
        print("readme_timings: the tree has uncommitted changes; the clone times HEAD, so "
              "commit first", file=sys.stderr)
        return 2
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip()
    out = []
    with tempfile.TemporaryDirectory(prefix="moe-lab-readme-") as tmp:
        clone = Path(tmp) / "moe-lab"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        venv = clone / ".venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        env = dict(os.environ, VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
        for key in ("PYTHONPATH", "MOE_LAB_DATA"):
            env.pop(key, None)
        for name, cmd in COMMANDS:
            if name == "report" and args.no_report:
                continue
            before = _size_mb(venv)
            t0 = time.monotonic()
            p = subprocess.run(["bash", "-c", cmd], cwd=clone, env=env, capture_output=True,
                               text=True)
            wall = time.monotonic() - t0
            tail = (p.stdout + p.stderr).strip().splitlines()[-3:]
            print(f"{cmd}: rc={p.returncode} {wall:.0f} s; {' | '.join(tail)}", flush=True)
            if p.returncode:
                print(f"readme_timings: `{cmd}` failed (rc={p.returncode}): nothing written",
                      file=sys.stderr)
                return 1
            out.append(dict(name=name, command=cmd, wall_s=round(wall, 1),
                            venv_added_mb=round(_size_mb(venv) - before, 1), last_line=tail[-1] if tail else ""))
            if name == "main":
                out[-1].update(main_noise(clone))
    record = dict(what=__doc__.split("\n\n")[0].replace("\n", " "), commit=sha,
                  measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  machine=_machine(), commands=out)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = path.with_suffix(".json.tmp")
    tmp_path.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp_path, path)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
