"""The Dynamic-CP blog reproduction (``dcpsim reproduce``; the experiment folder is ``experiments/dynamic_cp_blog``).

* :mod:`~dcpsim.reproduction.blog` -- the experiment folder as data
  (:func:`load_experiment`, :class:`BlogExperiment`).
* :mod:`~dcpsim.reproduction.runner` -- runs cells, pools seeds, builds the
  simulated-vs-published table and the sensitivity table (:func:`reproduce`).
* :mod:`~dcpsim.reproduction.workload_fit` -- the one-parameter workload fit
  against the published *packing* throughput only.
* the figures: :mod:`dcpsim.report.blog`.
"""

from dcpsim.reproduction.blog import DEFAULT_SPEC_DIR, BlogExperiment, load_experiment
from dcpsim.reproduction.runner import ReproduceOptions, ReproduceResult, reproduce

__all__ = ["DEFAULT_SPEC_DIR", "BlogExperiment", "ReproduceOptions", "ReproduceResult", "load_experiment", "reproduce"]
