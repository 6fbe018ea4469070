"""More sections of docs/findings.md (analysis.findings): the FP8 GEMM against its promise,
torch.compile's coverage, the noise between processes, the ceilings, expert parallelism
and AMD's imported table. Numbers computed here from the data; words state none."""
from __future__ import annotations

import pandas as pd

from ..cost import ledger as lg
from .runs import runs_with_phases
from .targets import TARGETS
from ..core.errors import UsageError
from .findings_sections import chosen, md_table, provenance, runs_line, span


def fp8_gemm_section(runs) -> list[str]:
    from . import fp8_gemm
    lruns = chosen(lambda: runs_with_phases(None))
    if not lruns:
        return []
    t = fp8_gemm.gemm_table(lruns)
    if not len(t):
        return []
    used = [r for r in lruns if r.run_id in set(t["fp8_run"]) | set(t["bf16_run"])
            | set(t["sol_run"].dropna())]
    rows = t.assign(run_id=t["fp8_run"], point_id=t["fp8_point_id"])
    v = fp8_gemm.verdict(t)
    return ["## The FP8 GEMM against its promise", "", provenance(used, rows), "",
            "Per FP8 scheme, model and sharding, over the runs with stored phases: the best FP8 "
            "point beside the best bf16 point, the points that meet the promise (the two "
            "`fp8 >= ...x bf16 where bf16's GEMMs are ...-bound` targets), the speedup, the FP8 "
            "GEMMs' share of the vendor FP8 peak (and torch._scaled_grouped_mm's on the same "
            "rows), and what holds the misses back: the GEMMs (`kernel`) or the rest of the "
            "layer (`glue`).", "", *md_table(v)]


def compile_section(runs) -> list[str]:
    from . import compile_tables
    rows, used = [], []
    for r in runs:
        if not r.has("compile"):
            continue
        used.append(r)
        summary, _ = compile_tables.coverage(r)
        res = r.results[r.results["mode"].astype(str).str.startswith("compile:")]
        rows.append(dict(run=f"`{r.run_id}`", coverage=summary,
                         statuses=", ".join(f"{k} {v}" for k, v in
                                            res["status"].value_counts().sort_index().items()),
                         commits=", ".join(r.commits(res))))
    if not used:
        return []
    return ["## torch.compile: what the compile runs cover", "", runs_line(used), "",
            "Per run with compile rows: the planned points with a row (of any status; a "
            "stopped run's remaining points are listed by notebook 02) and the compile rows' "
            "statuses.", "", *md_table(pd.DataFrame(rows))]


def noise_section(runs) -> list[str]:
    from . import noise
    by_id = {r.run_id: r for r in runs}
    out = []
    for dev in sorted({r.device for r in runs}):
        cal = noise.load(dev)
        if cal is None or not cal.pairs:
            continue
        pair_runs = [by_id[x] for p in cal.pairs for x in (p.get("a"), p.get("b")) if x in by_id]
        rows = [dict(mode=m, band=noise.band_text(d["noise"]), pairs=d["pairs"],
                     points=d["points"]) for m, d in cal.modes().items()]
        out += [f"## Noise between processes: {dev}", "", runs_line(pair_runs, "the A/A' pairs"),
                "", "The band `moe-lab compare` judges a change against: per mode, the "
                f"noisiest A/A' pair's {noise.QUANTILE:g} quantile of |ln B/A| (two runs of one commit, the "
                "same sweep, in two processes).", "", *md_table(pd.DataFrame(rows)), ""]
        from . import published as pb
        pub = pb.published_pairs([r for r in runs if r.device == dev])
        tr = pb.ties_by_run(pub) if len(pub) else pd.DataFrame()
        if len(tr):  # another witness: the same launch configuration, minutes apart
            graph = cal.modes().get("graph")  # none: said so (band_text refuses NaN)
            aa = noise.band_text(graph["noise"]) if graph else "(none: no graph A/A' pair)"
            out += ["The same launch configuration timed in two processes of one run (the "
                    "ties of the published-tuning comparison, graph), per run: "
                    + _ties_text(tr) + f"; against the A/A' graph band {aa}. Two "
                    "configurations measured minutes apart in separate processes need that "
                    "margin before one is called faster.", ""]
    return out


def ceilings_section(runs) -> list[str]:
    import json

    from ..core.devices import DEFAULT_CEILINGS_DIR, ceilings_for, device_slug
    rows, dates = [], []
    for dev in sorted({r.device for r in runs}):
        try:
            c = ceilings_for(dev)
        except UsageError:
            continue
        path = DEFAULT_CEILINGS_DIR / f"{device_slug(dev)}.json"
        if c.source != "measured" or not path.is_file():
            continue
        m = json.loads(path.read_text()).get("manifest") or {}
        dates.append(str(m.get("date", ""))[:10])
        rows.append(dict(device=dev, file=f"`data/ceilings/{path.name}`",
                         measured=str(m.get("date", ""))[:10],
                         commit=str(m.get("git_commit", "")), copy_tb_per_s=f"{c.tb_s:.3g}",
                         read_tb_per_s="" if c.tb_s_read is None else f"{c.tb_s_read:.3g}",
                         bf16_tflops=f"{c.tflops_bf16:.4g}",
                         fp8_tflops="" if c.tflops_fp8 is None else f"{c.tflops_fp8:.4g}"))
    if not rows:
        return []
    return ["## Ceilings", "", f"Data: `data/ceilings/` · measured {', '.join(sorted(set(dates)))}",
            "", "The measured ceilings every roof and floor uses (`moe-lab ceilings`): copy and "
            "read bandwidth, the bf16 and FP8 GEMM rates.", "", *md_table(pd.DataFrame(rows))]


def expert_parallel_section(runs) -> list[str]:
    from ..storage.store import open_run
    from . import expert_parallel as ep, targets as tg
    d = chosen(lambda: open_run(None, has="distributed"))
    if d is None:
        return []
    pts = ep.points(d.results)
    rows = [dict(mode=m, points=t["points"], within=t["within"],
                 median_ratio=f"{t['median_ratio']:.3f}", worst_ratio=f"{t['worst_ratio']:.3f}")
            for m, t in ep.prediction_target(pts).items()]
    dev = d.device
    gpu = "NVIDIA" in dev or "AMD" in dev
    lim = tg.by_name("predicted within 5% of measured").limit
    return ["## Expert parallelism", "", runs_line([d], "the newest run with distributed rows"),
            "", f"Device: {dev}" + ("" if gpu else " (host times of CPU processes: a test of "
                                    "the code path, not a GPU result)") + ". Per mode: the "
            f"points whose predicted layer time (slowest rank + collective) is within "
            f"{lim:.0%} of the measured one.", "", *md_table(pd.DataFrame(rows))]


def imported_section(runs) -> list[str]:
    from .fp8 import imported
    out = []
    for r in runs:
        if not imported(r):
            continue
        res = r.results
        by = res.groupby(["device", "status"]).size().unstack("status", fill_value=0)
        when = str(r.manifest.get("imported_at") or "")[:10]
        out += [f"## Imported: {r.run_id}", "",
                f"Runs: `{r.run_id}` (imported {when}) · commits {', '.join(r.commits())}; "
                f"the times are AMD's tuner's", "",
                "Rows per device and status of AMD aiter's own tuned fused-MoE table "
                "(AMD's tuner's times, not moe-lab's). Its `median_us` is the table's two "
                "stages, each kernel timed alone by the tuner, without routing, sorting or "
                "the input's quantisation, on the tuner's own routing: compare it with "
                "moe-lab's graph times only with that in mind. An `incorrect` row is one whose "
                "error the table records above moe-lab's limit (`--max-err`); its time is "
                "kept.", "",
                *md_table(by.reset_index()), ""]
    return out


def _fp8_sentence(row) -> str:
    """One generated sentence per model, sharding and scheme: FP8 against bf16 with vLLM's
    kernel in the set and with the workbook's own kernels only."""
    return (f"- {row.model} {row.sharding} {row.dtype}: FP8 faster than bf16 at "
            f"{row.fp8_faster} of {row.points} token counts ({row.speedup}x; FP8's best: "
            f"{row.fp8_best}); with the workbook's own kernels only, at {row.fp8_faster_own} "
            f"of {row.own_points} ({row.speedup_own}x; {row.fp8_own_best})"
            + (": the verdict depends on the kernel list, not on FP8"
               if (row.fp8_faster > row.points / 2) != (row.fp8_faster_own > row.own_points / 2)
               else ""))


def vllm_section(runs) -> list[str]:
    from . import vllm_compare as vc
    vruns = vc.vllm_runs()
    if not vruns:
        return []
    res, t = vc.compared(vruns)
    if t.empty:
        return []
    shapes = vc.by_shape(t)
    versions = sorted(set(res.loc[res["backend"] == vc.BASE[0], "backend_version"]
                          .dropna().astype(str))) if "backend_version" in res else []
    show = shapes.assign(geomean_ratio=shapes["geomean_ratio"].map("{:.3f}".format),
                         worst_ratio=shapes["worst_ratio"].map("{:.3f}".format),
                         met=shapes["met"].map({True: "yes", False: "no"}))
    now = vc.newest(t)
    slow = now[now["slower"]].assign(ratio=lambda d: d["ratio"].map("{:.3f}".format),
                                 vllm_us=lambda d: d["vllm_us"].map("{:.1f}".format),
                                 best_us=lambda d: d["best_us"].map("{:.1f}".format),
                                 loses_us=lambda d: d["loses_us"].map("{:.1f}".format))
    out = ["## vLLM's fused MoE as shipped against the workbook's own layers", "",
           provenance(vruns, t.assign(point_id=t["vllm_point_id"])), "",
           f"vLLM ({', '.join(versions) or 'version not recorded'}): its Triton `fused_experts` "
           "with its own configuration files (`--config default`), checked against the "
           "reference and timed in the same runs as the workbook's own layers "
           f"({vc.own_text()}). Per shape and scheme: the "
           f"best own layer over vLLM per token count (the newest measurement of each point: a "
           "point measured again after a change is read from its new run, still against the "
           "vLLM row of that run), its geometric mean, the worst point, "
           f"the points slower than the run-to-run band ({vc.BAND:.2f}x), whether the goal "
           f"(no point above the band, geomean at or below {vc.GEOMEAN:.2f}) is met "
           f"({int(shapes['met'].sum())} of {len(shapes)} shapes), and which own layers are "
           "the best at its points (how many each).", "",
           *md_table(show[["model", "sharding", "dtype", "points", "geomean_ratio",
                           "worst_ratio", "worst_tokens", "slower", "met", "best", "run_id"]])]
    if len(slow):
        out += ["", "The slower points, with the phase that loses the most time against "
                "vLLM's (the ledger's phases of both points) and by how much (us):", "",
                *md_table(slow[["model", "sharding", "dtype", "tokens", "vllm_us", "best_us",
                                "best", "ratio", "loses_in", "loses_us", "run_id"]])]
    f8 = vc.fp8_summary(vc.fp8_over_bf16(res))
    if len(f8):
        used = [r for r in vruns if set(r.results["dtype"].astype(str)) & set(f8["dtype"])
                or r.run_id in set(res.loc[res["dtype"] == "bf16", "run_id"])]
        out += ["", "### FP8 against bf16, with vLLM's kernel and without it", "",
                runs_line(used), "", "Per model, sharding and FP8 scheme measured beside bf16 in these runs: the "
                "fastest FP8 layer against the fastest bf16 layer per token count (bf16 us / "
                "FP8 us), once with every kernel and once with the workbook's own kernels "
                "only (vLLM left out on both sides).", "",
                *[_fp8_sentence(r) for r in f8.itertuples(index=False)]]
    return out


def _ties_text(tr: pd.DataFrame) -> str:
    """Per run: its ties, their published/tuned range, the minutes between their rows and
    the machines its invocations name (published.ties_by_run)."""
    return "; ".join(f"`{x.run_id}` {x.ties} ties {x.lo:.3f}-{x.hi:.3f}x, rows up to "
                     f"{x.apart_min:.0f} min apart, machines: {x.machines}"
                     for x in tr.itertuples(index=False))


def _tokens(v) -> str:
    return ", ".join(str(int(t)) for t in sorted(v)) or "none"


def _int_text(v, missing: str = "") -> str:
    """A count as the findings print it (`missing` where it is not recorded)."""
    return missing if pd.isna(v) else f"{int(v)}"


def _hit(v) -> str:
    return _int_text(v, "unknown")


def _two_t_routing(m: pd.DataFrame, inv: pd.DataFrame) -> list[str]:
    """The points slower at T than at 2T (tuned_files.two_t_misses) with the local experts
    the routing hit at T and at 2T, how many of the misses the routing explains, and how
    many of the others come from a search without the neighbour-key pass (`inv`:
    tuned_files.inventory)."""
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


def tuned_files_section(runs) -> list[str]:
    """The required tuned files against the grid (analysis.tuned_files.inventory), then
    per shape the tuned-against-default points measured with the committed files, and
    the tuned layer's % of roof from 256 tokens with the GEMM that holds it back."""
    from . import tuned_files as tf
    from .findings_sections import tune_runs
    from ..core.constants import TUNE_TOKENS
    inv = tf.inventory()
    used = [r for r in tune_runs() if r.run_id in set(inv["run"])]
    per = "; ".join(f"issue {i}: {int(g['holds_grid'].sum())} of {len(g)}"
                    for i, g in inv.groupby("issue"))
    show = inv.assign(keys=[f"{k} of {len(TUNE_TOKENS)}" for k in inv["keys"]],
                      holds_grid=inv["holds_grid"].map({True: "yes", False: "no"}),
                      candidates=inv["candidates"].map(_int_text),
                      near_keys=inv["near_keys"].map(_int_text))
    out = ["## Tuned files against the token grid", "", runs_line(used), "",
           f"Per shape that issues {' and '.join(map(str, sorted(set(inv['issue']))))} ask a tuned file for "
           "(`moe_lab.analysis.tuned_files.REQUIRED`): the file its backend reads, the keys of the token grid "
           f"({len(TUNE_TOKENS)} keys) every stage's file holds, its provenance (the tune run, "
           "its status, candidates timed, when the file was written, the commit), whether "
           "it holds the grid (every key, a complete run behind it) and its search's "
           "neighbour-key pass (`near_keys`; 0: searched before the pass existed): "
           f"{int(inv['holds_grid'].sum())} of {len(inv)} ({per}).", "", *md_table(show)]
    own = ("aiter-triton", "aiter-triton-silu")
    todo = dict(tune=tf.left("tune", backends=own), vllm=tf.left("tune", backends=("vllm",)),
                sweep=tf.left("sweep", backends=own, runs=runs),
                vsweep=tf.left("sweep", backends=("vllm",), runs=runs))
    jobs: dict = {}  # device_vllm.sh's JOBS: dtype:ep:models
    for w in todo["vsweep"]:
        _, m, _, ep, dt = w.split(":")
        jobs.setdefault(f"{dt}:{ep}", []).append(m)
    vjobs = " ".join(f"{k}:{','.join(v)}" for k, v in jobs.items())
    out += ["", "Left for the GPU (`tuned_files.left`: what the device scripts take when no "
            "SHAPES is given, so the same command resumes until nothing is left): searches, "
            f"`device_tune.sh`: {' '.join(todo['tune']) or 'none'}; `device_vllm.sh tune`: "
            f"{' '.join(todo['vllm']) or 'none'}; tuned against default at every key, "
            f"`device_tune.sh sweep`: {' '.join(todo['sweep']) or 'none'}; vLLM with its "
            "tuned file against vLLM as shipped, measured after the file was written: "
            + (f"`TAG=<a new word> JOBS=\"{vjobs}\" bash scripts/device_vllm.sh sweep`."
               if vjobs else "none.")]
    pairs, stale = tf.current_pairs(runs)
    prs = [r for r in runs if r.run_id in set(pairs["run_id"])]
    rows = []
    for (b, m, sh, dt), g in tf.with_two_t(pairs).groupby(["backend", "model", "sharding",
                                                           "dtype"]):
        rows.append(dict(backend=b, model=m, sharding=sh, dtype=dt, points=len(g),
                         tokens=span(g["tokens"], "{:.0f}"),
                         default_over_tuned=span(g["default_over_tuned"]) + "x",
                         slower_than_default=_tokens(g.loc[g["default_over_tuned"] < 1, "tokens"]),
                         slower_than_at_2T=_tokens(g.loc[g["two_t_over_t"] < 1, "tokens"]),
                         runs=", ".join(sorted(set(g["run_id"])))))
    from . import published as pb
    pub = pb.published_pairs(runs)
    ev = tf.shape_pairs(pairs, pub)
    have = set(zip(ev["backend"], ev["model"], ev["sharding"], ev["dtype"]))
    bare = inv[[k not in have for k in zip(inv["backend"], inv["model"], inv["sharding"],
                                            inv["dtype"])]]
    out += ["", "### Tuned against default with the committed files", "",
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
            + ".", "", *md_table(pd.DataFrame(rows))]
    out += _two_t_routing(tf.two_t_misses(pairs), inv)
    pname = next(t.name for t in TARGETS if t.metric == "tuned_over_published")
    if not len(pub):
        out += ["", f"Against published tunings of the same kernel (the target `{pname}`): no "
                "run has timed one yet (`device_tune.sh sweep` with PUBLISHED=.whl/published)."]
    else:
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
        tr = pb.ties_by_run(pub)
        slow = pub[(pub["same_config"] != True) & (pub["value"] < 1)]  # noqa: E712
        lo = dict(zip(tr["run_id"], tr["lo"]))
        inside = int(sum(v >= lo.get(r, 1.0) for v, r in zip(slow["value"], slow["run_id"])))
        out += ["", "### Tuned against published tunings of the same kernel", "",
                provenance([r for r in runs if r.run_id in set(pub["run_id"])], pub), "",
                "Per shape: the tuned file against the tuning vLLM publishes for the same "
                "Triton kernel on this GPU (its shipped H200 file, run as aiter-triton "
                "`--config FILE` in the same run; for `vllm`, vLLM as shipped against vLLM "
                "with moe-lab's file), published / tuned over the points both "
                "timed, the token counts where the tuned file holds the published "
                "configuration itself (the search's own timing of vLLM as shipped chose it: "
                "a tie by construction, left out of the target), and where tuned is the "
                f"slower otherwise (the target `{pname}`). "
                + (f"The ties measure the noise between the two processes that timed them, "
                   f"per run: {_ties_text(tr)}; of the {len(slow)} points where a different "
                   f"tuned configuration is the slower, {inside} lie inside the ties' range "
                   "of their own run." if len(tr) else "No point is a tie by construction."),
                "",
                *md_table(pd.DataFrame(prows))]
    ver = tf.verify_points()
    vname = next(t.name for t in TARGETS if t.metric == "verify_ratio")
    if not len(ver):
        out += ["", f"A second search against the committed winners (`moe-lab tune --verify`, "
                f"the target `{vname}`): no verify run is committed yet."]
    else:
        vrows = ver[["backend", "model", "sharding", "dtype", "tokens", "committed_us",
                     "found_us", "value", "verdict", "run_id"]].rename(
            columns={"value": "committed_over_found"})
        out += ["", "### A second search against the committed winners", "",
                runs_line(tf.verify_runs(ver)), "",
                "Per point a `moe-lab tune --verify` searched again (another candidate order, "
                "twice the survivors and the fine steps): the committed winner timed beside "
                "it, the best the second search found (its fastest correct candidate over the "
                "margin where there is one), committed / found and the verdict (the target: "
                f"`{vname}`).", "", *md_table(vrows.round(3))]
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
    out += ["", f"### The tuned layer's % of roof from {tf.FROM_TOKENS} tokens", "",
            provenance(prs, pairs), "",
            f"Per shape, over the points above from {tf.FROM_TOKENS} tokens: the tuned layer's % of its roof "
            "(median, lowest and where); at the lowest point, the floor that sets the roof "
            "(compute: FLOPs at the measured matrix peak; memory: bytes at the roof bandwidth) "
            "and the other floor as % of it; the bounds from the fewest tokens to the most; "
            "the point nearest the ridge (the other floor the closest); and of its two GEMMs "
            "the one with the most time above its floor over those points (the ledger's over_us, from the runs that stored their "
            "phases) with that time as % of the layer's and, at the lowest point, its floor as "
            f"% of its measured time.{ridge}", "", *md_table(roof)]
    return out


def lines(runs) -> list[str]:
    out = []
    for f in (vllm_section, fp8_gemm_section, compile_section, noise_section, ceilings_section,
              expert_parallel_section, imported_section):
        part = f(runs)
        if part:
            out += [*part, ""]
    return out


__all__ = ["lines", "span", "tuned_files_section"]
