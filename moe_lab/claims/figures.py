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
    """GSM8K scores with PARITY_SE-se error bars: a panel per few-shot setting (5-shot gsm8k and
    8-shot gsm8k_cot are not one scale), a row per configuration with the pairs a claim
    compares (same model, dtype and engine, with and without aiter) next to each other,
    a colour and marker per filter (flexible-extract, strict-match)."""
    import matplotlib.pyplot as plt

    from .verdicts import PARITY_SE  # the bars' width is the parity check's
    acc = [c for c in reg["claims"] if c["kind"] == "accuracy"]
    cfgs = reg["configs"]
    shots = sorted({cfgs[c["config"]].get("num_fewshot") for c in acc}, key=lambda v: v or 0)
    per = {n: sorted({c["config"] for c in acc if cfgs[c["config"]].get("num_fewshot") == n},
                     key=lambda k: (cfgs[k].get("preset", ""), cfgs[k].get("dtype", ""),
                                    cfgs[k].get("engine", ""), bool(cfgs[k].get("aiter"))))
           for n in shots}
    fig, axes = plt.subplots(len(shots), 1, squeeze=False, figsize=(9, 0.42 * sum(
        len(v) for v in per.values()) + 1.2 * len(shots) + 0.8))
    styles = {"flexible-extract": ("o", "tab:blue"), "strict-match": ("s", "tab:orange")}
    for ax, n in zip(axes[:, 0], shots):
        names = per[n]
        for j, (filt, (marker, colour)) in enumerate(styles.items()):
            pts = [(names.index(c["config"]), c) for c in acc
                   if c["config"] in names and c["metric"].split("/")[1] == filt]
            ax.errorbar([c["value"] for _, c in pts], [i + (j - 0.5) * 0.25 for i, _ in pts],
                        xerr=[PARITY_SE * (c["stderr"] or 0) for _, c in pts], fmt=marker, ms=4,
                        capsize=3, color=colour, label=filt)
        ax.set_yticks(range(len(names)), [
            f"{k} ({'aiter' if cfgs[k].get('aiter') else 'no aiter'})" for k in names], fontsize=7)
        for i in range(1, len(names)):  # a rule between models: the pairs stay together
            if cfgs[names[i]].get("preset") != cfgs[names[i - 1]].get("preset"):
                ax.axhline(i - 0.5, color="0.8", lw=0.8)
        ax.invert_yaxis()
        task = sorted({c["metric"].split("/")[0] for c in acc if c["config"] in names})
        ax.set_title(f"{', '.join(task)}, {n}-shot", fontsize=9)
        ax.set_xlabel(f"exact match (± {PARITY_SE:g} stderr)")
    axes[0, 0].legend(fontsize=7, title="filter", title_fontsize=7)
    srcs = sorted({c["source"] for c in acc})
    fig.text(0.01, 0.005, "source: " + ", ".join(f"data/claims/sources/{s}" for s in srcs)
             + "; lm_eval, " + ", ".join(sorted({f"TP{cfgs[c['config']].get('tp')}" for c in acc})),
             fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def plot_implications(reg: dict, imp):
    """Per MoE layer: the implied saving (the better estimate: ITL-based where TPOT and ITL
    disagree, implications.better_saving), the roofline floor (its GPU on the axis, marked
    assumed where the PR names none) and the measured time (where any; no empty series)."""
    import matplotlib.pyplot as plt
    import numpy as np

    from .implications import better_saving
    fig, ax = plt.subplots(figsize=(9, 4.2))
    x = np.arange(len(imp))
    w = 0.27
    best = better_saving(imp)
    ax.bar(x - w, best["saved_us"], w, color="tab:blue",
           label="implied saving per MoE layer (ITL-based where TPOT and ITL disagree)")
    for xi, v, basis in zip(x, best["saved_us"], best["basis"]):
        if v == v:
            ax.text(xi - w, v, basis, ha="center", va="bottom", fontsize=7)
        else:  # no TPOT or ITL claim for the configuration: no saving to draw
            ax.text(xi - w, 0, "n/a", ha="center", va="bottom", fontsize=7, rotation=90)
    ax.bar(x, imp["floor_us"], w, color="tab:orange", label="roofline floor of the layer "
           "(on the GPU under each bar's label)")
    have = imp["measured_us"].notna()
    if have.any():
        devs = ", ".join(sorted({str(d) for d in imp.loc[have, "measured_device"] if d})) or "?"
        ax.bar(x[have.values] + w, imp.loc[have, "measured_us"], w, color="tab:green",
               label=f"measured on {devs} (ours, best backend)")
    for xi, v in zip(x, imp["measured_us"]):
        if v != v:  # NaN
            ax.text(xi + w, 0, "n/a", ha="center", va="bottom", fontsize=7, rotation=90)
    assumed = {c for c, cfg in reg["configs"].items() if cfg.get("gpu_note")}
    ax.set_xticks(x, [f"{r.config}\nT={r.tokens} TP{r.tp}" + (f" EP{r.ep}" if r.ep > 1 else "")
                      + f"\nfloor: {r.gpu}" + (" (assumed)" if r.config in assumed else "")
                      for r in imp.itertuples()], fontsize=8)
    ax.set_ylabel("µs per MoE layer per decode step")
    # above the panel, not on it: inside, the legend lay over the tallest bars
    ax.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0, 1.01), frameon=False)
    gpus = ", ".join(sorted(set(imp["gpu"])))
    from ..plots import style  # the footer's rule: wrapped to the figure, at most 3 lines
    text = " | ".join(["sources: " + ", ".join(sorted(set(imp["source"]))),
                       f"floors on {gpus} from moe_lab.cost.roofline ((assumed): the PR names "
                       "no GPU); saving = (mean TPOT baseline - new) / MoE layers, or mean ITL's",
                       measured_provenance(imp, short=True)])
    foot = style._summarised(text, int(fig.get_figwidth() * 72 / (7 * 0.62)))
    setattr(fig, style.PROVENANCE, text + " | " + measured_provenance(imp))  # the probe's
    fig.text(0.01, 0.005, foot, fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, ((foot.count("\n") + 1) * 0.125 + 0.15) / fig.get_figheight(), 1, 1))
    return fig


def measured_provenance(imp, short: bool = False) -> str:
    """Where the measured bars come from: each run with its device and commit(s), or that
    no run has the claims' shapes. short: the devices, the runs and the commits as three
    lists (a footer's; the whole one is the figure's probe)."""
    m = imp[imp["measured_run"].fillna("").astype(str) != ""]
    if m.empty:
        return "measured: none (no run has the claims' shapes)"
    parts, commits = [], set()
    for run_id, g in m.groupby("measured_run", sort=True):
        # the commit of the run the time was read from (implications: its manifest), not
        # of a run of the same name in the data folder: a run given as a folder elsewhere
        # showed 'commits unknown', or that other run's commit
        commit = ", ".join(sorted({str(c)[:7] for c in g.get("measured_commit", []) if c}))
        commits |= {commit} if commit else set()
        dev = ", ".join(sorted({str(d) for d in g["measured_device"] if d})) or "?"
        parts.append(f"run {run_id} ({dev}{', commit ' + commit if commit else ''}: "
                     f"{', '.join(g['config'])})")
    if short:
        devs = sorted({str(d) for d in m["measured_device"] if d}) or ["?"]
        return (f"measured on {', '.join(devs)}: runs {', '.join(sorted(set(m['measured_run'])))}"
                f" | commits {', '.join(sorted(commits)) or 'unknown'}")
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
