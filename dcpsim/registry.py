"""One name registry for every extension point (policies, network models, engines, plots).

A :class:`Registry` maps names to classes (or functions). Built-ins are listed
as lazy ``"module:attribute"`` paths, imported on first use, so importing a
package that holds a registry stays cheap; code outside dcpsim adds its own
with :meth:`Registry.register`. A name is registered once: a duplicate raises
:class:`~dcpsim.errors.ConfigError`, and so does an unknown name, listing the
names there are. Adding a built-in is one new module plus one line in its
registry's table.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from dcpsim.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """Names -> entries (classes that subclass ``base``, or callables when ``base`` is None).

    ``field`` is the configuration field that names an entry (``"sim.network"``): every error names it.
    """

    def __init__(self, field: str, builtins: dict[str, str], base: type | None = None) -> None:
        self.field = field
        self.base = base
        self._entries: dict[str, Any] = dict(builtins)

    def register(self, name: str, entry: T | str) -> None:
        """Register ``entry`` (a class, a callable, or a lazy ``"module:attribute"`` path) under ``name``."""
        if not isinstance(name, str) or not name:
            raise ConfigError(self.field, name, "a non-empty string")
        if name in self._entries:
            raise ConfigError(self.field, name, f"a name not already registered (taken: {sorted(self._entries)})")
        if not isinstance(entry, str) and not self._accepts(entry):
            what = f"a {self.base.__name__} subclass" if self.base is not None else "a callable"
            raise ConfigError(f"{self.field} entry", entry, f"{what} or a 'module:attribute' string")
        self._entries[name] = entry

    def _accepts(self, entry: Any) -> bool:
        if self.base is None:
            return callable(entry)
        return inspect.isclass(entry) and issubclass(entry, self.base)

    def names(self) -> list[str]:
        """Registered names, built-ins first in their declared order."""
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def check(self, name: str) -> None:
        """Raise :class:`ConfigError` naming the field unless ``name`` is registered (imports nothing)."""
        if name not in self._entries:
            raise ConfigError(self.field, name, f"one of {self.names()}")

    def get(self, name: str) -> T:
        """The entry registered under ``name`` (a built-in is imported on first use)."""
        self.check(name)
        entry = self._entries[name]
        if isinstance(entry, str):
            mod, _, attr = entry.partition(":")
            entry = getattr(importlib.import_module(mod), attr)
            self._entries[name] = entry
        return entry

    def copy(self) -> Registry[T]:
        """An independent registry with the same entries (tests register into a copy)."""
        out: Registry[T] = Registry(self.field, {}, self.base)
        out._entries = dict(self._entries)
        return out

    def items(self) -> list[tuple[str, Callable[..., Any]]]:
        """Every (name, entry), built-ins imported."""
        return [(n, self.get(n)) for n in self.names()]
