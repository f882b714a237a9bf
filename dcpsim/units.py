"""One units convention for every count a flag takes (tokens, sequences, ...).

SI suffixes count in powers of ten: K = 10^3, M = 10^6, G = B = 10^9,
T = 10^12 (``2T``, ``300B``, ``16M``, ``1e12``). Binary suffixes are only the
ones that say so: Ki = 2^10, Mi = 2^20, Gi = 2^30, Ti = 2^40 (Llama 2's
"4M-token" batch is 1,024 sequences of 4,096 tokens = 4,194,304 = ``4Mi``).
Case does not matter; ``_`` and ``,`` are ignored (``4_194_304``).

This is hand-written rather than a units library because it is a dozen lines
and the libraries that parse suffixes (humanfriendly, pint) are about bytes
or physical units, not counts, and would be a new dependency.
"""

from __future__ import annotations

import math
import re

from dcpsim.errors import ConfigError

__all__ = ["UNITS_HELP", "check_token_counts", "parse_count"]

_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "B": 10**9, "T": 10**12,
          "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40}
UNITS_HELP = "K/M/G(=B)/T are 1e3/1e6/1e9/1e12; Ki/Mi/Gi/Ti are powers of two (4Mi = 4,194,304)"
"""The units sentence every count flag's help carries."""


def parse_count(text: str | float | int, field: str, what: str = "count", example: str = "4Mi, 16M, 4194304 or 2T") -> int:
    """``"4M"`` -> 4,000,000; ``"4Mi"`` -> 4,194,304; ``"2T"``; ``"300B"``; ``"1e12"``; a positive whole count.

    Raises ConfigError naming ``field`` (and the convention) otherwise.
    """
    s = str(text).strip().upper().replace("_", "").replace(",", "")
    m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:E[+-]?[0-9]+)?)\s*([KMGBT]I?)?", s)
    unit = (m.group(2) or "") if m else ""
    v = float(m.group(1)) * _UNITS[unit] if m and unit in _UNITS else -1.0
    if not (v >= 1 and math.isfinite(v)):
        raise ConfigError(field, text, f"a positive {what} such as {example} ({UNITS_HELP})")
    return int(round(v))


def check_token_counts(values, field: str, *, non_empty: bool = False):
    """``values`` as a 1-D int64 numpy array of positive whole token counts (ConfigError naming ``field``
    otherwise; with ``non_empty``, an empty one too). Checked before the cast, which truncated 4096.7 to 4096
    and made inf -2**63."""
    import numpy as np  # (here: the CLI's --help imports this module without numpy)

    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ConfigError(field, f"array of shape {arr.shape}", "a 1-D array of sequence lengths")
    if non_empty and arr.size == 0:
        raise ConfigError(field, [], "a non-empty list of positive integer token counts")
    # isfinite first: inf == floor(inf)
    if arr.size and (arr.dtype.kind not in "iuf" or not np.isfinite(arr).all() or np.any(arr != np.floor(arr))
                     or arr.min() < 1):
        raise ConfigError(field, arr[:8].tolist(), "positive integer token counts")
    return arr.astype(np.int64)
