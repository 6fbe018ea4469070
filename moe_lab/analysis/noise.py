"""A device's between-process noise per mode, measured from A/A' pairs: two runs of one
commit, the same sweep, in two processes (identical inputs). compare's verdict needs a
change to clear both its bootstrap interval and this band.

    cal = compare.calibrate(open_run("a"), open_run("a2"))  # -> data/noise/<device>.json
    cal = load("NVIDIA H200")                         # None: no calibration for the device
    cal.noise("eager"), cal.describe("eager")

The statistic. For every point both runs timed (status ok, equal inputs_digest), the log
ratio ln(median_B / median_A) (sample medians when both keep samples, else the rows'
median_us: the ratio compare reports). A pair's noise in a mode is the 0.95 quantile
(QUANTILE, numpy's linear interpolation) of |ln ratio| over its points; the device's is
the largest of its pairs' (every pair is kept, so appending one recomputes it), and its
band is [exp(-noise), exp(noise)]: symmetric in log, so swapping A and B flips a verdict
and nothing else.
Why a high quantile and not a robust spread (MAD, IQR): the between-process differences
are heavy-tailed, not Gaussian. On the H200 eager (the 12-01 pair, |ln B/A|), the median
point moves by 12% while a few move by 52-66% (the host's speed from one process to the
next, worst at small token counts): a band of 2 x 1.4826 x MAD (0.28) would leave 7 of 24
A/A' points outside it, where the quantile states its false-verdict rate directly (about
5% of A/A' points lie outside it; a verdict also needs its bootstrap interval outside it,
so fewer are called). Why the largest pair and not one quantile of all points pooled: the
noise level itself differs from one session to the next (H200 graph: 0.20% on 2026-11-30,
0.37% on 2026-12-01), and the band must cover the noisiest session seen; pooling let the
quiet pair narrow the band to 0.26%, which two of the 12-01 pair's own points (0.39% and
0.56%) lie outside: only their bootstrap intervals keep them from a verdict (with the
quiet pair's band alone, the 0.39% point is called `slower` at 1000 resamples). One number
per mode and device: eager noise is larger at small token counts than at large ones, and
the band is the tail of all of them (conservative at 4096 tokens).

Limits, said where they are used. A band is only as good as its pairs: with 24 points the
0.95 quantile is about the second-largest, so a file says how many pairs and points back
each mode. Comparing the very pair a band was calibrated on is circular (at most about 5%
of its points can lie outside their own quantile, by construction): compare says so in
its `calibration` column. Files live in data/noise/<device-slug>.json beside data/runs (the
checkout's data/noise is read when the data folder has none).
"""
from __future__ import annotations

import math
import numbers
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.atomic import atomic_write_json
from ..core.constants import BOOTSTRAP_CONFIDENCE
from ..core.errors import UsageError

QUANTILE = 0.95
CHECKOUT_NOISE = Path(__file__).resolve().parents[2] / "data" / "noise"
WHAT = ("between-process noise of this device per mode, from A/A' pairs (two runs of one "
        f"commit, the same sweep, two processes): a pair's noise = the {QUANTILE:g} quantile of "
        "|ln(median_B / median_A)| over its matching ok points; the mode's noise = the largest "
        "pair's (the noisiest session seen); compare calls "
        f"a change only when its bootstrap {BOOTSTRAP_CONFIDENCE:.0%} interval lies wholly outside "
        "[exp(-noise), exp(noise)]. Calibrating on a pair and then comparing that pair is "
        "circular. Written by `moe-lab compare --calibrate A A'` (moe_lab/analysis/noise.py).")


def slug(device: str) -> str:
    from ..core.devices import device_slug
    return device_slug(str(device)) or "unknown"


def noise_dirs() -> list[Path]:
    """Where calibrations are looked for: <data folder>/noise, then the checkout's."""
    from ..storage.store import data_dir
    dirs = [data_dir().parent / "noise", CHECKOUT_NOISE]
    return list(dict.fromkeys(p.resolve() for p in dirs))


MAX_NOISE = 5.0  # |ln B/A|: a band of 0.0067x-148x; past it a file is no measurement


def _noise(value, who: str) -> float:
    """`value` as a noise |ln B/A|: a number >= 0 (NaN: none); UsageError naming `who`
    otherwise (was: a TypeError from math, or a negative noise's band upside down)."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or value < 0:
        raise UsageError(f"{who}: noise {value!r}: give a noise |ln B/A|, a number >= 0"
                         + (", or None for no band" if who == "band" else ""))
    return float(value)


def band(noise: float | None) -> tuple[float, float]:
    """[exp(-noise), exp(noise)]; (NaN, NaN) for None (no calibration), NaN or a noise
    past exp()'s range."""
    if noise is None:
        return math.nan, math.nan
    noise = _noise(noise, "band")
    if not math.isfinite(noise) or noise > 700:  # exp() overflows
        return math.nan, math.nan
    return math.exp(-noise), math.exp(noise)


def band_text(noise: float) -> str:
    """`0.95-1.05`: band(noise) as text, for a finite noise >= 0 (was 'nan-nan' for inf
    or NaN: there is no band to print)."""
    noise = _noise(noise, "band_text")
    if not math.isfinite(noise) or noise > 700:
        raise UsageError(f"band_text: noise {noise!r}: give a noise |ln B/A|, a finite "
                         "number >= 0 (at most 700: exp() overflows past it)")
    lo, hi = band(noise)
    d = 4 if noise < 0.01 else 3 if noise < 0.1 else 2
    return f"{lo:.{d}f}-{hi:.{d}f}"


@dataclass
class Calibration:
    """The pairs of one device (each with its per-point log ratios), or a fixed band per
    mode (Calibration.of: what-ifs and tests, no pairs behind it). device None: any."""
    device: str | None
    pairs: list = field(default_factory=list)
    fixed: dict = field(default_factory=dict)
    path: Path | None = None

    @classmethod
    def of(cls, noise: dict, device: str | None = None) -> "Calibration":
        return cls(device, fixed={str(m): float(v) for m, v in noise.items()})

    def modes(self) -> dict:
        """mode -> {noise, band, pairs, points}: the largest of the pairs' quantiles."""
        out = {m: dict(noise=v, band=list(band(v)), pairs=0, points=0)
               for m, v in self.fixed.items()}
        per: dict = {}
        for p in self.pairs:
            for m, d in (p.get("modes") or {}).items():
                xs = [abs(float(v)) for v in d["ln_ratio"].values()]
                if xs:
                    per.setdefault(m, []).append((float(np.quantile(xs, QUANTILE)), len(xs)))
        for m, qs in sorted(per.items()):
            v = max(q for q, _ in qs)
            out[m] = dict(noise=round(v, 6), band=[round(x, 6) for x in band(v)],
                          pairs=len(qs), points=sum(n for _, n in qs))
        return out

    def noise(self, mode: str) -> float | None:
        m = self.modes().get(str(mode))
        return None if m is None else float(m["noise"])

    def describe(self, mode: str) -> str:
        m = self.modes().get(str(mode))
        if m is None:
            return ""
        where = f", {self.path.name}" if self.path is not None else ""
        if not m["pairs"]:
            return f"band {band_text(m['noise'])} (fixed, no A/A' pair behind it{where})"
        many = (f"the noisiest of {m['pairs']} A/A' pairs, {m['points']} points in all"
                if m["pairs"] > 1 else f"1 A/A' pair, {m['points']} points")
        return f"band {band_text(m['noise'])} (q{QUANTILE * 100:.0f} |ln B/A| of {many}{where})"

    def includes(self, a: str, b: str) -> bool:
        """Whether runs a and b are one of the calibrated pairs (comparing them: circular)."""
        return any({p.get("a"), p.get("b")} == {a, b} for p in self.pairs)

    def as_json(self) -> dict:
        return dict(device=self.device, what=WHAT, quantile=QUANTILE, modes=self.modes(),
                    pairs=self.pairs)


def read(path) -> Calibration:
    import json
    p = Path(path)
    try:
        d = json.loads(p.read_text())
        cal = Calibration(d.get("device"), list(d.get("pairs") or []), path=p)
        if not cal.pairs:  # a hand-written file: its modes' noise as fixed bands
            cal.fixed = {m: float(v["noise"]) for m, v in (d.get("modes") or {}).items()}
        # the fixed ones checked before modes() hands them to band() (it refuses a negative)
        noises = cal.fixed or {m: v["noise"] for m, v in cal.modes().items()}
        for m, n in noises.items():
            if not 0 <= n <= MAX_NOISE:  # NaN fails too
                raise ValueError(f"mode {m!r} noise {n}: a noise is a finite "
                                 f"|ln B/A| from 0 to {MAX_NOISE}")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"{p} is not a noise calibration ({type(exc).__name__}: "
                         f"{str(exc)[:120]})") from None
    return cal


def load(device: str, where=None) -> Calibration | None:
    """The calibration of `device`: `where` a file (read whatever device it names) or a
    folder holding <slug>.json; None searches noise_dirs(). None when there is none."""
    if where is not None and Path(where).is_file():
        return read(where)
    for d in [Path(where)] if where is not None else noise_dirs():
        p = d / f"{slug(device)}.json"
        if p.is_file():
            return read(p)
    return None


def disagreements(stored: dict, fresh: dict | None) -> tuple[int, list[str]]:
    """(points of the stored pair, the labels whose ln(B/A) the fresh computation of the
    same pair (compare.recalibrated) does not give, to the file's 6 decimals, or has not
    at all, or has beside them, and the rows whose median_us is not their samples' median:
    row_vs_samples); fresh None: every point."""
    labels = {(m, k): v for m, d in (stored.get("modes") or {}).items()
              for k, v in d["ln_ratio"].items()}
    if fresh is None:
        return len(labels), [f"{m} {k}" for m, k in sorted(labels)]
    now = {(m, k): v for m, d in fresh["modes"].items() for k, v in d["ln_ratio"].items()}
    off = [f"{m} {k}" for m, k in sorted(set(labels) | set(now))
           if (m, k) not in labels or (m, k) not in now
           or abs(float(labels[(m, k)]) - float(now[(m, k)])) > 5e-7]
    return len(labels), off + list(fresh.get("row_vs_samples") or [])


def _label(row: dict) -> str:
    from ..core.problems import sharding_name
    try:
        shard = sharding_name(int(row["tp"]), int(row["ep"]))
    except (TypeError, ValueError):
        shard = f"tp{row.get('tp')} ep{row.get('ep')}"
    cfg = row.get("config")
    return " ".join(str(x) for x in (
        row["model"], shard, row.get("dtype"), row["backend"],
        *([cfg] if cfg not in (None, "default") else []),
        *(["[op]"] if row.get("wrapped") else []), f"T={row['tokens']}", row.get("routing")))


def _run(value, name: str):
    """A Run (or what stands for one: path, run_id, device, commits), or a run id or folder
    opened (storage.open_run); UsageError naming `name` otherwise (was: AttributeError)."""
    if all(hasattr(value, k) for k in ("path", "run_id", "device", "commits")):
        return value
    if isinstance(value, (str, os.PathLike)) and str(value).strip():
        from ..storage.store import open_run
        return open_run(value)
    raise UsageError(f"{name} {value!r}: give a run (a Run, a run id or a run folder)")


def check_pair(a, b) -> tuple:
    """UsageError (one line) unless a and b can be an A/A' pair: two runs (not one run
    twice) of one commit on one device, of one sweep (storage.merging.sweep_differences).
    Runs, run ids or folders: (a, b) as Runs."""
    a, b = _run(a, "check_pair: a"), _run(b, "check_pair: b")
    if Path(a.path).resolve() == Path(b.path).resolve():
        raise UsageError("an A/A' pair is two runs of one commit, each in its own process; a "
                         "run against itself has no between-process noise")
    ca, cb = a.commits(), b.commits()
    if not ca or ca != cb or len(ca) != 1:
        raise UsageError(f"an A/A' pair is two runs of one commit: {a.run_id} is at "
                         f"{', '.join(ca) or 'an unknown commit'}, {b.run_id} at "
                         f"{', '.join(cb) or 'an unknown commit'}")
    if a.device != b.device or "+" in a.device:
        raise UsageError(f"an A/A' pair is of one device: {a.run_id} ran on {a.device}, "
                         f"{b.run_id} on {b.device}")
    from ..storage.merging import sweep_differences  # merge's rule for "another sweep"
    diff = sweep_differences(a, b)
    if diff:  # was: a band from runs timed otherwise, which every later compare then used
        raise UsageError(f"{b.run_id} is another sweep than {a.run_id} ({', '.join(diff)} "
                         f"differ{'s' if len(diff) == 1 else ''}): an A/A' pair is one sweep "
                         "(one grid, one --rep-ms and --warmup-ms) run twice")
    return a, b


POINTS = "give a list of (row, ratio, what the ratio is of) triples, as compare.calibrate makes"
ROW_NEEDS = ("mode", "model", "tp", "ep", "backend", "tokens")  # what a point's label reads


def _points(points) -> list:
    """pair_of's points: each (a row dict with ROW_NEEDS, a number, a str); UsageError
    otherwise (was: a TypeError, ValueError or KeyError from the loop)."""
    if not isinstance(points, (list, tuple)):
        raise UsageError(f"pair_of: points {repr(points)[:80]}: {POINTS}")
    for p in points:
        if not (isinstance(p, (list, tuple)) and len(p) == 3 and isinstance(p[0], dict)
                and isinstance(p[1], numbers.Real) and isinstance(p[2], str)):
            raise UsageError(f"pair_of: points hold {repr(p)[:80]}: {POINTS}")
        lacks = [c for c in ROW_NEEDS if c not in p[0]]
        if lacks:
            raise UsageError(f"pair_of: a point's row lacks {', '.join(lacks)}: {POINTS}")
    return list(points)


def pair_of(a, b, points: list, skipped: dict, command: str | None = None) -> dict:
    """One A/A' pair's entry: provenance and, per mode, ln(B/A) of every matching point;
    points: (row, ratio, what the ratio is of) of each point both runs timed alike."""
    a, b = check_pair(_run(a, "pair_of: a"), _run(b, "pair_of: b"))
    points = _points(points)
    if not isinstance(skipped, dict):
        raise UsageError(f"pair_of: skipped {repr(skipped)[:80]}: give a dict (why -> how "
                         "many points were passed over), e.g. {}")
    modes: dict = {}
    for row, r, basis in points:
        if math.isfinite(r) and r > 0:
            d = modes.setdefault(str(row["mode"]), {"ln_ratio": {}, "ratio_of": set()})
            d["ln_ratio"][_label(row)] = round(math.log(r), 6)
            d["ratio_of"].add(basis)
    if not modes:
        raise UsageError(f"{a.run_id} and {b.run_id} share no timed point with equal inputs: "
                         "an A/A' pair is the same sweep run twice")
    for d in modes.values():
        xs = [abs(v) for v in d["ln_ratio"].values()]
        d.update(points=len(xs), noise=round(float(np.quantile(xs, QUANTILE)), 6),
                 ratio_of=", ".join(sorted(d["ratio_of"])))

    def measured(run):
        t = run.results.get("measured_at")
        t = t.dropna().astype(str) if t is not None else []
        return f"{min(t)} .. {max(t)}" if len(t) else str(run.manifest.get("started", ""))
    return dict(a=a.run_id, b=b.run_id, commit=a.commits()[0], device=a.device,
                measured={a.run_id: measured(a), b.run_id: measured(b)},
                calibrated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                command=command or "", skipped=skipped, modes=modes)


def add_pair(pair: dict, path=None) -> Calibration:
    """Add an A/A' pair (pair_of; compare.calibrate makes one from two runs) to its
    device's calibration file, a pair calibrated again replacing its old entry, and write
    it; path: the file or its folder (default: the first of noise_dirs())."""
    from ..core import validate
    need = ("a", "b", "device", "modes")
    if not isinstance(pair, dict) or not set(need) <= set(pair):
        raise UsageError(f"add_pair: pair {repr(pair)[:80]}: give an A/A' pair's entry "
                         f"(pair_of's: a dict with {', '.join(need)})")
    validate.path(path, "add_pair: path")
    p = Path(path) if path is not None else noise_dirs()[0] / f"{slug(pair['device'])}.json"
    if p.is_dir() or p.suffix != ".json":  # a folder, made if need be
        p = p / f"{slug(pair['device'])}.json"
    validate.output(p, "calibration")  # under a file: one line (was FileExistsError)
    cal = read(p) if p.is_file() else Calibration(pair["device"], path=p)
    if cal.device not in (None, pair["device"]):
        raise UsageError(f"{p} calibrates {cal.device}, not {pair['device']}")
    cal.device, cal.path, cal.fixed = pair["device"], p, {}
    cal.pairs = [q for q in cal.pairs if {q.get("a"), q.get("b")} != {pair["a"], pair["b"]}]
    cal.pairs.append(pair)
    atomic_write_json(p, cal.as_json())
    return cal


class Bands:
    """The band of each (device, mode) compare meets: from `calibration` (a Calibration,
    a file or a folder) or, None, each device's file in noise_dirs(); read once."""

    def __init__(self, calibration=None, runs: tuple[str, str] | None = None):
        self.given, self.runs, self.cache = calibration, runs, {}
        if calibration is not None and not isinstance(calibration, Calibration) \
                and not Path(calibration).exists():
            raise UsageError(f"no calibration file or folder {calibration}")

    def _cal(self, device: str) -> Calibration | None:
        if device not in self.cache:
            g = self.given
            if isinstance(g, Calibration):
                cal = g if g.device in (None, device) else None
            elif g is None:  # found, not given: a broken file is said and passed over
                try:
                    cal = load(device)
                except UsageError as exc:
                    from ..storage.store import _warn_once
                    _warn_once(f"moe-lab: warning: {exc}; {device} compared without a band")
                    cal = None
                if cal is not None and cal.device not in (None, device):
                    cal = None
            else:
                cal = load(device, g)
                if cal is not None and cal.device not in (None, device):
                    cal = None
            self.cache[device] = cal
        return self.cache[device]

    def band(self, dev_a, dev_b, mode) -> tuple[float | None, str]:
        """(noise or None, what it is); two devices: the larger of their bands."""
        devs = list(dict.fromkeys(str(d) if isinstance(d, str) and d else "unknown device"
                                  for d in (dev_a, dev_b)))
        found = []
        for d in devs:
            cal = self._cal(d)
            n = cal.noise(mode) if cal is not None else None
            if n is None:
                return None, f"no calibration for {d} {mode}"
            found.append((n, d, cal))
        n, d, cal = max(found, key=lambda t: t[0])
        text = f"{d} {mode}: {cal.describe(mode)}"
        if self.runs and cal.includes(*self.runs):  # describe() ends with ")"
            text = text[:-1] + "; this very pair among them: circular)"
        return n, text
