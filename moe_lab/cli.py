"""`moe-lab` command line. Each verb is a module of moe_lab.commands (claims: its own
package); this file only wires them. Every verb module exposes `configure(parser)` and
`run(args) -> int`. Only the invoked verb's module is imported, and its configure() needs
neither torch nor pandas, so `moe-lab VERB --help` answers in a fraction of a second.

Bad input (UsageError, argparse errors) prints one line and exits 2, never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys
import time

from .core.errors import EXIT_SIGINT, EXIT_SIGTERM, Terminated, UsageError, disk_full

# verb -> (module, one-line help)
VERBS = {
    "backends": ("moe_lab.commands.backends", "list every backend, whether it can run here, and why not"),
    "check": ("moe_lab.commands.check", "run every available backend on fresh random inputs against the reference"),
    "sweep": ("moe_lab.commands.sweep", "measure models x sharding x tokens x backends x modes into data/runs/<run_id>"),
    "profile": ("moe_lab.commands.profile", "profile one point: per-kernel table and a Perfetto trace"),
    "tune": ("moe_lab.commands.tune", "search a tunable backend's launch configurations per shape and token count"),
    "import-aiter": ("moe_lab.commands.import_aiter", "import AMD aiter's tuned fused-MoE table (AMD's tuner's times) as a run folder"),
    "roofline": ("moe_lab.commands.roofline", "print predicted roofline floors (no GPU needed)"),
    "ceilings": ("moe_lab.commands.ceilings", "measure this GPU's bandwidth and GEMM ceilings into data/ceilings/"),
    "claims": ("moe_lab.claims.cli", "parse serving benchmarks and check the seeds' claims"),
    "compare": ("moe_lab.commands.compare", "compare two runs (or one split by a column) point by point with bootstrap intervals"),
    "merge": ("moe_lab.commands.merge", "combine run folders measured apart (sweep parts, GPUs, machines) into one run"),
    "report": ("moe_lab.commands.report", "execute the notebooks into HTML and export figures"),
    "findings": ("moe_lab.commands.findings", "write docs/findings.md from the committed runs (--check: exit 1 when it differs)"),
    "doctor": ("moe_lab.commands.doctor", "print the environment: devices, versions, what will run"),
}


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Adds "(default: X)" only where the help does not already say its default and there
    is one to say: no "(default: None)" after "default: cuda when visible, else cpu"."""

    def _get_help_string(self, action):
        help_ = action.help or ""
        if ("default" in help_.lower() or action.default is None or action.default is False
                or action.default is argparse.SUPPRESS):  # identity: a default of 0 is shown
            return help_
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        self.exit(2, f"moe-lab: error: {message}\n")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser with every verb listed; only the verb argv invokes (its first word that
    names one) is configured, so only its module is imported. argv None: every verb."""
    invoked = None if argv is None else next((a for a in argv if a in VERBS), None)
    p = _Parser(prog="moe-lab", description=(
        "Performance workbook for fused Mixture-of-Experts kernels: correctness checks, "
        "timed sweeps with per-kernel breakdowns, roofline floors and claim checks."))
    sub = p.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    sub.required = True
    for verb, (modname, help_) in VERBS.items():
        sp = sub.add_parser(verb, help=help_, description=help_,
                            formatter_class=_Help)
        sp.set_defaults(_module=modname)
        if argv is not None and verb != invoked:
            continue  # not invoked: listed with its one-line help, its module not imported
        try:
            mod = importlib.import_module(modname)
        except ImportError as exc:  # a verb whose module is missing must not break others
            sp.set_defaults(_missing=str(exc))
            continue
        mod.configure(sp)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    args._argv = argv  # what this invocation was given (not the host process's argv)
    args._started = time.time()  # a --budget counts from here: imports and set-up included
    if getattr(args, "_missing", None):
        print(f"moe-lab: error: verb {args.verb!r} unavailable: {args._missing}", file=sys.stderr)
        return 2
    empty = [k for k, v in vars(args).items() if not k.startswith("_") and (
        v == "" or (isinstance(v, list) and any(x == "" or x == [""] for x in v)))]
    if empty:  # `--model ""` (an unset shell variable) would quietly mean the default
        k = empty[0]
        name = f"--{k.replace('_', '-')}" if _is_option(parser, args.verb, k) else k.upper()
        print(f"moe-lab: error: {name} is empty" if vars(args)[k] == "" else
              f"moe-lab: error: a value of {name} is empty", file=sys.stderr)
        return 2
    mod = importlib.import_module(args._module)
    try:
        from .core.validate import cli_values
        cli_values(args)  # every number in its range, the API's rules (core.validate.LIMITS)
        return int(mod.run(args) or 0)
    except UsageError as exc:
        print(f"moe-lab: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("moe-lab: interrupted", file=sys.stderr)
        return EXIT_SIGINT
    except BrokenPipeError:  # `moe-lab compare A B | head`: the reader left; no traceback
        _quiet_stdout()
        return 141
    except OSError as exc:  # a path given that cannot be written or read (--out a file...)
        if disk_full(exc):  # every write is atomic: what was written before is whole
            where = f" writing {exc.filename}" if exc.filename else ""
            print(f"moe-lab: error: no space left on the device{where}: what was written "
                  "before is kept whole; free some space and rerun the same command to resume",
                  file=sys.stderr)
            return 2
        if exc.filename is None:
            raise
        print(f"moe-lab: error: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except Terminated:
        print("moe-lab: terminated (SIGTERM); what was measured is saved", file=sys.stderr)
        return EXIT_SIGTERM


def _is_option(parser, verb: str, dest: str) -> bool:
    """Whether `dest` is an --option of the verb (else a positional argument)."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    sp = sub.choices.get(verb) if sub else None
    return any(a.dest == dest and a.option_strings for a in (sp._actions if sp else []))


def entry() -> None:
    """The `moe-lab` console script and `python -m moe_lab`: main(), then exit with its code.
    A refusal (exit 2: nothing was written, nothing is left to clean up) leaves through
    os._exit once stdout and stderr are flushed: a native library's thread torn down at
    interpreter exit once turned `compare <one run>`'s one line into "terminate called
    without an active exception" and exit 134 (2 of 15 tries)."""
    try:
        code = main()
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2, its line printed)
        if exc.code != 2:
            raise
        code = 2
    if code == 2:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        import os
        os._exit(2)
    sys.exit(code)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not raise again."""
    import os
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real stdout (a test's capture)
        pass


if __name__ == "__main__":
    entry()
