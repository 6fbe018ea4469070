"""The tuned-files section of docs/findings.md (moe_lab.findings), one per GPU device: the
required shapes' files against the token grid (analysis.tuned),
what is left for the device scripts, tuned against default with the committed files, against
published tunings, a second search against the winners, and the tuned layer's % of roof.
Numbers computed here from the data; words state none."""
from __future__ import annotations

import pandas as pd

from ..core.constants import TUNE_TOKENS
from ..analysis import ledger as lg
from ..analysis import tuned as tf
from .more import ties_text
from .sections import head, md_table, provenance, runs_line, span
from ..analysis.targets import TARGETS


def _tokens(v) -> str:
    return ", ".join(str(int(t)) for t in sorted(v)) or "none"


def _int_text(v, missing: str = "") -> str:
    """A count as the findings print it (`missing` where it is not recorded)."""
    return missing if pd.isna(v) else f"{int(v)}"


def _hit(v) -> str:
    return _int_text(v, "unknown")


def _two_t_routing(m: pd.DataFrame, inv: pd.DataFrame) -> list[str]:
    """The points slower at T than at 2T (tuned.two_t_misses) with the local experts
    the routing hit at T and at 2T, how many of the misses the routing explains, and how
    many of the others come from a search without the neighbour-key pass (`inv`:
    tuned.inventory)."""
    if not len(m):
        return ["", "No point is slower at T tokens than at 2T."]
    k, rest = int(m["routing"].sum()), m[~m["routing"]]
    show = pd.DataFrame(dict(
        backend=m["backend"], model=m["model"], sharding=m["sharding"], dtype=m["dtype"],
        tokens=m["tokens"].astype(int), two_t_over_t=[f"{v:.3f}x" for v in m["two_t_over_t"]],
        experts_hit_at_T=m["experts_hit"].map(_hit),
        experts_hit_at_2T=m["experts_hit_2t"].map(_hit),
        routing=m["routing"].map({True: "yes", False: "no"})))
    named = "; ".join(f"{x.backend} {x.model} {x.sharding} {x.dtype} at {int(x.tokens)} "
                      f"({x.two_t_over_t:.3f}x, {_hit(x.experts_hit)} against "
                      f"{_hit(x.experts_hit_2t)})" for x in rest.itertuples(index=False))
    return ["", "The points where tuned is slower at T tokens than at 2T, with the local "
            "experts the benchmark's random routing hit at each (the tuned rows' "
            "`experts_hit`; each expert hit is one more expert's weights through both "
            f"GEMMs). Of the {len(m)} misses, {k} hit more local experts at T than at 2T: "
            "the routed batch gives T more GEMM work than 2T, so the miss is a property "
            "of the routing, not of the tuned configuration. The other "
            f"{len(rest)} hit the same number of experts or fewer"
            + (" (or a count is not recorded)" if rest[["experts_hit", "experts_hit_2t"]]
               .isna().any(axis=None) else "")
            + ", so a tuning could own them: " + (named or "none") + ".", "",
            *md_table(show)] + _near_pass(rest, inv)


def _near_pass(rest: pd.DataFrame, inv: pd.DataFrame) -> list[str]:
    """How many of the misses a tuning could own have a file searched before the
    neighbour-key pass (each key's best timed at the keys beside it): resuming the search
    times just those and picks again."""
    if not len(rest):
        return []
    shape = ["backend", "model", "sharding", "dtype"]
    near = rest.merge(inv[shape + ["near_keys", "run"]], on=shape, how="left")
    before = near[near["near_keys"] == 0]
    return ["", f"Of those {len(rest)}, {len(before)} have a file whose search ran before "
            "the neighbour-key pass (`moe-lab tune` now times each key's best at the keys "
            "beside it, so a key keeps no launch slower there than its neighbour's; the "
            "same search resumed times only those): "
            + (", ".join(sorted(set(before["run"].dropna()))) or "none") + "."]


def tuned_files_section(runs, device: str) -> list[str]:
    """The required tuned files of `device` against the grid (tuned.inventory) and
    the work left on it, then per shape the tuned-against-default points measured with the
    committed files (of `runs`: the device's), against published tunings, a second search,
    and the tuned layer's % of roof from 256 tokens with the GEMM that holds it back."""
    inv = tf.inventory(device=device)
    out = _inventory_lines(inv, device) + _left_lines(runs, device)
    pairs, stale = tf.current_pairs(runs)
    prs = [r for r in runs if r.run_id in set(pairs["run_id"])]
    more, pub = _pairs_lines(runs, pairs, stale, prs, inv, device)
    out += more + _two_t_routing(tf.two_t_misses(pairs), inv)
    out += _published_lines(runs, pub, device)
    out += _verify_lines(device)
    return out + _roof_lines(prs, pairs, device)


def _inventory_lines(inv: pd.DataFrame, device: str) -> list[str]:
    """The inventory's heading, provenance, sentence and table."""
    used = [r for r in tf.tune_runs(device) if r.run_id in set(inv["run"])]
    per = "; ".join(f"issue {i}: {int(g['holds_grid'].sum())} of {len(g)}"
                    for i, g in inv.groupby("issue"))
    show = inv.drop(columns=["device"]).assign(
        keys=[f"{k} of {len(TUNE_TOKENS)}" for k in inv["keys"]],
        holds_grid=inv["holds_grid"].map({True: "yes", False: "no"}),
        candidates=inv["candidates"].map(_int_text), near_keys=inv["near_keys"].map(_int_text))
    return [head("Tuned files against the token grid", device), "", runs_line(used), "",
            f"Per shape that {_issues(inv['issue'])} ask{'s' if inv['issue'].nunique() == 1 else ''} a "
            f"tuned file for on this device (`moe_lab.analysis.tuned."
            f"{tf.required_name(device)}`): the file its backend reads, the keys of the token "
            f"grid ({len(TUNE_TOKENS)} keys) every stage's file holds, its provenance (the tune "
            "run, its status, candidates timed, when the file was written, the commit), "
            "whether it holds the grid (every key, a complete run behind it) and its search's "
            "neighbour-key pass (`near_keys`; 0: searched before the pass existed): "
            f"{int(inv['holds_grid'].sum())} of {len(inv)} ({per}).", "", *md_table(show)]


def _left_lines(runs, device: str) -> list[str]:
    """What the device scripts take on `device` when no SHAPES is given (tuned.left)."""
    own = ("aiter-triton", "aiter-triton-silu")
    todo = dict(tune=tf.left("tune", device, backends=own),
                vllm=tf.left("tune", device, backends=("vllm",)),
                sweep=tf.left("sweep", device, backends=own, runs=runs),
                vsweep=tf.left("sweep", device, backends=("vllm",), runs=runs))
    jobs: dict = {}  # device_vllm.sh's JOBS: dtype:ep:models
    for w in todo["vsweep"]:
        _, m, _, ep, dt = w.split(":")
        jobs.setdefault(f"{dt}:{ep}", []).append(m)
    vjobs = " ".join(f"{k}:{','.join(v)}" for k, v in jobs.items())
    return ["", f"Left for the {device} (`tuned.left`: what the device scripts take on "
            "it when no SHAPES is given, so the same command resumes until nothing is left): "
            f"searches, `device_tune.sh`: {' '.join(todo['tune']) or 'none'}; `device_vllm.sh "
            f"tune`: {' '.join(todo['vllm']) or 'none'}; tuned against default at every key, "
            f"`device_tune.sh sweep`: {' '.join(todo['sweep']) or 'none'}; vLLM with its "
            "tuned file against vLLM as shipped, measured after the file was written: "
            + (f"`TAG=<a new word> JOBS=\"{vjobs}\" bash scripts/device_vllm.sh sweep`."
               if vjobs else "none.")]


def _pairs_lines(runs, pairs: pd.DataFrame, stale: int, prs: list, inv: pd.DataFrame,
                 device: str) -> tuple[list[str], pd.DataFrame]:
    """(the tuned-against-default table of the committed files, with the required shapes
    no point covers yet; the published pairs of `runs`, read for it)."""
    rows = []
    for (b, m, sh, dt), g in tf.with_two_t(pairs).groupby(["backend", "model", "sharding",
                                                           "dtype"]):
        rows.append(dict(backend=b, model=m, sharding=sh, dtype=dt, points=len(g),
                         tokens=span(g["tokens"], "{:.0f}"),
                         default_over_tuned=span(g["default_over_tuned"]) + "x",
                         slower_than_default=_tokens(g.loc[g["default_over_tuned"] < 1, "tokens"]),
                         slower_than_at_2T=_tokens(g.loc[g["two_t_over_t"] < 1, "tokens"]),
                         runs=", ".join(sorted(set(g["run_id"])))))
    pub = tf.published_pairs(runs)
    ev = tf.shape_pairs(pairs, pub)
    have = set(zip(ev["backend"], ev["model"], ev["sharding"], ev["dtype"]))
    bare = inv[[k not in have for k in zip(inv["backend"], inv["model"], inv["sharding"],
                                            inv["dtype"])]]
    return ["", head("Tuned against default with the committed files", device, 3), "",
            provenance(prs, pairs), "",
            "Per shape and tunable backend: the points whose newest run has default and tuned "
            "rows ok in graph mode with the tuned row measured after its committed file was "
            "written, default / tuned over them, and the token counts where tuned is slower "
            "than default or slower than at twice the tokens (the two tuning targets above). "
            f"Tuned points measured only before their file was written, left out: {stale}. "
            "Required shapes with no such point yet (vllm's: against vLLM as shipped, here "
            "where vLLM ships no file for the shape, else under published tunings below): "
            + (", ".join(f"{b} {m} {sh} {dt}" for b, m, sh, dt in zip(
                bare["backend"], bare["model"], bare["sharding"], bare["dtype"])) or "none")
            + ".", "", *md_table(pd.DataFrame(rows))], pub


def _published_lines(runs, pub: pd.DataFrame, device: str) -> list[str]:
    """The tuned files against the tunings vLLM publishes for the device (published_pairs)."""
    pname = next(t.name for t in TARGETS if t.metric == "tuned_over_published")
    if not len(pub):
        return ["", f"Against published tunings of the same kernel (the target `{pname}`): no "
                "run has timed one yet (`device_tune.sh sweep` with PUBLISHED=.whl/published)."]
    prows = []
    for (b, m, sh, dt, f), g in pub.groupby(["backend", "model", "sharding", "dtype",
                                             "published"]):
        tie = g["same_config"] == True  # noqa: E712 - None: not known
        prows.append(dict(backend=b, model=m, sharding=sh, dtype=dt, published=f,
                          points=len(g), tokens=span(g["tokens"], "{:.0f}"),
                          published_over_tuned=span(g["value"]) + "x",
                          same_config_at=_tokens(g.loc[tie, "tokens"]),
                          tuned_slower_at=_tokens(g.loc[~tie & (g["value"] < 1), "tokens"]),
                          runs=", ".join(sorted(set(g["run_id"])))))
    tr = tf.ties_by_run(pub)
    slow = pub[(pub["same_config"] != True) & (pub["value"] < 1)]  # noqa: E712
    lo = dict(zip(tr["run_id"], tr["lo"]))
    inside = int(sum(v >= lo.get(r, 1.0) for v, r in zip(slow["value"], slow["run_id"])))
    return ["", head("Tuned against published tunings of the same kernel", device, 3), "",
            provenance([r for r in runs if r.run_id in set(pub["run_id"])], pub), "",
            "Per shape: the tuned file against the tuning vLLM publishes for the same "
            "Triton kernel on this GPU (the file vLLM ships for it, run as aiter-triton "
            "`--config FILE` in the same run; for `vllm`, vLLM as shipped against vLLM "
            "with moe-lab's file), published / tuned over the points both "
            "timed, the token counts where the tuned file holds the published "
            "configuration itself (the search's own timing of vLLM as shipped chose it: "
            "a tie by construction, left out of the target), and where tuned is the "
            f"slower otherwise (the target `{pname}`). "
            + (f"The ties measure the noise between the two processes that timed them, "
               f"per run: {ties_text(tr)}; of the {len(slow)} points where a different "
               f"tuned configuration is the slower, {inside} lie inside the ties' range "
               "of their own run." if len(tr) else "No point is a tie by construction."),
            "", *md_table(pd.DataFrame(prows))]


def _verify_lines(device: str) -> list[str]:
    """The committed winners against a second search on `device` (verify_points)."""
    ver = tf.verify_points(device=device)
    vname = next(t.name for t in TARGETS if t.metric == "verify_ratio")
    if not len(ver):
        return ["", f"A second search against the committed winners (`moe-lab tune --verify`, "
                f"the target `{vname}`): no verify run is committed yet."]
    vrows = ver[["backend", "model", "sharding", "dtype", "tokens", "committed_us",
                 "found_us", "value", "verdict", "run_id"]].rename(
        columns={"value": "committed_over_found"})
    return ["", head("A second search against the committed winners", device, 3), "",
            runs_line(tf.verify_runs(ver)), "",
            "Per point a `moe-lab tune --verify` searched again (another candidate order, "
            "twice the survivors and the fine steps): the committed winner timed beside "
            "it, the best the second search found (its fastest correct candidate over the "
            "margin where there is one), committed / found and the verdict (the target: "
            f"`{vname}`).", "", *md_table(vrows.round(3))]


def _roof_lines(prs: list, pairs: pd.DataFrame, device: str) -> list[str]:
    """The tuned layer's % of roof from FROM_TOKENS tokens per shape (tuned.roof_from),
    with the GEMM that holds it back (the ledger of the runs that stored their phases)."""
    phased = [r for r in prs if r.phases is not None and len(r.phases)]  # the ledger's rule
    led = lg.of_runs(phased)[1] if phased else None
    roof = tf.roof_from(pairs, led, missing="no phases stored")
    ridge = ""
    if len(roof):
        cross = roof[roof["bounds"] == "memory to compute"]
        at = cross[cross["nearest_ridge_at"] == cross["lowest_at"]]
        ridge = (f" Of the {_int_text(len(cross))} shapes whose points cross the ridge "
                 "(memory-bound at their fewest tokens, compute-bound at their most), "
                 f"{_int_text(len(at))} are lowest at the point nearest it, where the two "
                 "floors are closest: the roof there asks the kernel to keep the tensor cores "
                 "and HBM both busy at once." if len(cross) else "")
        roof = roof.assign(**{c: roof[c].map(lambda v: "" if pd.isna(v) else f"{v:.1f}")
                              for c in ("median_pct_of_roof", "lowest_pct_of_roof",
                                        "other_floor_pct", "gemm_over_us", "share_of_layer",
                                        "gemm_pct_of_floor_at_lowest")})
    return ["", head(f"The tuned layer's % of roof from {tf.FROM_TOKENS} tokens", device, 3), "",
            provenance(prs, pairs), "",
            f"Per shape, over the points above from {tf.FROM_TOKENS} tokens: the tuned layer's % of its roof "
            "(median, lowest and where); at the lowest point, the floor that sets the roof "
            "(compute: FLOPs at the measured matrix peak; memory: bytes at the roof bandwidth) "
            "and the other floor as % of it; the bounds from the fewest tokens to the most; "
            "the point nearest the ridge (the other floor the closest); and of its two GEMMs "
            "the one with the most time above its floor over those points (the ledger's over_us, from the runs that stored their "
            "phases) with that time as % of the layer's and, at the lowest point, its floor as "
            f"% of its measured time.{ridge}", "", *md_table(roof)]


__all__ = ["span", "tuned_files_section"]


def _issues(numbers) -> str:
    """'issue 63' or 'issues 38 and 41'."""
    n = sorted(set(map(int, numbers)))
    return ("issue " if len(n) == 1 else "issues ") + " and ".join(map(str, n))
