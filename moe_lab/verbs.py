"""Small verbs: `moe-lab backends` and `moe-lab doctor`."""
from __future__ import annotations

import torch

from . import backends as B


def configure_backends(p):
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="device to ask about (default: cuda when visible, else cpu)")


def backend_table(device: str | None = None) -> list[dict]:
    from .check import default_device
    device = device or default_device()
    rows = []
    for b in B.all_backends():
        ok, why = b.available()
        rows.append(dict(backend=b.name, available=ok, reason=why or "", description=b.description,
                         device=device))
    return rows


def run_backends(args) -> int:
    rows = backend_table(args.device)
    print(f"{'backend':14} {'available':9}  why / what")
    for r in rows:
        print(f"{r['backend']:14} {'yes' if r['available'] else 'no':9}  "
              f"{r['reason'] or r['description']}")
    return 0


def configure_doctor(p):
    pass


def run_doctor(args) -> int:
    from .store import capture_environment
    env = capture_environment()
    for k in sorted(env):
        if k != "env_vars":
            print(f"{k:16} {env[k]}")
    for k, v in sorted((env.get("env_vars") or {}).items()):
        print(f"env {k}={v}")
    print()
    run_backends(type("A", (), {"device": None})())
    if not torch.cuda.is_available():
        print("\nno GPU visible: sweeps run the torch backends on the CPU at small shapes; "
              "the notebooks render from the committed runs in data/runs/.")
    return 0
