"""Toy extensions (used by test_extension_points.py): a third network model, the whole of what a new model needs,
and a figure.

A fabric with 2:1 oversubscription everywhere above the NVLink domain: every CP group that leaves its domain
runs at half the ideal network's bandwidth factor. Registering it is one line:
``NETWORKS.register("toy-half", "toy_network:HalfBisectionNetwork")``.
"""

from __future__ import annotations

from dcpsim.sim.networks.ideal import IdealNetwork


class HalfBisectionNetwork(IdealNetwork):
    """The ideal network with half its bandwidth for CP groups that leave their NVLink domain."""

    name = "toy-half"

    def cp_factor(self, stage, starts, cps):
        return 0.5 * super().cp_factor(stage, starts, cps)


def tokens_bar(df, path):
    """A toy figure (a function of a DataFrame and where to write it): tokens per policy as bars.
    Registering it is one line: ``PLOTS.register("toy-tokens", "toy_network:tokens_bar")``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2))
    totals = df.groupby("policy")["tokens"].sum()
    ax.bar(list(totals.index), list(totals.values))
    fig.savefig(path)
    plt.close(fig)
    return path
