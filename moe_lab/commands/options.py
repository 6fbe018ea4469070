"""The options verbs share, declared once: one name, one default, one meaning each.

    options.shape(p, many=True)       --tp, --ep, --ep-rank
    options.dtype(p)                  --dtype (choices: the dtypes with a correctness limit)
    options.device(p)                 --device (cuda when torch sees a GPU, else cpu)
    options.data_dir(p)               --data-dir
    options.config(p, many=True)      --config default|tuned|PATH
    options.compile_workers(p, what)  --compile-workers N (Triton compiled ahead on a GPU)
    options.models(p, flag)           --models (sweep, tune) or --model (check), with the defaults
    options.default_models(gpu)       the models without --models (sweep, tune, check)
    options.by_values(text)           --values A,B of compare and report --runs, parsed

`many`: the verb takes a list (sweep, check, tune: "1,8") or one value (profile, roofline).
"""
from __future__ import annotations

from ..core import constants
from ..core.constants import DTYPE_NAMES  # correctness.THRESHOLDS' keys, torch-free

TP_DEFAULT = constants.TP_DEFAULT  # every seed claim is a TP8 deployment (defined there once)


def shape(p, many: bool = True, ep_default: str | None = None) -> None:
    if many:
        p.add_argument("--tp", default=str(TP_DEFAULT), help="tensor-parallel size(s), e.g. 8 or 4,8")
        p.add_argument("--ep", default=ep_default,
                       help="expert-parallel size(s), 1 = none, e.g. 1,8 for both"
                            + ("" if ep_default else
                               f" (default: {constants.EP_DEFAULT['gpu']} on a GPU, "
                               f"{constants.EP_DEFAULT['cpu']} on a CPU)"))
    else:
        p.add_argument("--tp", type=int, default=TP_DEFAULT, help="tensor-parallel size")
        p.add_argument("--ep", type=int, default=1,
                       help="expert-parallel size, 1 = none (== tp when > 1)")
    p.add_argument("--ep-rank", type=int, default=0, help="the EP rank whose experts are held")


def models(p, flag: str = "--models") -> None:
    p.add_argument(flag, default=None,
                   help="comma-separated presets or custom:H=..,I=..,E=..,k=.. (default: the "
                        f"seed models on a GPU, {','.join(constants.SEED_MODELS)}; "
                        f"{','.join(constants.CPU_MODELS)} on a CPU)")


def default_models(gpu: bool) -> list[str]:
    """The models of sweep, tune and check without --models: constants.SEED_MODELS on a GPU,
    constants.CPU_MODELS on a CPU."""
    return list(constants.SEED_MODELS if gpu else constants.CPU_MODELS)


def default_eps(args_ep: str | None, gpu: bool) -> str:
    """The EP sizes of a list-taking verb: as given, else constants.EP_DEFAULT's (1,8 on a
    GPU, 1 on a CPU)."""
    return args_ep or constants.EP_DEFAULT["gpu" if gpu else "cpu"]


def dtype(p) -> None:
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPE_NAMES),
                   help="bf16, fp16, fp32 or an fp8 scheme as checkpoints ship it: fp8-tensor, "
                        "fp8-channel, fp8-block128")


def device(p) -> None:
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="default: cuda when torch sees a GPU, else cpu")


def data_dir(p) -> None:
    p.add_argument("--data-dir", default=None,
                   help="where run folders live (default: $MOE_LAB_DATA, else the checkout's data/runs)")


def config(p, many: bool = True) -> None:
    p.add_argument("--config", default="default",
                   metavar="default|tuned|PATH" + ("[,...]" if many else ""),
                   help="launch configurations of the tunable backends "
                        f"({', '.join(constants.TUNABLE_BACKENDS)}): their own "
                        "(default), the tuned files of this device under data/configs/<device>/ "
                        "(tuned; a shape without one is refused or an unsupported row saying so), "
                        "or a config file" + ("; several, each its own point: default,tuned"
                                              if many else ""))


def compile_workers(p, what: str) -> None:
    p.add_argument("--compile-workers", type=int, default=None, metavar="N",
                   help=f"processes that compile {what} into Triton's on-disk cache before "
                        "they are timed (0: compile in place; default: the cores but "
                        f"{constants.COMPILE_WORKERS_SPARE}, at most "
                        f"{constants.COMPILE_WORKERS_MAX}, on a GPU; 0 on a CPU)")


def by_values(text: str | None) -> list[str] | None:
    """--values A,B of `compare` and `report --runs` (the two values of --by): the list, None
    when not given; a value that is empty is a UsageError, one line. Before, `--values ,`
    was refused as 'one value twice' and `--values a,` as a run without rows of ''."""
    from ..core.errors import UsageError
    if not text:
        return None
    values = [v.strip() for v in text.split(",")]
    if not any(values):
        raise UsageError(f"--values {text}: the values are empty; give the two values of "
                         "--by, A,B (e.g. --by config --values default,tuned)")
    empty = [str(i) for i, v in enumerate(values, 1) if not v]
    if empty:
        raise UsageError(f"--values {text}: value {' and '.join(empty)} of {len(values)} is "
                         "empty; give the two values of --by, A,B (e.g. --by config "
                         "--values default,tuned)")
    return values


# the values' checks (moe_lab.core.validate), re-exported for the verbs
from ..core.validate import count, non_negative, positive, run_id, timing  # noqa: E402,F401
