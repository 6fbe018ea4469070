"""More sections of docs/findings.md (moe_lab.findings): vLLM as shipped,
the FP8 GEMM against its promise, torch.compile's coverage, the noise between processes,
the ceilings, expert parallelism (each a device's: `(runs, device)`, sections'
rule) and AMD's imported table (no device of moe-lab's). Numbers computed here from the
data; words state none."""
from __future__ import annotations

import pandas as pd

from ..analysis import tuned as tf
from ..analysis.runs import choose, runs_with_phases
from ..core.errors import UsageError
from .sections import chosen, head, md_table, provenance, runs_line


def fp8_gemm_section(runs, device: str | None = None) -> list[str]:
    from ..analysis import fp8_gemm
    lruns = chosen(lambda: runs_with_phases(None, device))
    if not lruns:
        return []
    t = fp8_gemm.gemm_table(lruns)
    if not len(t):
        return []
    used = [r for r in lruns if r.run_id in set(t["fp8_run"]) | set(t["bf16_run"])
            | set(t["sol_run"].dropna())]
    rows = t.assign(run_id=t["fp8_run"], point_id=t["fp8_point_id"])
    v = fp8_gemm.verdict(t)
    return [head("The FP8 GEMM against its promise", device), "", provenance(used, rows), "",
            "Per FP8 scheme, model and sharding, over the runs with stored phases: the best FP8 "
            "point beside the best bf16 point, the points that meet the promise (the two "
            "`fp8 >= ...x bf16 where bf16's GEMMs are ...-bound` targets), the speedup, the FP8 "
            "GEMMs' share of the vendor FP8 peak (and torch._scaled_grouped_mm's on the same "
            "rows), and what holds the misses back: the GEMMs (`kernel`) or the rest of the "
            "layer (`glue`).", "", *md_table(v)]


def compile_section(runs, device: str | None = None) -> list[str]:
    from ..analysis import compile_tables
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
    return [head("torch.compile: what the compile runs cover", device), "", runs_line(used), "",
            "Per run with compile rows: the planned points with a row (of any status; a "
            "stopped run's remaining points are listed by notebook 02) and the compile rows' "
            "statuses.", "", *md_table(pd.DataFrame(rows))]


def noise_section(runs, device: str | None = None) -> list[str]:
    from ..analysis import noise
    by_id = {r.run_id: r for r in runs}
    out = []
    for dev in [device] if device else sorted({r.device for r in runs}):
        cal = noise.load(dev)
        if cal is None or not cal.pairs:
            continue
        pair_runs = [by_id[x] for p in cal.pairs for x in (p.get("a"), p.get("b")) if x in by_id]
        from ..analysis.compare import recalibrated
        fresh = [recalibrated(p) for p in cal.pairs]  # the bands from the runs, not the file
        now = noise.Calibration(dev, [f or p for f, p in zip(fresh, cal.pairs)])
        rows = [dict(mode=m, band=noise.band_text(d["noise"]), pairs=d["pairs"],
                     points=d["points"]) for m, d in now.modes().items()]
        agree = []
        for p, f in zip(cal.pairs, fresh):
            n, off = noise.disagreements(p, f)
            agree.append(f"`{p.get('a')}`/`{p.get('b')}`: " + (
                "its runs are not here (the file's values stated)" if f is None else
                f"{n - len(off)} of {n} points as the file has them" + (
                    f"; differ: {', '.join(off[:3])}{' ...' if len(off) > 3 else ''}"
                    if off else "")))
        out += [f"## Noise between processes: {dev}", "", runs_line(pair_runs, "the A/A' pairs"),
                "", "The band `moe-lab compare` judges a change against: per mode, the "
                f"noisiest A/A' pair's {noise.QUANTILE:g} quantile of |ln B/A| (two runs of one commit, the "
                "same sweep, in two processes), computed here from the pairs' runs; against "
                f"the calibration file (`{cal.path.name if cal.path else noise.slug(dev) + '.json'}`"
                "), per pair: " + "; ".join(agree) + ".", "", *md_table(pd.DataFrame(rows)), ""]
        pub = tf.published_pairs([r for r in runs if r.device == dev])
        tr = tf.ties_by_run(pub) if len(pub) else pd.DataFrame()
        if len(tr):  # another witness: the same launch configuration, minutes apart
            graph = cal.modes().get("graph")  # none: said so (band_text refuses NaN)
            aa = noise.band_text(graph["noise"]) if graph else "(none: no graph A/A' pair)"
            out += ["The same launch configuration timed in two processes of one run (the "
                    "ties of the published-tuning comparison, graph), per run: "
                    + ties_text(tr) + f"; against the A/A' graph band {aa}. Two "
                    "configurations measured minutes apart in separate processes need that "
                    "margin before one is called faster.", ""]
    return out


def ceilings_section(runs, device: str | None = None) -> list[str]:
    import json

    from ..core.devices import DEFAULT_CEILINGS_DIR, ceilings_for, device_slug
    rows, dates = [], []
    for dev in [device] if device else sorted({r.device for r in runs}):
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
    return [head("Ceilings", device), "",
            f"Data: `data/ceilings/` · measured {', '.join(sorted(set(dates)))}",
            "", "The measured ceilings every roof and floor uses (`moe-lab ceilings`): copy and "
            "read bandwidth, the bf16 and FP8 GEMM rates.", "", *md_table(pd.DataFrame(rows))]


def expert_parallel_section(runs, device: str | None = None) -> list[str]:
    from ..analysis import expert_parallel as ep, targets as tg
    d = chosen(lambda: choose("distributed", device=device).run)
    if d is None:
        return []
    pts = ep.points(d.results)
    rows = [dict(mode=m, points=t["points"], within=t["within"],
                 median_ratio=f"{t['median_ratio']:.3f}", worst_ratio=f"{t['worst_ratio']:.3f}")
            for m, t in ep.prediction_target(pts).items()]
    dev = d.device
    gpu = "NVIDIA" in dev or "AMD" in dev
    lim = tg.by_name("predicted within 5% of measured").limit
    return [head("Expert parallelism", device), "",
            runs_line([d], "the newest run with distributed rows"),
            "", f"Device: {dev}" + ("" if gpu else " (host times of CPU processes: a test of "
                                    "the code path, not a GPU result)") + ". Per mode: the "
            f"points whose predicted layer time (slowest rank + collective) is within "
            f"{lim:.0%} of the measured one.", "", *md_table(pd.DataFrame(rows))]


def imported_section(runs) -> list[str]:
    """Per table imported from AMD's tuner (no device of moe-lab's: once, whatever the
    devices): its rows per device and status."""
    from ..analysis.fp8 import imported
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


def vllm_section(runs, device: str | None = None) -> list[str]:
    """vLLM as shipped against the workbook's own layers, on `device` (its vLLM runs; None:
    the rule's device), and FP8 against bf16 in the same runs."""
    from ..analysis import targets as tg, vllm_compare as vc
    vruns = vc.vllm_runs(device=device)
    if not vruns:
        return []
    res, tables = vc.readings(vruns)  # with vLLM's kernel on moe-lab's files, and without
    t = tables[tg.WITH_PEERS]
    if t.empty:
        return []
    shapes = vc.by_shape_readings(tables)
    versions = sorted(set(res.loc[res["backend"] == vc.BASE[0], "backend_version"]
                          .dropna().astype(str))) if "backend_version" in res else []
    show = shapes.assign(geomean_ratio=shapes["geomean_ratio"].map("{:.3f}".format),
                         worst_ratio=shapes["worst_ratio"].map("{:.3f}".format),
                         met=shapes["met"].map({True: "yes", False: "no"}),
                         geomean_ratio_own_only=shapes["geomean_ratio_own_only"].map(
                             lambda v: "" if v != v else f"{v:.3f}"),
                         met_own_only=shapes["met_own_only"].map(
                             {True: "yes", False: "no"}).fillna(""))
    both = vc.readings_targets(tables).set_index(["target", "reading"])
    band = both.loc[(vc.BAND_TARGET, tg.OWN_KERNELS)]  # the per-point target, own kernels
    dep = vc.by_shape(vc.best_over_vllm(res, base=vc.DEPLOYED))
    now = vc.newest(t)
    slow = now[now["slower"]].assign(ratio=lambda d: d["ratio"].map("{:.3f}".format),
                                 vllm_us=lambda d: d["vllm_us"].map("{:.1f}".format),
                                 best_us=lambda d: d["best_us"].map("{:.1f}".format),
                                 loses_us=lambda d: d["loses_us"].map("{:.1f}".format))
    out = [head("vLLM's fused MoE as shipped against the workbook's own layers", device), "",
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
           "the best at its points (how many each). Both readings: the own layers include "
           "vLLM's kernel with moe-lab's tuned files; with the workbook's own kernels alone "
           "(`_own_only`: vLLM's kernel left out) the points within the band are "
           f"{band['met']} of {band['points']} and the goal is met at "
           f"{int(shapes['met_own_only'].fillna(False).astype(bool).sum())} of {len(shapes)} "
           "shapes.", "",
           *md_table(show[["model", "sharding", "dtype", "points", "geomean_ratio",
                           "worst_ratio", "worst_tokens", "slower", "met",
                           "geomean_ratio_own_only", "slower_own_only", "met_own_only",
                           "best", "run_id"]]), "",
           "Issue 41's two targets in both readings, side by side (their one evaluation, "
           f"`moe_lab.analysis.targets`): `{tg.WITH_PEERS}` counts vLLM's kernel on "
           f"moe-lab's tuned files among the own layers, `{tg.OWN_KERNELS}` leaves it out.",
           "", *md_table(both.reset_index()[["target", "reading", "points", "met", "missed",
                                             "worst_by", "worst_at", "median"]]), "",
           ("Against vLLM as deployed (`vllm-deployed`: the experts class vLLM's own oracle "
            "picks on this GPU) at the points it was measured, per shape: " + "; ".join(
                f"{r.model} {r.sharding} {r.dtype} geomean {r.geomean_ratio:.3f} over "
                f"{r.points} points, {r.slower} slower" for r in dep.itertuples(index=False))
            + "." if len(dep) else
            "vLLM as deployed (`vllm-deployed`, the experts class vLLM's own oracle picks on "
            "this GPU) is not measured on this device yet: the comparison above is against "
            "vLLM's Triton path, which vLLM deploys for bf16 and for block FP8 under TP on "
            "Hopper, and not for per-channel FP8 or block FP8 under EP.")]
    if len(slow):
        out += ["", "The slower points, with the phase that loses the most time against "
                "vLLM's (the ledger's phases of both points) and by how much (us):", "",
                *md_table(slow[["model", "sharding", "dtype", "tokens", "vllm_us", "best_us",
                                "best", "ratio", "loses_in", "loses_us", "run_id"]])]
    f8 = vc.fp8_summary(vc.fp8_over_bf16(res))
    if len(f8):
        used = [r for r in vruns if set(r.results["dtype"].astype(str)) & set(f8["dtype"])
                or r.run_id in set(res.loc[res["dtype"] == "bf16", "run_id"])]
        out += ["", head("FP8 against bf16, with vLLM's kernel and without it", device, 3), "",
                runs_line(used), "", "Per model, sharding and FP8 scheme measured beside bf16 in these runs: the "
                "fastest FP8 layer against the fastest bf16 layer per token count (bf16 us / "
                "FP8 us), once with every kernel and once with the workbook's own kernels "
                "only (vLLM left out on both sides).", "",
                *[_fp8_sentence(r) for r in f8.itertuples(index=False)]]
    return out + _unread_lines(res, vruns, device)


def fastest_section(runs, device: str | None = None) -> list[str]:
    """The fastest path per point over every kernel the vLLM comparison's runs measured
    (analysis.fastest), on `device`: per shape, which kernels are the fastest and how far
    they are from the roof and the dtype's peak; per point, the fastest against vLLM's
    Triton path as shipped and against the class vLLM deploys (`vllm-deployed`)."""
    from ..analysis import fastest as fa, vllm_compare as vc
    vruns = vc.vllm_runs(device=device)
    if not vruns:
        return []
    res, _ = vc.compared(vruns)
    t = fa.fastest(res)
    if t.empty:
        return []
    now = fa.newest(t)
    shapes = fa.by_shape(t)
    deployed = int(now["deployed_us"].notna().sum())
    fmt = {"fastest_us": "{:.1f}", "pct_of_roof": "{:.1f}", "pct_of_peak": "{:.1f}",
           "over_vllm": "{:.3f}", "over_deployed": "{:.3f}"}
    show = now.assign(**{c: now[c].map(lambda v, f=f: "" if v != v else f.format(v))
                         for c, f in fmt.items()})
    used = [r for r in vruns if r.run_id in set(now["run_id"])]
    return [head("The fastest path per point, over every kernel measured", device), "",
            runs_line(used), "",
            f"Every correct, timed row of the default glue in these runs, per point (the newest "
            f"measurement of each): how many kernel paths were timed there, the fastest, its % "
            f"of the roof and of the measured GEMM peak of its dtype, and the fastest over "
            f"vLLM's Triton path as shipped (`vllm default`) and over the class vLLM's oracle "
            f"deploys (`vllm-deployed`, measured at {deployed} of {len(now)} points here). The "
            f"fastest is a kernel outside the workbook's own layers at "
            f"{int(shapes['not_own'].sum())} of {int(shapes['points'].sum())} points; the "
            f"median % of peak of the fastest at {fa.PREFILL}+ tokens, per shape: "
            + ", ".join(f"{r.model} {r.sharding} {r.dtype} {r.median_pct_of_peak_prefill:.1f}%"
                        for r in shapes.itertuples(index=False)) + ".", "",
            *md_table(shapes[["model", "sharding", "dtype", "points", "fastest", "not_own"]]),
            "", *md_table(show[["model", "sharding", "dtype", "tokens", "paths", "fastest",
                                "fastest_us", "pct_of_roof", "pct_of_peak", "over_vllm",
                                "over_deployed", "run_id"]])]


def _unread_lines(res: pd.DataFrame, vruns, device) -> list[str]:
    """vLLM's own files for this GPU under a shorter form of its name, which its lookup
    never reads here (analysis.vllm_files), against vLLM as shipped in the same runs."""
    from ..analysis import vllm_files as vf
    t = vf.unread(res)
    if t.empty:
        return []
    s = vf.unread_summary(t)
    used = [r for r in vruns if r.run_id in set(t["run_id"])]
    show = s.assign(**{c: s[c].map("{:.3f}".format) for c in ("min", "max", "geomean")})
    return ["", head("vLLM's own tunings that its lookup never reads on this GPU", device, 3),
            "", runs_line(used), "",
            f"vLLM ships {s['unread_file'].nunique()} file(s) for these shapes under a shorter "
            "form of this GPU's name; its lookup asks for the full name "
            f"(`device_name={vf.file_device_name(str(t['device'].iloc[0]))}`); what vLLM as "
            "shipped read at these points (its rows' `config_file`): "
            f"{', '.join(sorted(set(t['shipped_config_file']) - {''})) or 'not recorded'}. "
            "Each file timed with vLLM's kernel "
            "(`--config FILE`) beside vLLM as shipped, per point in one run: as shipped over "
            f"with its file (> 1: what the missed name costs), slower at "
            f"{int(s['slower'].sum())} of {int(s['points'].sum())} points.", "",
            *md_table(show[["unread_file", "model", "sharding", "dtype", "points", "min",
                            "max", "geomean", "slower"]])]


def ties_text(tr: pd.DataFrame) -> str:
    """Per run: its ties, their published/tuned range, the minutes between their rows and
    the machines its invocations name (tuned.ties_by_run)."""
    return "; ".join(f"`{x.run_id}` {x.ties} ties {x.lo:.3f}-{x.hi:.3f}x, rows up to "
                     f"{x.apart_min:.0f} min apart, machines: {x.machines}"
                     for x in tr.itertuples(index=False))
