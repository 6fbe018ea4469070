"""MoE problem shapes: model presets and tensor/expert-parallel sharding as vLLM does it.

A `Problem` is one MoE layer call on one GPU: tokens T, hidden H, the per-rank
intermediate size I, the experts this rank holds, top-k, dtype and router.

Sharding (vLLM's FusedMoE):
  * TP without EP: every rank holds all E experts, each with I/tp of the intermediate.
  * EP (ep == tp): rank r holds experts [r*E/ep, (r+1)*E/ep) with the full I;
    `expert_map[E]` maps global ids to local ones, -1 for remote experts.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import torch

from .constants import FP8_SCHEMES, SEED_MODELS  # torch-free there: the CLI's --help reads them
from .errors import UsageError


class ProblemError(UsageError):
    """A problem that cannot exist (bad preset, bad sharding). One-line message."""



def sharding_name(tp: int, ep: int) -> str:
    """'TP8' or 'TP8+EP8': the one label of a sharding (rows, figures, the aiter import).
    A row without one (an imported tuner row of a shape no seed model has: its model is the
    shape as one rank holds it, tp and ep empty) is 'rank shape'."""
    try:
        tp, ep = int(tp), int(ep)
    except (TypeError, ValueError):
        return "rank shape"
    return f"TP{tp}" + (f"+EP{ep}" if ep > 1 else "")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    hf_id: str
    hidden: int  # H
    intermediate: int  # I, per expert, unsharded
    experts: int  # E, routed experts
    topk: int
    shared_experts: int
    moe_layers: int
    router: str  # "llama4" | "deepseek" | "softmax"
    # router details (DeepSeek-V3/R1 grouped top-k)
    n_group: int = 1
    topk_group: int = 1
    routed_scaling: float = 1.0
    renormalize: bool = True

    @property
    def weight_on_input(self) -> bool:
        """Llama-4 multiplies the router weight into the input (top-1 only)."""
        return self.router == "llama4"


# Numbers from each model's Hugging Face config.json.
PRESETS: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        ModelSpec("llama4-scout-16e", "meta-llama/Llama-4-Scout-17B-16E-Instruct",
                  5120, 8192, 16, 1, 1, 48, "llama4", renormalize=False),
        ModelSpec("llama4-maverick-128e", "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
                  5120, 8192, 128, 1, 1, 24, "llama4", renormalize=False),
        ModelSpec("deepseek-r1", "deepseek-ai/DeepSeek-R1",
                  7168, 2048, 256, 8, 1, 58, "deepseek", n_group=8, topk_group=4,
                  routed_scaling=2.5),
        ModelSpec("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B",
                  4096, 1536, 128, 8, 0, 94, "softmax"),
        ModelSpec("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B",
                  2048, 768, 128, 8, 0, 48, "softmax"),
        ModelSpec("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1",
                  4096, 14336, 8, 2, 0, 32, "softmax"),
    ]
}

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# fp8 schemes (moe_lab.quant): bf16 activations
DTYPES.update({s: torch.bfloat16 for s in FP8_SCHEMES})

_CUSTOM_RE = re.compile(r"^custom:(.+)$")
MAX_DIM, MAX_EXPERTS, MAX_LAYERS = 262144, 4096, 1024  # a custom model's largest sizes


def parse_model(text: str) -> ModelSpec:
    """A preset name, or `custom:H=..,I=..,E=..,k=..[,router=softmax|llama4|deepseek][,layers=N]`."""
    if text in PRESETS:
        return PRESETS[text]
    m = _CUSTOM_RE.match(text)
    if not m:
        raise ProblemError(
            f"unknown model {text!r}; presets: {', '.join(PRESETS)}; "
            "or custom:H=4096,I=14336,E=8,k=2")
    fields = {}
    for part in m.group(1).split(","):
        if "=" not in part:
            raise ProblemError(f"custom model field {part!r} is not key=value")
        key, val = (s.strip() for s in part.split("=", 1))
        fields[key] = val
    try:
        h, i, e, k = (int(fields.pop(x)) for x in ("H", "I", "E", "k"))
    except KeyError as exc:
        raise ProblemError(f"custom model needs H, I, E and k; missing {exc.args[0]}") from None
    except ValueError:
        raise ProblemError("custom model H, I, E, k must be integers") from None
    router = fields.pop("router", "llama4" if k == 1 and fields.get("woi") == "1" else "softmax")
    fields.pop("woi", None)
    layers = int(fields.pop("layers", 1))
    if fields:
        raise ProblemError(f"unknown custom model fields: {', '.join(fields)}")
    if router not in ("softmax", "llama4", "deepseek"):
        raise ProblemError(f"router must be softmax, llama4 or deepseek, not {router!r}")
    if min(h, i, e, k) < 1 or k > e:
        raise ProblemError("custom model needs positive H, I, E, k with k <= E")
    big = [f"{n}={v}" for n, v, top in (("H", h, MAX_DIM), ("I", i, MAX_DIM), ("E", e, MAX_EXPERTS),
                                        ("layers", layers, MAX_LAYERS)) if v > top]
    if big:  # past these no weight fits any GPU, and sizes overflow the row's int64 columns
        raise ProblemError(f"custom model {big[0]} is too large: H and I at most {MAX_DIM}, E at "
                           f"most {MAX_EXPERTS}, layers at most {MAX_LAYERS}")
    if router == "llama4" and k != 1:
        raise ProblemError("the llama4 router (weight on input) is top-1 only")
    extra = {}
    if router == "deepseek":
        if e % 8 or e < 16:  # a group's score is the sum of its two best experts' (vLLM's)
            raise ProblemError("the deepseek router needs E divisible by its 8 groups, with at "
                               f"least 2 experts in each of its 8 groups (E >= 16), not E={e}")
        extra = dict(n_group=8, topk_group=4, routed_scaling=2.5)
    return ModelSpec(text, "", h, i, e, k, 0, layers, router,
                     renormalize=router != "llama4", **extra)


@dataclass(frozen=True)
class Problem:
    model: ModelSpec
    tokens: int
    dtype: str = "bf16"
    tp: int = 1
    ep: int = 1
    ep_rank: int = 0

    def __post_init__(self):
        m = self.model
        if self.tokens < 1:
            raise ProblemError(f"tokens must be >= 1, got {self.tokens}")
        if self.dtype not in DTYPES:
            raise ProblemError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.tp < 1 or self.ep < 1:
            raise ProblemError("tp and ep must be >= 1")
        if self.ep > 1 and self.ep != self.tp:
            raise ProblemError(f"vLLM's EP uses ep == tp (got tp={self.tp}, ep={self.ep})")
        if not 0 <= self.ep_rank < self.ep:
            raise ProblemError(f"ep_rank must be in [0, {self.ep}), got {self.ep_rank}")
        if m.experts % self.ep:
            raise ProblemError(f"{m.name}: {m.experts} experts do not split over ep={self.ep}")
        if self.ep == 1 and m.intermediate % self.tp:
            raise ProblemError(f"{m.name}: I={m.intermediate} does not split over tp={self.tp}")

    # --- derived shape -------------------------------------------------------
    @property
    def hidden(self) -> int:
        return self.model.hidden

    @property
    def inter(self) -> int:
        """Per-rank intermediate size of one expert."""
        return self.model.intermediate if self.ep > 1 else self.model.intermediate // self.tp

    @property
    def experts(self) -> int:
        """Global number of routed experts (router output width)."""
        return self.model.experts

    @property
    def local_experts(self) -> int:
        return self.model.experts // self.ep

    @property
    def topk(self) -> int:
        return self.model.topk

    @property
    def torch_dtype(self) -> torch.dtype:
        """The dtype of x and out (bf16 for the fp8 schemes)."""
        return DTYPES[self.dtype]

    @property
    def act_dtype(self) -> str:
        """'bf16', 'fp16' or 'fp32': the layer's input/output dtype."""
        return "bf16" if self.is_fp8 else self.dtype

    @property
    def is_fp8(self) -> bool:
        return self.dtype in FP8_SCHEMES

    @property
    def weight_on_input(self) -> bool:
        return self.model.weight_on_input

    @property
    def first_local_expert(self) -> int:
        return self.ep_rank * self.local_experts

    def expert_map(self, device="cpu") -> torch.Tensor | None:
        """int32[E]: global -> local expert id, -1 if remote. None without EP."""
        if self.ep == 1:
            return None
        emap = torch.full((self.experts,), -1, dtype=torch.int32)
        lo = self.first_local_expert
        emap[lo:lo + self.local_experts] = torch.arange(self.local_experts, dtype=torch.int32)
        return emap.to(device)

    @property
    def sharding(self) -> str:
        return sharding_name(self.tp, self.ep)

    def with_tokens(self, tokens: int) -> "Problem":
        return dataclasses.replace(self, tokens=tokens)

    def describe(self) -> str:
        return (f"{self.model.name} {self.sharding} rank{self.ep_rank} T={self.tokens} "
                f"H={self.hidden} I={self.inter} E={self.local_experts}/{self.experts} "
                f"k={self.topk} {self.dtype}")

    def key(self) -> dict:
        """The columns that identify this problem in a results table."""
        return dict(model=self.model.name, tp=self.tp, ep=self.ep, ep_rank=self.ep_rank,
                    dtype=self.dtype, tokens=self.tokens, hidden=self.hidden,
                    inter=self.inter, experts=self.experts,
                    local_experts=self.local_experts, topk=self.topk)


def make_problem(model: str | ModelSpec, tokens: int, dtype: str = "bf16",
                 tp: int = 1, ep: int = 1, ep_rank: int = 0) -> Problem:
    spec = parse_model(model) if isinstance(model, str) else model
    return Problem(spec, int(tokens), dtype, int(tp), int(ep), int(ep_rank))


def split_models(text: str) -> list[str]:
    """`a,b,custom:H=..,I=..,E=..,k=..` -> names; the custom spec keeps its own commas.
    Each name once (`a,a`: was every point measured twice, the second time over the first)."""
    out: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if "=" in part and not part.startswith("custom:") and out and out[-1].startswith("custom:"):
            out[-1] += "," + part
        else:
            out.append(part)
    return list(dict.fromkeys(out))


def default_token_grid(max_tokens: int = 8192) -> list[int]:
    """1, 2, 4, ..., max_tokens."""
    out, t = [], 1
    while t <= max_tokens:
        out.append(t)
        t *= 2
    return out


def parse_int_list(text: str) -> list[int]:
    """`8` or `1,8` -> [1, 8] (for --tp / --ep), each value once (`1,1`: one sharding)."""
    try:
        return list(dict.fromkeys(int(s) for s in str(text).split(",") if s.strip()))
    except ValueError:
        raise ProblemError(f"expected integers like 8 or 1,8, not {text!r}") from None


# the most tokens a point may have: a 128k-token batch, well above any serving step (vLLM's
# max_num_batched_tokens is a few thousand to 64k); `1-100000000` asked for points that
# each run for minutes, and was accepted
MAX_TOKENS = 131072


def parse_tokens(text: str) -> list[int]:
    """`1,64,1024` or a range `1-8192` (powers of two inclusive), at most MAX_TOKENS."""
    try:
        if "-" in text and "," not in text:
            lo, hi = (int(s) for s in text.split("-"))
            if lo < 1 or hi < lo:
                raise ValueError
            toks = [t for t in default_token_grid(hi) if t >= lo]
        else:
            toks = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ProblemError(f"tokens must look like 1,64,1024 or 1-8192, not {text!r}") from None
    if "," not in text and "-" in text and not toks:  # 5-5, 5-7: nothing measured, no why
        raise ProblemError(f"tokens {text!r}: a range takes the powers of two in it, and "
                           "there is none; give a list, e.g. " + ",".join(dict.fromkeys(text.split("-"))))
    if not toks or min(toks) < 1:
        raise ProblemError(f"tokens must be positive integers, not {text!r}")
    big = max(hi if "," not in text and "-" in text else 0, max(toks))
    if big > MAX_TOKENS:
        raise ProblemError(f"tokens {text!r}: {big} is above the {MAX_TOKENS} tokens a point may "
                           "have (a 128k-token batch; more runs for minutes per point)")
    return list(dict.fromkeys(toks))  # 1,1,2: each point once
