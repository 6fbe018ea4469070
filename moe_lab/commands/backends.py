"""`moe-lab backends`: every backend, whether it can run here, and why not.
(Heavy imports live in run(): the CLI's --help must not load torch or pandas.)"""
from __future__ import annotations


def configure(p):
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="device to ask about (default: cuda when visible, else cpu)")


def table(device: str | None = None) -> list[dict]:
    from .. import backends
    from ..measuring.correctness import resolve_device
    device = resolve_device(device)
    rows = []
    for b in backends.all_backends():
        ok, why = b.available()
        rows.append(dict(backend=b.name, available=ok, reason=why or "",
                         description=b.description, device=device))
    return rows


def run(args) -> int:
    print(f"{'backend':18} {'available':9}  why / what")
    for r in table(args.device):
        print(f"{r['backend']:18} {'yes' if r['available'] else 'no':9}  "
              f"{r['reason'] or r['description']}")
    return 0
