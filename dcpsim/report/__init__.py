"""Reports: every figure dcpsim draws, each a function of a DataFrame, chosen by name through :data:`PLOTS`.

Modules: :mod:`~dcpsim.report.plots` (sweep results: any column against any
other, time breakdown, CP-size mix, cost against time, the standard sweep
figures), :mod:`~dcpsim.report.blog` (the blog reproduction's figures),
:mod:`~dcpsim.report.lengths` (length histograms), :mod:`~dcpsim.report.published`
(validation parity plots), :mod:`~dcpsim.report.host` (one rank's step as host
and device see it: a :class:`~dcpsim.report.host.RankStep`'s ``frame()``), and
:mod:`~dcpsim.report.trace`-style exports live with the simulator
(:mod:`dcpsim.sim.trace`). A new figure is one function (first argument the
DataFrame, second where to write it) and one line in :data:`BUILTIN_PLOTS`.
"""

from __future__ import annotations

from dcpsim.registry import Registry

# name -> "module:function". One line per figure.
BUILTIN_PLOTS: dict[str, str] = {
    "xy": "dcpsim.report.plots:plot",
    "time-breakdown": "dcpsim.report.plots:plot_time_breakdown",
    "cp-mix": "dcpsim.report.plots:plot_cp_mix",
    "cost-time": "dcpsim.report.plots:plot_cost_time",
    "lengths": "dcpsim.report.lengths:plot_length_histograms",
    "parity": "dcpsim.report.published:parity_plot",
    "blog-tflops": "dcpsim.report.blog:plot_tflops",
    "blog-breakdown": "dcpsim.report.blog:plot_breakdown",
    "blog-cp-mix": "dcpsim.report.blog:plot_cp_mix",
    "blog-sensitivity": "dcpsim.report.blog:plot_sensitivity",
    "rank-step": "dcpsim.report.host:plot_rank_step",
}

PLOTS: Registry = Registry("plot", BUILTIN_PLOTS)


def get_plot(name: str):
    """The figure function registered as ``name`` (:class:`~dcpsim.errors.ConfigError` for an unknown name)."""
    return PLOTS.get(name)


__all__ = ["BUILTIN_PLOTS", "PLOTS", "get_plot"]
