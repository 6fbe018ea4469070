"""`moe-lab tune`: search the launch configurations of a tunable backend per shape and token
count on this device; every candidate's time into data/runs/<run_id>/candidates.parquet, the
winners into data/configs/<device>/<backend>/ in the format the kernel's project reads.
(Heavy imports live in run(): the CLI's --help must not load torch or pandas.)"""
from __future__ import annotations

import os
import sys

from ..core import constants
from ..core.errors import UsageError
from . import default_data_dir_arg, options

TUNE_TOKENS = ",".join(map(str, constants.TUNE_TOKENS))  # moe_lab.measuring.tuning's keys


def configure(p):
    p.add_argument("--backend", default="aiter-triton",
                   help="a backend with tunable launch configurations "
                        f"({', '.join(constants.TUNABLE_BACKENDS)}); default: aiter-triton")
    options.models(p)
    options.shape(p)
    p.add_argument("--tokens", default=TUNE_TOKENS,
                   help="token counts to tune, the keys of the config files (a caller uses "
                        f"the nearest); default: the {len(constants.PUBLISHED_H200_KEYS)} "
                        "keys of the published tunings for the H200 and "
                        f"{constants.TUNE_TOKENS[-1]}, " + TUNE_TOKENS)
    options.dtype(p)
    p.add_argument("--routing", default="uniform")
    options.device(p)
    p.add_argument("--run-id", default=None, help="folder under --data-dir (default: "
                   "tune-<backend>-<device>, verify-<backend>-<device> with --verify; the "
                   "same command resumes it)")
    options.data_dir(p)
    p.add_argument("--configs-dir", default=None,
                   help="where the winners go, and where --verify reads the committed ones "
                        "(default: data/configs/<device-slug>, beside $MOE_LAB_DATA's runs, "
                        "where `sweep --config tuned` reads them; required with a --data-dir "
                        "elsewhere). A tuned file there that another run wrote with token "
                        "counts this run does not tune, or that cannot be read, is refused "
                        "before the search (its keys would be dropped)")
    p.add_argument("--budget", type=float, default=None, metavar="S",
                   help="stop this command S seconds after it started (its imports and "
                        "set-up count; it stops at the next timing): every "
                        "timing so far is kept in candidates.parquet and the manifest's "
                        "`left` says which shapes, stages and token counts are unfinished; "
                        "the same command again resumes there and never times a row twice "
                        "(default: no limit)")
    options.compile_workers(p, "the next batch of candidates")
    p.add_argument("--verify", type=int, default=None, metavar="N",
                   help="check the committed winners instead of tuning: search N token counts "
                        "per shape again (drawn from --tokens with --seed; 0: all) with another "
                        "candidate order and twice the survivors and fine steps, in a run "
                        "folder of its own, time the committed winner beside them and report "
                        "every correct candidate faster than it by more than "
                        f"{100 * (constants.VERIFY_MARGIN - 1):.0f}%% "
                        "(verify.parquet); writes no config files (default: off)")
    p.add_argument("--rep-ms", type=float, default=constants.TUNE_REP_MS,
                   help="timed repetitions per candidate, in ms, at the last rung and in the "
                        "fine and neighbour-key passes (the successive-halving rungs before it time "
                        + " and ".join(f"{r:g}" for r in constants.SEARCH_RUNGS[:-1])
                        + " of it)")
    p.add_argument("--warmup-ms", type=float, default=constants.TUNE_WARMUP_MS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")


def _configs_beside(data_dir, configs_dir) -> None:
    """A --data-dir elsewhere than the data folder with no --configs-dir: UsageError (one
    line, nothing written). Before, the runs went where --data-dir said and the winners into
    the checkout's data/configs (or $MOE_LAB_DATA's), which the user had not named; the
    tuned files' default folder is the data folder's (`sweep --config tuned` reads it there
    whatever its --data-dir), so it is kept only for that data folder."""
    from pathlib import Path

    from ..storage.store import data_dir as default
    if data_dir is None or Path(data_dir).resolve() == default().resolve():
        return
    raise UsageError(f"--data-dir {data_dir}: say where the tuned files go with --configs-dir "
                     f"(without it they would go to {configs_dir}, outside it); or set "
                     f"MOE_LAB_DATA={data_dir}: runs there, tuned files beside it in "
                     f"{Path(data_dir).parent / 'configs'}, where `sweep --config tuned` reads them")


def _why_none(tuner, man: dict) -> str:
    """Why a tune ended with no point tuned (was: "0 points tuned" and nothing more)."""
    status = man.get("status")
    if tuner.stopped_by:
        return f"stopped: {tuner.stopped_by}"
    if status == "budget spent":
        return (f"the --budget of {tuner.budget_s:g} s was spent before a shape's search "
                "ended; the same command resumes it")
    if status != "complete":
        return f"the search stopped ({status}) before a shape's search ended"
    rows = tuner.store.load_table("candidates")
    said = (rows["status"].astype(str).value_counts().to_dict()
            if len(rows) and "status" in rows else {})
    return ("no candidate, the default included, was correct and timed at any token count ("
            + (", ".join(f"{k} {v}" for k, v in said.items()) or "none timed")
            + "; their errors are in candidates.parquet)")


def _shards(args, device: str) -> list[list]:
    """The problems to tune (or --verify's sample of token counts), one list per model x
    TP x EP, from the flags checked in order: a UsageError names the first bad one."""
    from ..measuring import tuning
    from ..core.problems import make_problem, parse_int_list, parse_model, parse_tokens, split_models
    from ..core.routing import parse_routing
    models = split_models(args.models) if args.models else options.default_models(
        device == "cuda")
    for m in models:
        parse_model(m)
    parse_routing(args.routing)
    tokens = parse_tokens(args.tokens)
    if args.budget is not None and not args.budget > 0:
        raise UsageError("--budget must be a positive number of seconds")
    verify = args.verify is not None
    if verify:
        if args.verify < 0:
            raise UsageError("--verify must be 0 (every token count) or more")
        tokens = tuning.verify_sample(tokens, args.verify, args.seed)
    return [[make_problem(m, t, args.dtype, tp, ep) for t in tokens]
            for m in models for tp in parse_int_list(args.tp)
            for ep in parse_int_list(options.default_eps(args.ep, device == "cuda"))]


def _print_outcome(tuner, win, man: dict, verify: bool, run_dir: str) -> None:
    """One line per point tuned (default -> winner) or verified (its verdict), the shapes
    left for a resume, and the closing `done` line."""
    if verify:
        rep = tuner.store.load_table("verify")
        for r in rep.itertuples():
            print(f"{r.model:22} {r.sharding:9} T={r.tokens:<5} {r.verdict}")
    else:
        for r in win.itertuples():
            print(f"{r.model:22} {r.sharding:9} T={r.tokens:<5} {r.default_us:9.1f} -> "
                  f"{r.median_us:9.1f} us ({r.speedup:.2f}x; candidates {r.search_best_us:.1f}"
                  f"-{r.search_worst_us:.1f} us, median {r.search_median_us:.1f})")
    for x in man.get("left") or []:
        print(f"left: {x['shape']} at {len(x['keys_left'])} token counts: {x['stage']} "
              + (f"{x['step']} ({len(x['step_keys'])} token counts in it)" if x["step"] else "")
              + "; the same command resumes it")
    print(f"done ({man.get('status')}): {len(win)} points "
          + ("checked" if verify else "tuned") + ("" if len(win) else f" ({_why_none(tuner, man)})")
          + f"; candidates in {run_dir}/candidates.parquet")


def run(args) -> int:
    from ..storage.configs import configs_dir_for
    from ..core.devices import device_slug
    from ..core.environment import device_name
    from ..measuring.correctness import resolve_device
    from ..measuring.tuning import Tuner
    given_data_dir = args.data_dir
    args.data_dir = args.data_dir or default_data_dir_arg()
    options.timing(args.warmup_ms, args.rep_ms)
    if args.run_id is not None:
        options.run_id(args.run_id)
    device = resolve_device(args.device)
    shards = _shards(args, device)
    verify = args.verify is not None
    dev = device_name(device)
    kind = "verify" if verify else "tune"
    run_dir = os.path.join(args.data_dir, args.run_id or f"{kind}-{args.backend}-{device_slug(dev)}")
    tuner = Tuner(args.backend, device, run_dir, args.configs_dir or configs_dir_for(dev),
                  seed=args.seed, routing=args.routing, budget_s=args.budget,
                  warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, progress=not args.no_progress,
                  compile_workers=args.compile_workers, verify=verify,
                  budget_from=getattr(args, "_started", None),
                  command="moe-lab " + " ".join(getattr(args, "_argv", sys.argv[1:])))
    ok, why = tuner.backend.available()
    if not ok:  # before: every candidate a `failed` row, "done: 0 points tuned", exit 0
        raise UsageError(f"{tuner.backend_name} cannot run here: {why}")
    if not verify and args.configs_dir is None:
        _configs_beside(given_data_dir, tuner.configs_dir)
    tuner.check(shards)  # another writer's folder, one tuned otherwise, a configs folder
    # that cannot take the winners, a --verify without a committed file: one line, untouched
    print(f"{kind} {args.backend} on {dev}: {sum(len(s) for s in shards)} points -> {run_dir}"
          + ("" if verify else f", configs to {tuner.configs_dir / tuner.backend_name}")
          + (f", compiling ahead in {tuner.compile_workers} processes"
             if tuner.compile_workers else ""), flush=True)
    win = tuner.run(shards)
    man = tuner.store.read_manifest()
    _print_outcome(tuner, win, man, verify, run_dir)
    if tuner.stopped_by:  # the row that did it is kept: the next command goes on after it
        print(f"moe-lab: stopped: {tuner.stopped_by}; rerun the same command to resume",
              file=sys.stderr)
        return 1
    return 0
