"""The files a sweep's runs read by path, identified by their contents.

A run's id (:meth:`~dcpsim.run.config.RunConfig.config_hash`) names a lengths
file (``workload.name``), a profile folder or file (``hardware.gpu``) or a
model file (``model.name``) by its path, so a resumed sweep would skip the runs
it finished on a file's *old* contents and mix them with runs on the new ones.
``sweep.json`` records each such input's SHA-256 (:func:`input_digests`); a
resume whose inputs changed is refused (:func:`check_inputs_unchanged`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from dcpsim.errors import ConfigError

#: the fields whose value may be a path the run reads
PATH_FIELDS = ("workload.name", "hardware.gpu", "model.name")


def _values(spec: dict[str, Any]) -> set[str]:
    """Every text value of :data:`PATH_FIELDS` in a spec's ``to_dict()`` (its base and its axes)."""
    out: set[str] = set()
    base = spec.get("base") or {}
    for f in PATH_FIELDS:
        sec, key = f.split(".")
        v = (base.get(sec) or {}).get(key) if isinstance(base.get(sec), dict) else None
        if isinstance(v, str):
            out.add(v)
    for g in spec.get("axes") or []:
        fields = g.get("fields") or {} if isinstance(g, dict) else {}
        for f in PATH_FIELDS:
            vals = fields.get(f)
            vals = vals.get("choices", []) if isinstance(vals, dict) else vals
            out.update(v for v in (vals if isinstance(vals, list | tuple) else [vals]) if isinstance(v, str))
    return out


def _digest(p: Path) -> str:
    h = hashlib.sha256()
    files = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file())
    for q in files:
        h.update(str(q.relative_to(p)).encode() if q != p else b"")
        h.update(q.read_bytes())
    return h.hexdigest()


def input_digests(spec: dict[str, Any]) -> dict[str, str]:
    """``{path: sha256}`` of the files and profile folders the spec's runs read by path (names of presets,
    shipped profiles and models are not paths here and are left out)."""
    out: dict[str, str] = {}
    for v in sorted(_values(spec)):
        p = Path(v)
        if not v or not ("/" in v or "\\" in v or p.suffix):
            continue  # a preset or registry name (a path has a folder or a suffix)
        try:
            if p.is_file() or (p.is_dir() and any(p.iterdir())):
                out[v] = _digest(p)
        except OSError:
            continue  # unreadable: the run itself reports it
    return out


def check_inputs_unchanged(old: dict[str, Any], spec: dict[str, Any], out: Path) -> None:
    """Refuse to resume the sweep in ``out`` (its ``sweep.json``: ``old``) when a file its finished runs read by
    path now has other contents: those rows would be kept as if of the new contents."""
    before = old.get("inputs")
    if not isinstance(before, dict):
        return  # written before inputs were recorded
    now = input_digests(spec)
    changed = sorted(k for k, d in before.items() if k in now and now[k] != d)
    if changed:
        raise ConfigError("--out", str(out), f"a folder whose finished runs read the same inputs; {changed[0]!r} "
                          f"changed since they ran (SHA-256 {str(before[changed[0]])[:12]} -> {now[changed[0]][:12]})"
                          "; pick another folder (or remove its results/ to run every row again)")
