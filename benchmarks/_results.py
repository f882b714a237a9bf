"""Where the benchmarks' ``--json``/``--out`` results go: through :mod:`dcpsim.outdir`, like every dcpsim command.

The path is checked before the work starts (a new file, or one dcpsim wrote;
never a file of the user's), and the result is written atomically.
"""

from __future__ import annotations

from typing import Any


def check_result_path(path: str | None, flag: str = "--json") -> None:
    """Refuse, in one line and before any work, a results path dcpsim may not write."""
    if not path:
        return
    from dcpsim.errors import ConfigError
    from dcpsim.outdir import check_out_file

    try:
        check_out_file(path, field=flag, suffixes=(".json",))
    except ConfigError as e:
        raise SystemExit(f"error: {e} (remove or rename it)") from None


def save_result(path: str | None, obj: Any, indent: int = 2) -> None:
    """Write ``obj`` as JSON to ``path`` (checked by :func:`check_result_path`), atomically."""
    if path:
        from dcpsim.outdir import write_json

        write_json(path, obj, indent=indent)
