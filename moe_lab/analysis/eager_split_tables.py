"""The "why eager costs so much at decode" figure: each traced point's eager call split into
Python and dispatch on the host, launch gaps on the device and kernel time, against tokens,
with the timed eager and graph medians beside the bars (moe_lab.analysis.eager_split)."""
from __future__ import annotations
import pandas as pd
from .eager_split import run_split
from ..storage.store import open_run
from ..storage.checked import RUN, takes


@takes(run=RUN)
def table(run) -> pd.DataFrame:
    """run_split of the run (every sweep trace, its split and its check)."""
    return run_split(open_run(run))
