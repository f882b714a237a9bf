"""Which profile a GPU name means by default: the calibrated one where it exists, the datasheet one by name.

The shipped profiles come in two kinds for a GPU type:

* ``<gpu>`` -- **datasheet** figures (public kernel and collective tables, the uncalibrated time model). Against
  the published runs it is too fast (``dcpsim validate --published``: 20-42% mean error, the A100 up to 73%), so
  its figures are an optimistic upper bound.
* ``<gpu>-calibrated`` -- the same tables with at most five ``[timing]`` knobs fitted by ``dcpsim calibrate`` on
  the published suite's fit rows (``CALIBRATION.md`` beside it names the data, the rows and the dcpsim commit).

``dcpsim plan``, ``simulate``, ``sweep``, ``demo``, ``export``, ``schedule`` and ``cost`` read a bare GPU name
through :func:`resolve_gpu`: it means the calibrated profile where one exists; ``<gpu>-datasheet`` names the
datasheet profile explicitly; a GPU with no calibrated profile falls back to its datasheet profile, and :func:`profile_label` says so on the output. The
library API (:func:`dcpsim.hardware.get_profile`, :class:`~dcpsim.run.config.RunConfig`) takes names literally:
``h100-sxm`` there is the datasheet profile, as the validation and calibration code needs.
"""

from __future__ import annotations

import json
from pathlib import Path

from dcpsim.errors import ConfigError
from dcpsim.hardware import DATASHEET_SUFFIX, datasheet_base

CALIBRATED_SUFFIX = "-calibrated"
__all__ = ["CALIBRATED_SUFFIX", "DATASHEET_SUFFIX", "calibration_info", "datasheet_base", "is_calibrated",
           "profile_label", "resolve_gpu"]


def _is_path(name: str) -> bool:
    p = Path(name)
    return p.is_dir() or p.suffix == ".toml" or "/" in name or "\\" in name


def resolve_gpu(name: str) -> str:
    """The profile a GPU name means in plan/simulate/sweep/demo/export/schedule/cost: ``<name>-calibrated`` where one
    exists.

    ``<gpu>-datasheet`` and ``<gpu>-calibrated`` are kept as given (so resolving twice changes nothing), as is a
    folder path; a GPU without a calibrated profile keeps its (datasheet) name.
    """
    from dcpsim.hardware import list_profiles

    name = str(name)
    if _is_path(name) or name.endswith((CALIBRATED_SUFFIX, DATASHEET_SUFFIX)):
        return name
    return name + CALIBRATED_SUFFIX if name + CALIBRATED_SUFFIX in list_profiles() else name


def calibration_info(name: str) -> dict | None:
    """``calibration.json`` beside a calibrated profile (None for an uncalibrated one)."""
    from dcpsim.hardware import get_profile

    if _is_path(str(name)) and not Path(str(name)).exists():
        return None
    try:
        prof = get_profile(name)
    except Exception:  # noqa: BLE001 - a label never fails a run; the run itself reports a bad name
        return None
    if prof.path is None:
        return None
    folder = Path(prof.path)
    folder = folder.parent if folder.suffix == ".toml" else folder
    f = folder / "calibration.json"
    if not f.is_file():
        return None
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError):
        return None


def is_calibrated(name: str) -> bool:
    return calibration_info(name) is not None


def _kind(name: str) -> str:
    from dcpsim.hardware import get_profile

    try:
        return str(get_profile(name).kind)
    except Exception:  # noqa: BLE001 - a label never fails a run
        return ""


def profile_label(name: str) -> str:
    """One line for the output: which profile, calibrated on what, or that it is uncalibrated (an upper bound)."""
    name = str(name)
    info = calibration_info(name)
    if info is not None:
        held = info.get("held_out_error", {})
        commit = str(info.get("revision", {}).get("git_commit", ""))[:7]
        held_txt = (f"; held-out rows mean |error| {100 * held['mean_abs_error']:.1f}% over {held['compared']}"
                    if held.get("compared") else "")
        return (f"{name}: calibrated ({', '.join(info.get('params', []))}) on {len(info.get('fit_rows', []))} "
                f"published {info.get('gpu', '')} runs (fit rows of experiments/published_throughput, dcpsim "
                f"{commit}{held_txt}; CALIBRATION.md)")
    base = datasheet_base(name) or name
    from dcpsim.hardware import get_profile

    try:
        get_profile(name)
    except ConfigError as exc:  # not a profile at all: never described as datasheet figures
        return f"{name}: NOT A PROFILE (runs on it fail): expected {exc.expected}"
    kind = _kind(name)
    if kind in ("measured", "mixed"):
        return (f"{name}: measured kernel tables ({kind}), not calibrated against published runs: no validated "
                "error band")
    if name.endswith(DATASHEET_SUFFIX):
        return (f"{name}: UNCALIBRATED datasheet figures (profile {base}), an optimistic upper bound; the "
                f"default for this GPU is {base}{CALIBRATED_SUFFIX}")
    return (f"{name}: UNCALIBRATED (no calibrated profile for this GPU): datasheet figures, an optimistic upper "
            "bound, not validated against published runs")
