"""Which seed shapes each GPU must have a tuned file for (defined once: issues 38 and 41
for the H200, issue 63 for every other GPU), and how the device scripts name a shape
(SHAPES words) and its search's run folder. Read by analysis.tuned (the inventory,
the work left) and the device scripts.

    REQUIRED, REQUIRED_63, REQUIRED_BY_DEVICE  (issue, backend, model, tp, ep, dtype) tuples
    required_for(device)                       the device's tuple
    shape_word(...) / published_file(word, device)  a SHAPES word; vLLM's file name for it
    search_run(word, device)                  `<device tag>-tune-<backend>-<model>-...`
"""
from __future__ import annotations

from ...core import validate
from ...core.devices import device_tag
from ...core.errors import UsageError
from ...core.problems import SEED_MODELS
from .paths import file_names
from ...storage.checked import TEXT, takes

SEEDS = SEED_MODELS  # core.problems' (was a second, reordered copy of the four names)
LLAMA4 = tuple(m for m in SEEDS if m.startswith("llama4"))  # the seeds shipped fp8-channel
REQUIRED = tuple(
    [(38, b, m, 8, ep, "bf16") for b in ("aiter-triton", "aiter-triton-silu") for m in SEEDS
     for ep in (1, 8)]
    + [(38, "aiter-triton", "deepseek-r1", 8, ep, "fp8-block128") for ep in (1, 8)]
    + [(38, "aiter-triton", "qwen3-235b-a22b", 8, 8, "fp8-block128")]
    + [(41, "vllm", m, 8, 1, "bf16") for m in SEEDS if m != "deepseek-r1"]
    + [(41, "vllm", "deepseek-r1", 8, 8, "bf16")]
    + [(41, "vllm", "deepseek-r1", 8, ep, "fp8-block128") for ep in (1, 8)]
    + [(41, "vllm", m, 8, 1, "fp8-channel") for m in LLAMA4])
# issue 63: on every other GPU (the H100 first), the shapes and schemes of the H200's vLLM
# comparison, tuned for aiter-triton (its kernel runs no fp8-channel) and vllm
COMPARED = ([("llama4-scout-16e", 1, "bf16"), ("llama4-maverick-128e", 1, "bf16"),
             ("qwen3-235b-a22b", 1, "bf16"), ("deepseek-r1", 8, "bf16"),
             ("deepseek-r1", 8, "fp8-block128"), ("deepseek-r1", 1, "fp8-block128")])
REQUIRED_63 = tuple(
    [(63, "vllm", m, 8, ep, dt) for m, ep, dt in COMPARED]
    + [(63, "vllm", m, 8, 1, "fp8-channel") for m in LLAMA4]
    + [(63, "aiter-triton", m, 8, ep, dt) for m, ep, dt in COMPARED])
# the shapes each device's issues ask a tuned file for, by core.devices.device_tag (issues 38
# and 41 were the H200's); a device not named: issue 63's
REQUIRED_BY_DEVICE = {"h200": REQUIRED}


@takes(device=TEXT)
def required_for(device: str) -> tuple:
    """The required shapes of `device` (REQUIRED_BY_DEVICE, else REQUIRED_63)."""
    return REQUIRED_BY_DEVICE.get(device_tag(device), REQUIRED_63)


@takes(device=TEXT)
def required_name(device: str) -> str:
    """The name of required_for(device) in this module ('REQUIRED' or 'REQUIRED_63')."""
    return "REQUIRED" if required_for(device) is REQUIRED else "REQUIRED_63"


PUBLISHED_FOR = ("aiter-triton", "vllm")  # the backends running the kernel vLLM tunes


def shape_word(backend, model, tp, ep, dtype) -> str:
    """A shape as the device scripts' SHAPES name it: backend:model:tp:ep:dtype."""
    return f"{backend}:{model}:{tp}:{ep}:{dtype}"


def published_file(word: str, device: str) -> str:
    """The file name vLLM gives its shipped tuning of a shape (`word`: shape_word's form),
    the same kernel and launch keys as aiter-triton's: what `device_tune.sh sweep` runs
    beside the tuned file when PUBLISHED holds it. Of aiter-triton's and vllm's shapes
    only (PUBLISHED_FOR: the kernel vLLM publishes tunings of)."""
    backend, model, tp, ep, dtype = _word(word)
    if backend not in PUBLISHED_FOR:  # was: vLLM's file named for any backend, or none
        raise UsageError(f"published_file: word {word!r}: vLLM publishes no tuning for "
                         f"{backend!r}; give a word of {' or '.join(PUBLISHED_FOR)} (the kernel "
                         "vLLM tunes), e.g. aiter-triton:deepseek-r1:8:8:bf16")
    validate.text(device, "published_file: device", "a device name, e.g. 'NVIDIA H200'")
    return file_names("vllm", model, int(tp), int(ep), dtype, device)["gemm1"]


def _word(word: str) -> list[str]:
    """A SHAPES word's five parts; UsageError naming it when it is not of that form."""
    parts = str(word).split(":")
    if len(parts) != 5 or not (parts[2].isdigit() and parts[3].isdigit()):
        raise UsageError(f"{validate.shown(word)} is not a shape word backend:model:tp:ep:dtype "
                         "(e.g. vllm:deepseek-r1:8:8:bf16)")
    return parts


@takes(word=TEXT, device=TEXT)
def search_run(word: str, device: str) -> str:
    """The run folder of a shape's search on `device`, as scripts/device_tune.sh names it."""
    b, m, tp, ep, dt = word.split(":")
    return f"{device_tag(device)}-tune-{b}-{m}-tp{tp}{'' if ep == '1' else f'ep{ep}'}-{dt}"
