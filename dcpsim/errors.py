"""Typed errors shared by every dcpsim layer.

Every error that is caused by input names the field at fault, the value it
got and what was expected, so the CLI can print one line and a sweep can
record it as a row.
"""

from __future__ import annotations

from typing import Any


class DcpsimError(Exception):
    """Base class of every error dcpsim raises on purpose."""


class DcpsimWarning(UserWarning):
    """Something the user should know that does not stop the command (the CLI prints it as one line)."""


class ConfigError(DcpsimError, ValueError):
    """Bad input: names the field, the value and what was expected."""

    def __init__(self, field: str, value: Any, expected: str, *, where: str | None = None):
        self.field = field
        self.value = value
        self.expected = expected
        self.where = where
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}{field}: got {value!r}; expected {expected}")


class ProfileError(ConfigError):
    """A hardware profile on disk is malformed."""


class InfeasibleError(DcpsimError):
    """A configuration or pack that cannot run (memory, capacity, divisibility).

    ``kind`` is a short machine-readable tag (``"memory"``, ``"capacity"``,
    ``"divisibility"``, ...) so that a sweep can tabulate reasons.
    """

    def __init__(self, kind: str, message: str):
        self.kind = kind
        self.reason = message
        super().__init__(f"infeasible ({kind}): {message}")
