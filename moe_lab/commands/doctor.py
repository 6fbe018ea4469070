"""`moe-lab doctor`: versions, devices, and what will run here.
(Heavy imports live in run(): the CLI's --help must not load torch or pandas.)"""
from __future__ import annotations

import argparse

from . import backends


def configure(p):
    pass


def run(args) -> int:
    import torch

    from ..core.environment import capture_environment
    env = capture_environment()
    for k in sorted(env):
        if k != "env":
            print(f"{k:16} {env[k]}")
    for k, v in sorted((env.get("env") or {}).items()):
        print(f"env {k}={v}")
    print()
    backends.run(argparse.Namespace(device=None))
    if not torch.cuda.is_available():
        print("\nno GPU visible: sweeps run the torch backends on the CPU at small shapes; "
              "the notebooks render from the committed runs in data/runs/.")
    return 0
