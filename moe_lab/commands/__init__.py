"""One module per `moe-lab` verb: `configure(parser)` adds its arguments, `run(args)`
returns the exit code. They parse and print; the work is done by the package modules."""


def default_data_dir_arg() -> str:
    """Where a writer (sweep, tune) puts run folders by default: moe_lab.storage.store.data_dir()
    ($MOE_LAB_DATA, else the checkout's data/runs), where run ids are looked up; relative
    to the working directory when under it (`data/runs` from the checkout). Before, a sweep
    started outside the checkout wrote <cwd>/data/runs, which nothing reads by run id."""
    from pathlib import Path

    from ..storage.store import data_dir
    d = data_dir()
    try:
        return str(d.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(d)
