"""Where the wall time of one eager call goes, read from a profiled call's Chrome trace.

    split_trace(path)            -> dict: host_us, gap_us, kernel_us, wall_us ... (one call)
    split_events(events)         -> DataFrame: the same per profiled call
    run_split(run)               -> DataFrame: every trace of a run, against its eager rows
    check_split(wall_us, eager)  -> (ok, why): does the split add up to the timed eager call

(Profiling one point here and splitting it is measuring: moe_lab.measuring.eager_split.)

One call's window starts where its `moe_lab.forward` range opens on the host and ends when
the later of two things happens: the host returns from the function (where the
synchronize that closes the range begins) or the device finishes the call's last kernel.
That is what the eager timer measures (events around a call issued to an idle device).
The window is cut into three parts that add up to it exactly:

* `kernel_us`: the union of the device's kernel, memcpy and memset intervals in the
  window (overlapping streams counted once);
* `gap_us`: launch gaps, the device idle between the call's first kernel starting and its
  last kernel ending, waiting for the host to launch the next one;
* `host_us`: Python and dispatch on the host not overlapped by any device work: from the
  call's start to its first kernel, and from its last kernel to the host's return.

`launch_api_us` (host time inside cuda*/hip*/cu* launch calls) and the counts are given
beside them. On a CPU there is no device timeline: the aten ops are the "kernels"
(`kernel_us` is the union of the ops recorded inside the call), `host_us` is the Python
between them and `gap_us` is 0 (`device_timeline` False says so).

The first profiled call of a trace carries the profiler's start-up (buffer requests) and
is left out when there are more; a point's split is the mean over the calls kept (means
of the parts add up to the mean window). The check compares that window with the eager
median the sweep timed: within CHECK_TOL it is `ok`, else the point says why (the
profiler's cost on the host, eager's host noise, no eager row).
"""
from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import pandas as pd

from ..core.errors import CorruptFile, UsageError
from ..storage.store import open_run
from ..storage.traces import RANGE_NAME, config_tag, parse_trace_name
from ..storage.vocabulary import PARTS
from ..storage.checked import DICT, FILE, LISTED, RUN, TEXT, frame, takes

CHECK_TOL = 0.10
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_API_CATS = ("cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver")
LAUNCH = re.compile(r"LaunchKernel|LaunchCooperativeKernel|ModuleLaunchKernel|GraphLaunch",
                    re.IGNORECASE)
DEVICE_SYNC = re.compile(r"^(cuda|hip)DeviceSynchronize$")
ANY_SYNC = re.compile(r"Synchronize$")
COLUMNS = ("call", "wall_us", *PARTS, "launch_api_us", "n_kernels", "n_ops", "device_timeline")


def _union_us(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of [start, end) intervals clipped to [lo, hi]."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in intervals):
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def _span(e: dict) -> tuple[float, float]:
    return float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))


@takes(events=LISTED, range_name=TEXT)
def split_events(events: list[dict], range_name: str = RANGE_NAME) -> pd.DataFrame:
    """One row per profiled call (a host `range_name` range) of a Chrome trace's events:
    COLUMNS, the parts adding up to wall_us (see the module doc)."""
    xs = [e for e in events if e.get("ph") == "X" and "ts" in e]
    calls = sorted((_span(e) for e in xs if e.get("name") == range_name
                    and e.get("cat") in ("user_annotation", "cpu_op")), key=lambda s: s[0])
    dev = sorted(_span(e) for e in xs if e.get("cat") in DEVICE_CATS)
    api = [(e["name"], *_span(e)) for e in xs if e.get("cat") in HOST_API_CATS]
    ops = [_span(e) for e in xs if e.get("cat") == "cpu_op" and e.get("name") != range_name]
    rows = []
    for i, (a, b) in enumerate(calls):
        mine = [(s, e) for s, e in dev if a <= s <= b]
        syncs = [(n, s) for n, s, _ in api if a <= s <= b and ANY_SYNC.search(n)]
        dsync = [s for n, s in syncs if DEVICE_SYNC.match(n)] or [s for _, s in syncs]
        host_end = max(dsync) if dsync else b
        my_ops = [(s, e) for s, e in ops if a <= s and e <= host_end]
        launch_us = sum(e - s for n, s, e in api if a <= s <= host_end and LAUNCH.search(n))
        if mine:
            first, last = mine[0][0], max(e for _, e in mine)
            end = max(host_end, last)
            kern = _union_us(mine, a, end)
            gap = _union_us([(first, last)], a, end) - _union_us(mine, first, last)
            host = (end - a) - kern - gap
        else:  # no device timeline (CPU): the ops are the work, the rest is Python
            end = host_end
            kern, gap = _union_us(my_ops, a, end), 0.0
            host = (end - a) - kern
        rows.append(dict(call=i, wall_us=end - a, host_us=host, gap_us=gap, kernel_us=kern,
                         launch_api_us=launch_us, n_kernels=len(mine), n_ops=len(my_ops),
                         device_timeline=bool(mine)))
    return pd.DataFrame(rows, columns=list(COLUMNS))


@takes(path=FILE)
def read_trace(path) -> list[dict]:
    """The events of a Chrome trace (.json or .json.gz); CorruptFile if unreadable."""
    try:
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rt") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise UsageError(f"path {path}: no trace file") from None
    except (OSError, ValueError, EOFError) as exc:
        raise CorruptFile(path, exc) from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise CorruptFile(path, "no traceEvents list")
    return events


@takes(per_call=frame("wall_us", "device_timeline"))
def summarize_calls(per_call: pd.DataFrame) -> dict:
    """The mean split over the calls kept (the first one left out when there are more)."""
    if per_call.empty:
        return dict({c: math.nan for c in COLUMNS if c != "call"}, calls=0)
    kept = per_call.iloc[1:] if len(per_call) > 1 else per_call
    out = {c: float(kept[c].mean()) for c in ("wall_us", *PARTS, "launch_api_us",
                                              "n_kernels", "n_ops")}
    out.update(device_timeline=bool(kept["device_timeline"].all()), calls=len(kept))
    return out


@takes(path=FILE, range_name=TEXT)
def split_trace(path, range_name: str = RANGE_NAME) -> dict:
    """The split of one call (summarize_calls) from a trace file."""
    return summarize_calls(split_events(read_trace(path), range_name))


@takes(eager=DICT | None)
def check_split(wall_us: float, eager: dict | None, n_ops: float = math.nan,
                tol: float = CHECK_TOL, profiled_us: float = math.nan,
                cpu: bool = False) -> tuple[bool, str]:
    """Does the profiled call's window (= the parts' sum) match the timed eager median
    within tol? (ok, reason when not). `eager`: the eager row (median_us, p10_us, p90_us,
    noisy); `profiled_us`: the same call timed eagerly under the profiler, when known
    (split_point), which measures the profiler's own cost; `cpu`: no device timeline."""
    if not eager or not (eager.get("median_us") or 0) > 0:
        return False, "no eager time measured for this point: nothing to check the sum against"
    med = float(eager["median_us"])
    r = wall_us / med
    if abs(r - 1) <= tol:
        return True, ""
    spread = ""
    p10, p90 = eager.get("p10_us"), eager.get("p90_us")
    if p10 and p90 and p10 == p10 and p90 == p90:
        spread = f" (timed p10-p90 {p10:.0f}-{p90:.0f} us)"
    noisy = "; the timed point itself is flagged noisy" if eager.get("noisy") else ""
    if profiled_us == profiled_us and profiled_us > 0 and abs(wall_us / profiled_us - 1) <= tol:
        return False, (f"profiled call {wall_us:.0f} us vs timed eager median {med:.0f} us"
                       f"{spread}: the profiler's own cost; the call timed under the profiler "
                       f"takes {profiled_us:.0f} us ({profiled_us / med - 1:+.0%}), which the "
                       f"split matches within {tol:.0%}{noisy}")
    if r > 1:
        ops = f" ({n_ops:.0f} host ops recorded per call)" if n_ops == n_ops else ""
        if profiled_us == profiled_us and profiled_us > 0:
            ops += f"; the call timed under the profiler: {profiled_us:.0f} us"
        why = ("the profiler adds host time to every op and launch it records" + ops
               + (", and this CPU's speed changes between calls" if cpu else
                  ", and eager's host runs at two speeds (10-25% noise on the hosts measured)"))
        return False, (f"profiled call {wall_us:.0f} us is {r - 1:.0%} above the timed eager "
                       f"median {med:.0f} us{spread}: {why}{noisy}")
    why = ("this CPU ran the profiled calls faster than the timed ones (its speed changes "
           "between calls)" if cpu else
           "the host ran faster while profiled than in the timed window (eager's host noise, "
           "10-25% on the hosts measured), and the timed calls start from a flushed L2")
    return False, (f"profiled call {wall_us:.0f} us is {1 - r:.0%} below the timed eager "
                   f"median {med:.0f} us{spread}: {why}{noisy}")


def _timed_row(results: pd.DataFrame, pt: dict, mode: str) -> tuple[dict | None, str]:
    """The ok row of the trace's point in `mode` (None and why when none or several)."""
    r = results
    sel = r[(r["model"] == pt["model"]) & (r["tp"] == pt["tp"]) & (r["ep"] == pt["ep"])
            & (r["tokens"] == pt["tokens"]) & (r["backend"] == pt["backend"])
            & (r["mode"] == mode) & (r["status"] == "ok")]
    if "ep_rank" in sel:
        sel = sel[sel["ep_rank"].fillna(0) == 0]
    if "config" in sel:
        sel = sel[[config_tag(c) == pt.get("config", "") for c in sel["config"]]]
    if len(sel) > 1:
        return None, (f"{len(sel)} {mode} rows match this trace (its name has no dtype): "
                      "nothing to check the sum against")
    if sel.empty:
        return None, ""
    return sel.iloc[0].to_dict(), ""


@takes(run=RUN)
def run_split(run) -> pd.DataFrame:
    """Every sweep trace of a run (traces/*.json.gz): the point, its split, the timed eager
    and graph medians, and the check (`adds_up`, `reason`)."""
    run = open_run(run)
    tdir = Path(run.path) / "traces"
    rows = []
    for path in sorted(tdir.glob("*.json.gz")) if tdir.is_dir() else []:
        pt = parse_trace_name(path.name)
        if pt is None:
            continue
        s = split_trace(path)
        eager, ambiguous = _timed_row(run.results, pt, "eager")
        graph, _ = _timed_row(run.results, pt, "graph")
        prof_us = float((eager or {}).get("eager_profiled_us") or math.nan)
        ok, why = check_split(s["wall_us"], eager, s["n_ops"], profiled_us=prof_us,
                              cpu=not s["device_timeline"])
        rows.append(dict(pt, **s, eager_us=(eager or {}).get("median_us", math.nan),
                         profiled_eager_us=prof_us,
                         graph_us=(graph or {}).get("median_us", math.nan),
                         device=(eager or {}).get("device", run.device),
                         git_commit=(eager or {}).get("git_commit"),
                         dtype=(eager or {}).get("dtype"),
                         adds_up=ok, reason=ambiguous or why, trace=path.name))
    out = pd.DataFrame(rows)
    if len(out):
        out["sum_over_eager"] = out["wall_us"] / out["eager_us"]
        out = out.sort_values(["model", "tp", "ep", "backend", "tokens"]).reset_index(drop=True)
    return out
