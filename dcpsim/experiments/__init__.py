"""Reproducible studies: the Dynamic-CP blog reproduction (``dcpsim reproduce``).

* :mod:`~dcpsim.experiments.blog` -- the experiment folder as data
  (:func:`load_experiment`, :class:`BlogExperiment`).
* :mod:`~dcpsim.experiments.runner` -- runs cells, pools seeds, builds the
  simulated-vs-published table and the sensitivity table (:func:`reproduce`).
* :mod:`~dcpsim.experiments.calibrate` -- the one-parameter workload fit
  against the published *packing* throughput only.
* the figures: :mod:`dcpsim.report.blog`.
"""

from dcpsim.experiments.blog import DEFAULT_SPEC_DIR, BlogExperiment, load_experiment
from dcpsim.experiments.runner import ReproduceResult, reproduce

__all__ = ["DEFAULT_SPEC_DIR", "BlogExperiment", "ReproduceResult", "load_experiment", "reproduce"]
