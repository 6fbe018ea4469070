"""The analysis layer: functions from runs or frames to frames. Notebooks import this one
module (and `moe_lab.plots` to draw what it returns):

    targets   the workbook's targets (one record each) and the one evaluation
    metrics   the metric frames the targets are evaluated on
    findings  docs/findings.md, generated from the committed runs
"""
from . import metrics, targets  # noqa: F401
from .targets import TARGETS, Target, evaluate, held_back_by, summary  # noqa: F401
