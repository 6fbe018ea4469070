"""Figures and tables for the notebooks, one module each; every figure has one legend and a
provenance footer naming the run and the commits of the rows it draws.

    from moe_lab.plots import kernel_time, compile, roofline, tuning, style
    kernel_time.fig_time_vs_tokens(run)     # notebook 01
    compile.fig_time_vs_tokens(run)         # notebook 02
    roofline.fig_roofline(run, df, ceil)    # notebook 03
    tuning.fig_tuned_over_default(run, table)  # notebook 05
    compare.fig_ratio(table, a, b)          # moe-lab compare, the review export
    eager_split.fig_eager_split(run)        # where eager time goes (runs with traces)

style: backend colours and labels (from the backend classes), mode line styles, phase
colours, the shared legend and the footer.
"""
from .style import describe, footer, footer_text

__all__ = ["describe", "footer", "footer_text"]
