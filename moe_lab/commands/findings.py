"""`moe-lab findings`: write docs/findings.md from the committed runs (every number in it
computed by moe_lab.analysis); `--check` writes nothing and exits 1 when the file differs
from what the data gives, or the README's measured numbers from their record
(moe_lab.findings.readme; the lines that differ on stderr), 0 when they agree."""
from __future__ import annotations

import sys
from pathlib import Path

from ..core import validate
from ..core.errors import UsageError
from . import options


def configure(p):
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 when the file differs from what the data gives")
    p.add_argument("--out", default=None,
                   help="the findings file (default: the checkout's docs/findings.md)")
    p.add_argument("--readme", default=None,
                   help="with --check, the README whose measured numbers are checked against "
                        "data/timings/readme-commands.json beside it (default: the checkout's)")
    options.data_dir(p)


def run(args) -> int:
    # here, not at the top: `moe-lab findings --help` must not load torch or pandas
    from .. import findings
    from ..core.atomic import atomic_write_text
    out = Path(args.out) if args.out else findings.default_path()
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        raise UsageError(f"--data-dir {args.data_dir}: not a folder of run folders")
    # was: 'holds no run folder', as if it were empty
    validate.not_a_run_folder(args.data_dir, f"--data-dir {args.data_dir}")
    # before the document is computed (was: an error naming a .tmp file, or --check's diff;
    # `--out RUN/results.parquet` wrote markdown over a run's measured file)
    validate.output(out, "--out")
    if args.readme is not None and not args.check:
        raise UsageError("--readme goes with --check (the README is checked, never written)")
    if args.check:
        if not out.is_file():  # was: exit 1 and a diff against nothing
            raise UsageError(f"--check: no findings file {out} to check (write it with "
                             "`moe-lab findings` first)")
        try:  # was: a UnicodeDecodeError traceback
            out.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError(f"--check: {out} is not a findings file (not UTF-8 text); give "
                             "the markdown file `moe-lab findings` wrote") from None
        from ..findings import readme
        if args.readme is not None and not Path(args.readme).is_file():
            raise UsageError(f"--readme {args.readme}: no such file")
        diff = findings.check(out, args.data_dir)
        said = readme.disagreements(args.readme)
        if diff:
            print(f"{out} differs from what the data gives ({len(diff)} diff lines); "
                  "run `moe-lab findings` to regenerate it", file=sys.stderr)
            print("\n".join(diff[:60]), file=sys.stderr)
        if said:
            print("the README's measured numbers differ from their record "
                  "(measure again with `python tests/readme_timings.py`, or state the record's):",
                  file=sys.stderr)
            print("\n".join(said), file=sys.stderr)
        if diff or said:
            return 1
        print(f"{out} agrees with the data, as do the README's measured numbers")
        return 0
    text = findings.generate(args.data_dir)
    atomic_write_text(out, text)
    print(f"wrote {out} ({len(text.splitlines())} lines)")
    return 0
