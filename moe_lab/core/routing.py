"""Routers (from logits, as the models compute them) and synthetic expert load for sweeps.

Every router returns `(topk_weights fp32[T,k], topk_ids int32[T,k])`.

Load kinds (the `routing` column of a result):
  uniform   random N(0,1) logits through the model's own router
  balanced  exact round-robin: token t, slot j -> expert (t*k + j) mod E
  zipf:S    expert popularity ~ 1/rank**S (random rank order), k distinct per token
  hot:P     a fraction P of tokens send their first choice to one hot expert
All are deterministic given the seed.
"""
from __future__ import annotations

import re

import torch

from .problems import ModelSpec, ProblemError


# --- routers from logits ---------------------------------------------------------

def llama4_router(logits: torch.Tensor, topk: int):
    """Llama-4: top-k on raw logits, sigmoid of the chosen logits (applied to the input)."""
    vals, ids = torch.topk(logits, topk, dim=-1)
    return torch.sigmoid(vals.float()), ids.to(torch.int32)


def softmax_router(logits: torch.Tensor, topk: int, renormalize: bool = True):
    """Mixtral / Qwen3-MoE: softmax over experts, top-k, renormalise."""
    probs = torch.softmax(logits.float(), dim=-1)
    w, ids = torch.topk(probs, topk, dim=-1)
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return w, ids.to(torch.int32)


def deepseek_router(logits: torch.Tensor, topk: int, n_group: int, topk_group: int,
                    bias: torch.Tensor | None = None, routed_scaling: float = 1.0,
                    renormalize: bool = True):
    """DeepSeek-V3/R1 grouped top-k: sigmoid scores, + correction bias for choosing only,
    group score = sum of the two best biased scores in the group, keep `topk_group`
    groups, top-k inside them, weights are the unbiased scores, renormalised, x scaling."""
    T, E = logits.shape
    scores = torch.sigmoid(logits.float())
    choice = scores + (bias.float() if bias is not None else 0.0)
    grouped = choice.view(T, n_group, E // n_group)
    group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)  # [T, n_group]
    keep = group_scores.topk(topk_group, dim=-1).indices
    group_mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, keep, True)
    expert_mask = group_mask.unsqueeze(-1).expand(T, n_group, E // n_group).reshape(T, E)
    masked = choice.masked_fill(~expert_mask, float("-inf"))
    ids = masked.topk(topk, dim=-1).indices
    w = scores.gather(1, ids)
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return w * routed_scaling, ids.to(torch.int32)


def route(spec: ModelSpec, logits: torch.Tensor, bias: torch.Tensor | None = None):
    """The model's router applied to `logits[T, E]`."""
    if spec.router == "llama4":
        return llama4_router(logits, spec.topk)
    if spec.router == "deepseek":
        return deepseek_router(logits, spec.topk, spec.n_group, spec.topk_group, bias,
                               spec.routed_scaling, spec.renormalize)
    return softmax_router(logits, spec.topk, spec.renormalize)


def weights_for_ids(spec: ModelSpec, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Router-style weights for ids chosen by a synthetic load (same normalisation)."""
    chosen = logits.float().gather(1, ids.long())
    if spec.router == "llama4":
        return torch.sigmoid(chosen)
    if spec.router == "deepseek":
        w = torch.sigmoid(chosen)
        return w / w.sum(-1, keepdim=True) * spec.routed_scaling
    return torch.softmax(chosen, dim=-1)


# --- synthetic load ----------------------------------------------------------------

_KIND = re.compile(r"^(uniform|balanced|zipf|hot)(?::([0-9.eE+-]+))?$")


def parse_routing(text: str) -> tuple[str, float | None]:
    m = _KIND.match(text.strip())
    if not m:
        raise ProblemError(f"routing must be uniform, balanced, zipf:S or hot:P, not {text!r}")
    kind, arg = m.group(1), m.group(2)
    if kind in ("zipf", "hot"):
        if arg is None:
            raise ProblemError(f"routing {kind} needs a parameter, e.g. {kind}:{'1.2' if kind == 'zipf' else '0.5'}")
        val = float(arg)
        if kind == "zipf" and val < 0:
            raise ProblemError("zipf:S needs S >= 0")
        if kind == "hot" and not 0 <= val <= 1:
            raise ProblemError("hot:P needs 0 <= P <= 1")
        return kind, val
    if arg is not None:
        raise ProblemError(f"routing {kind} takes no parameter")
    return kind, None


def _distinct_sample(probs: torch.Tensor, T: int, k: int, gen: torch.Generator) -> torch.Tensor:
    return torch.multinomial(probs.expand(T, -1), k, replacement=False, generator=gen)


def make_routing(spec: ModelSpec, tokens: int, routing: str = "uniform", seed: int = 0,
                 bias: torch.Tensor | None = None):
    """(weights fp32[T,k], ids int32[T,k], logits fp32[T,E]) on the CPU, from `seed`."""
    kind, arg = parse_routing(routing)
    E, k, T = spec.experts, spec.topk, tokens
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(T, E, generator=gen)
    if kind == "uniform":
        w, ids = route(spec, logits, bias)
        return w, ids, logits
    if kind == "balanced":
        ids = (torch.arange(T).unsqueeze(1) * k + torch.arange(k)) % E
    elif kind == "zipf":
        rank_of = torch.randperm(E, generator=gen)  # expert e has popularity rank rank_of[e]
        probs = (rank_of.double() + 1.0) ** (-arg)
        ids = _distinct_sample((probs / probs.sum()).float(), T, k, gen)
    else:  # hot
        hot = int(torch.randint(E, (1,), generator=gen))
        ids = _distinct_sample(torch.full((E,), 1.0 / E), T, k, gen)
        n_hot = int(round(arg * T))
        for t in range(n_hot):  # first choice -> hot expert, keep choices distinct
            row = ids[t]
            if hot in row.tolist():
                j = row.tolist().index(hot)
                row[j] = row[0]
            row[0] = hot
    ids = ids.to(torch.int32)
    return weights_for_ids(spec, logits, ids), ids, logits


def expert_load(ids: torch.Tensor, experts: int) -> torch.Tensor:
    """Tokens routed to each expert: int64[E]."""
    return torch.bincount(ids.reshape(-1).long(), minlength=experts)
