"""`moe-lab ceilings`: measure this GPU's copy bandwidth and bf16/fp8 GEMM rates.
(Heavy imports live in run(): the CLI's --help must not load torch or pandas.)"""
from __future__ import annotations

from ..core.errors import UsageError


def configure(parser) -> None:
    parser.add_argument("--out-dir", default="data/ceilings",
                        help="folder for <device-slug>.json")
    parser.add_argument("--device", default="cuda", help="torch device to measure")
    parser.add_argument("--size-gib", type=float, default=2.0,
                        help="buffer size of the copy (source and destination each) and of the read")
    parser.add_argument("--calls", type=int, default=50, help="timed calls per ceiling")


def run(args) -> int:
    import torch

    from ..measuring.ceilings import measure_ceilings, summary_lines, write_ceilings
    _out_dir(args.out_dir)
    if not torch.cuda.is_available():
        raise UsageError(f"no GPU here (torch {torch.__version__}, "
                         f"cuda={torch.version.cuda}, hip={torch.version.hip}): "
                         "run `moe-lab ceilings` on a CUDA or ROCm machine")
    if not str(args.device).startswith("cuda"):
        raise UsageError(f"--device must be a cuda device (ROCm too), not {args.device!r}")
    command = (f"moe-lab ceilings --out-dir {args.out_dir} --device {args.device} "
               f"--size-gib {args.size_gib:g} --calls {args.calls}")
    result = measure_ceilings(args.device, size_gib=args.size_gib, calls=args.calls,
                              command=command)
    path = write_ceilings(result, args.out_dir)
    for line in summary_lines(result):
        print(line)
    print(f"wrote {path}")
    return 0


def _out_dir(out_dir) -> None:
    """--out-dir a file, or under one, or a run's folder: UsageError before anything is
    measured (was: the measuring first, then one line naming the file, "File exists")."""
    from ..core.validate import output
    output(out_dir, "--out-dir", folder=True)
