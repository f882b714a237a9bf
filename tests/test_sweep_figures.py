"""The sweep's figures are redrawn only when what they show changed (:mod:`dcpsim.run.sweep_figures`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from dcpsim.errors import ConfigError
from dcpsim.outdir import write_text
from dcpsim.run.sweep_figures import STAMP, sweep_figures


class _Writer:
    """A stand-in figure writer: one text 'figure' per call, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, df, out, axes=None):
        self.calls += 1
        out.mkdir(parents=True, exist_ok=True)
        p = write_text(out / "rows.txt", f"{len(df)} rows, axes {axes}\n")
        return {"rows": [str(p)], "other": "skipped: nothing to show"}


def test_figures_drawn_once_then_when_rows_or_files_change(tmp_path):
    figs = tmp_path / "figures"
    df = pd.DataFrame({"gpus": [8, 16], "tflops_per_gpu": [400.0, 390.5], "cp_hist": ['{"1": 2}', '{"2": 1}']})
    w = _Writer()
    first = sweep_figures(df, figs, ["cluster.gpus"], w)
    assert w.calls == 1 and (figs / STAMP).is_file()
    assert sweep_figures(df.copy(), figs, ["cluster.gpus"], w) == first and w.calls == 1  # nothing changed
    df2 = df.copy()
    df2.loc[1, "tflops_per_gpu"] = 391.0  # one cell
    sweep_figures(df2, figs, ["cluster.gpus"], w)
    assert w.calls == 2
    sweep_figures(df2, figs, ["cluster.gpus", "policy.name"], w)  # other axes
    assert w.calls == 3
    (figs / "rows.txt").write_text("edited by hand\n")  # no longer dcpsim's: not taken as the figure
    with pytest.raises(ConfigError, match="changed since dcpsim wrote it"):  # drawn again, and the writer refuses to overwrite the user's file
        sweep_figures(df2, figs, ["cluster.gpus", "policy.name"], w)
    assert w.calls == 4 and (figs / "rows.txt").read_text() == "edited by hand\n"
    (figs / "rows.txt").unlink()
    sweep_figures(df2, figs, ["cluster.gpus", "policy.name"], w)  # a deleted figure: drawn again
    assert w.calls == 5 and (figs / "rows.txt").is_file()


def test_paths_follow_the_folder_as_given(tmp_path, monkeypatch):
    df = pd.DataFrame({"x": [1, 2]})
    w = _Writer()
    sweep_figures(df, tmp_path / "a" / "figures", None, w)
    monkeypatch.chdir(tmp_path)
    got = sweep_figures(df, Path("a") / "figures", None, w)
    assert w.calls == 1 and got["rows"] == [str(Path("a") / "figures" / "rows.txt")]


def test_a_redraw_that_cannot_be_stored_drops_the_old_stamp(tmp_path):
    figs = tmp_path / "figures"
    df = pd.DataFrame({"x": [1, 2]})
    w = _Writer()
    sweep_figures(df, figs, None, w)
    sweep_figures(pd.DataFrame({"x": [[1], [2]]}), figs, None, w)  # unhashable cells: drawn, not stored
    assert w.calls == 2 and not (figs / STAMP).exists()
    sweep_figures(df, figs, None, w)  # the first rows again: the figure on disk is the second's, so drawn again
    assert w.calls == 3
