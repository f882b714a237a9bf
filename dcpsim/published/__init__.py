"""Validation against published training runs (``dcpsim validate --published``) and calibration.

:mod:`dcpsim.published.suite` reads ``experiments/published_throughput``
(81 published Megatron-LM / NeMo runs with sources, a family and a
fit/held-out split per row) and turns rows into run configurations;
:mod:`dcpsim.published.replay` simulates them with the code path of
``dcpsim simulate`` and compares tokens/s per GPU.
"""

from dcpsim.published.replay import QUICK_ROWS, ReplayResult, RowResult, replay_suite
from dcpsim.published.suite import Row, Suite, load_suite, row_config

__all__ = ["QUICK_ROWS", "ReplayResult", "Row", "RowResult", "Suite", "load_suite", "replay_suite", "row_config"]
