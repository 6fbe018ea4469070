"""`moe-lab claims parse|check|implications`."""
from __future__ import annotations

import argparse
import json
import math
import sys

from ..core.constants import CLAIM_GPU
from ..core.errors import UsageError


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="claims_cmd", metavar="CMD", parser_class=type(parser))
    sub.required = True
    p = sub.add_parser("parse", help="parse serving-benchmark blocks, comparison and lm_eval "
                       "tables of a text file into tidy rows")
    p.add_argument("file", help="text file (a PR description, a benchmark log)")
    p.add_argument("--format", choices=("csv", "json"), default="csv")
    c = sub.add_parser("check", help="check every claim of the registry: pass / warn / fail")
    c.add_argument("--registry", default=None, help="registry JSON (default data/claims/registry.json)")
    c.add_argument("--strict", action="store_true", help="exit 1 if any check fails")
    c.add_argument("--format", choices=("text", "csv", "json"), default="text")
    c.add_argument("--status", choices=("pass", "warn", "fail"), action="append",
                   help="show only these statuses (repeatable)")
    i = sub.add_parser("implications", help="per-MoE-layer time each claim implies, beside "
                       "the roofline floor and measured kernel times")
    i.add_argument("--registry", default=None)
    i.add_argument("--gpu", default=None, help="device spec key (mi300x, h200-sxm, ...; "
                   f"default: the claim's GPU, {CLAIM_GPU})")
    i.add_argument("--runs", default=None, help="where the measured kernel times are: a run "
                   "folder, a run id, or a folder of run folders (default: every run of data/runs)")
    i.add_argument("--format", choices=("text", "csv", "json"), default="text")


def _registry(path):
    from .registry import load_registry
    return load_registry(path) if path else load_registry()


def _emit(df, fmt: str) -> None:
    if fmt == "csv":
        df.to_csv(sys.stdout, index=False)
    elif fmt == "json":  # JSON has no NaN or Infinity (SGLang's 'Traffic request rate: inf'):
        # a value that is not a finite number is null, so the output stays JSON
        rows = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                 for k, v in r.items()} for r in df.to_dict(orient="records")]
        print(json.dumps(rows, indent=1, default=str, allow_nan=False))
    else:
        import pandas as pd
        with pd.option_context("display.width", 200, "display.max_columns", 40,
                               "display.max_colwidth", 60):
            print(df.to_string(index=False))


def run(args) -> int:
    try:
        return _run(args)
    except BrokenPipeError:  # `moe-lab claims parse FILE | head`
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _run(args) -> int:
    cmd = getattr(args, "claims_cmd", None)
    if cmd == "parse":
        from .parser import parse_file, to_frame
        blocks = parse_file(args.file)
        for b in blocks:  # a block cut when pasted: parsed, and what is missing said
            for w in b.warnings:
                print(f"warning: {w}", file=sys.stderr)
        _emit(to_frame(blocks), args.format)
        return 0
    if cmd == "check":
        from .verdicts import format_report, run_checks, summary
        df = run_checks(_registry(args.registry))
        shown = df[df["status"].isin(args.status)] if args.status else df
        if args.format == "text":
            print(format_report(shown))
            if args.status:
                s = summary(df)
                print(f"(all {len(df)}: {s['pass']} pass, {s['warn']} warn, {s['fail']} fail)")
        else:
            _emit(shown, args.format)
        return 1 if args.strict and (df["status"] == "fail").any() else 0
    if cmd == "implications":
        from .implications import implications
        folders = None
        if args.runs is not None:  # a run folder, a run id or a folder of runs (before:
            # only a folder was taken, and a run id was refused as 'no such folder')
            from .implications import measured_folders
            try:
                folders = measured_folders(args.runs)[1]  # resolved (and read) once
            except UsageError as exc:
                raise UsageError(f"--runs: {exc}") from None
        df = implications(_registry(args.registry), runs_dir=args.runs, gpu=args.gpu,
                          folders=folders)
        if args.format == "text":
            _emit(df.drop(columns=["note", "source", "measured_device", "measured_run",
                                    "measured_commit"]), "text")
            for _, r in df.iterrows():
                print(f"note {r['config']}: {r['note']}")
        else:
            _emit(df, args.format)
        return 0
    raise UsageError("claims needs a command: parse, check or implications")
