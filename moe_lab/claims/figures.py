"""Figures for the claims notebook. Every figure carries its provenance: the source PR
text (seed file and section) and the configuration the numbers were measured on."""
from __future__ import annotations

import math

STATUS_COLOR = {"pass": "#2a9d8f", "warn": "#e9c46a", "fail": "#e76f51"}


def provenance(reg: dict, config: str) -> str:
    c = reg["configs"][config]
    parts = [f"source: data/claims/sources/{c['source']}"]
    if c.get("section"):
        parts.append(f"section: {c['section']}" + (f" / {c['table']}" if c.get("table") else ""))
    shard = f"TP{c.get('tp')}" + (f" EP{c['ep']}" if (c.get("ep") or 1) > 1 else "")
    cfg = [c.get("hf_id") or c.get("preset", ""), c.get("dtype", ""), shard]
    if c.get("concurrency"):
        cfg.append(f"concurrency {c['concurrency']}, {c['num_prompts']} prompts, "
                   f"ISL/OSL {c['input_len']}/{c['output_len']}")
    if c.get("engine"):
        cfg.append(f"{c['engine']} engine")
    if c.get("flags"):
        cfg.append(" ".join(f for f in c["flags"] if f.startswith("--")))
    if c.get("gpu"):
        cfg.append(f"GPU {c['gpu']} (assumed)" if c.get("gpu_note") else f"GPU {c['gpu']}")
    return "; ".join(parts) + "\n" + ", ".join(x for x in cfg if x)


def plot_config(reg: dict, checks, config: str, metrics: list[str] | None = None):
    """Baseline vs new bars, one panel per metric, with recomputed gain and verdict."""
    import matplotlib.pyplot as plt
    claims = [c for c in reg["claims"] if c["kind"] == "perf" and c["config"] == config
              and (metrics is None or c["metric"] in metrics)]
    n = len(claims)
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.7 * rows + 0.9), squeeze=False)
    status = dict(zip(checks["id"], checks["status"]))
    for ax, c in zip(axes.flat, claims):
        st = status.get(c["id"], "pass")
        ax.bar([0, 1], [c["baseline"], c["new"]], color=["#8d99ae", STATUS_COLOR[st]])
        ax.set_xticks([0, 1], [c["baseline_label"][:14], c["new_label"][:14]], fontsize=8)
        g = (c["new"] / c["baseline"] - 1) * 100
        stated = (f" (stated {c['stated_gain_pct']:+.1f}%)" if c.get("stated_gain_pct") is not None else "")
        ax.set_title(f"{c['metric']} [{c['unit']}]\n{g:+.1f}%{stated} {st}", fontsize=9)
        ax.tick_params(axis="y", labelsize=8)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(f"{config}: baseline vs new", fontsize=11)
    fig.text(0.01, 0.005, provenance(reg, config), fontsize=7, va="bottom", ha="left")
    fig.tight_layout(rect=(0, 0.08 + 0.04 / rows, 1, 0.97))
    return fig


def plot_accuracy(reg: dict):
    """GSM8K scores with 2-se error bars per configuration and filter."""
    import matplotlib.pyplot as plt
    acc = [c for c in reg["claims"] if c["kind"] == "accuracy"]
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(acc) + 1.4))
    ys = range(len(acc))
    ax.errorbar([c["value"] for c in acc], list(ys), xerr=[2 * (c["stderr"] or 0) for c in acc],
                fmt="o", ms=4, capsize=3)
    ax.set_yticks(list(ys), [f"{c['config']} {c['metric'].split('/')[1]}" for c in acc], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("exact match (± 2 stderr)")
    srcs = sorted({c["source"] for c in acc})
    fig.text(0.01, 0.005, "source: " + ", ".join(f"data/claims/sources/{s}" for s in srcs)
             + "; lm_eval gsm8k (5-shot, seed 000) and gsm8k_cot (8-shot, seed 002), TP8",
             fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def plot_implications(reg: dict, imp):
    """Per MoE layer: implied saving, roofline floor and measured time (where any)."""
    import matplotlib.pyplot as plt
    import numpy as np
    fig, ax = plt.subplots(figsize=(9, 3.8))
    x = np.arange(len(imp))
    w = 0.27
    ax.bar(x - w, imp["saved_per_layer_us"], w, label="implied saving per MoE layer (TPOT)")
    ax.bar(x, imp["floor_us"], w, label="roofline floor of the layer")
    ax.bar(x + w, imp["measured_us"].fillna(0), w, label="measured (ours, best backend)")
    for xi, v in zip(x, imp["measured_us"]):
        if v != v:  # NaN
            ax.text(xi + w, 0, "n/a", ha="center", va="bottom", fontsize=7, rotation=90)
    ax.set_xticks(x, [f"{r.config}\nT={r.tokens} TP{r.tp}" + (f" EP{r.ep}" if r.ep > 1 else "")
                      for r in imp.itertuples()], fontsize=7)
    ax.set_ylabel("µs per MoE layer per decode step")
    ax.legend(fontsize=7)
    gpus = ", ".join(sorted(set(imp["gpu"])))
    fig.text(0.01, 0.005, "sources: " + ", ".join(sorted(set(imp["source"])))
             + f"\nfloors on {gpus} (assumed GPU of the claims) from moe_lab.cost.roofline; "
             "saving = (mean TPOT baseline - new) / MoE layers\n" + measured_provenance(imp),
             fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    return fig


def measured_provenance(imp) -> str:
    """Where the measured bars come from: each run with its device and commit(s), or that
    no run has the claims' shapes."""
    import json
    from pathlib import Path

    from ..storage.store import data_dir
    m = imp[imp["measured_run"].fillna("").astype(str) != ""]
    if m.empty:
        return "measured: none (no run has the claims' shapes)"
    parts = []
    for run_id, g in m.groupby("measured_run", sort=True):
        commit = ""
        try:
            man = json.loads((Path(data_dir()) / run_id / "manifest.json").read_text())
            commit = str((man.get("environment") or {}).get("git_commit") or "")[:7]
        except (OSError, ValueError):
            pass
        dev = ", ".join(sorted({str(d) for d in g["measured_device"] if d})) or "?"
        parts.append(f"run {run_id} ({dev}{', commit ' + commit if commit else ''}: "
                     f"{', '.join(g['config'])})")
    return "measured: " + "; ".join(parts)


def plot_aiter_vs_vllm(avv):
    """vLLM's Triton MoE time over aiter's per token count (moe_lab.claims.aiter_vs_vllm),
    one panel per shape, dtype and mode, with the claims' implied ratio at their points."""
    import matplotlib.pyplot as plt
    groups = list(avv.groupby(["model", "tp", "ep", "dtype", "mode"], sort=True))
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.4), squeeze=False)
    for ax, ((model, tp, ep, dtype, mode), g) in zip(axes[0], groups):
        for run_id, r in g.groupby("run_id"):
            ax.plot(r["tokens"], r["vllm_over_aiter"], "o-", ms=3, label=f"measured ({run_id})")
        c = g[g["implied_vllm_over_aiter"].notna()]
        if len(c):
            ax.plot(c["tokens"], c["implied_vllm_over_aiter"], "*", ms=11, color="tab:red",
                    label="the claim's implied gain")
        ax.axhline(1.0, color="0.5", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens")
        ax.set_title(f"{model} TP{tp}" + (f" EP{ep}" if ep > 1 else "") + f" {dtype} {mode}",
                     fontsize=8)
    axes[0][0].set_ylabel("vllm time / aiter time (>1: aiter faster)")
    axes[0][0].legend(fontsize=7)
    fig.text(0.01, 0.005, "measured: " + ", ".join(sorted(set(avv["run_id"])))
             + "; implied: the claim's saving per MoE layer taken from vLLM's measured layer",
             fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig
