"""Output safety: dcpsim writes only inside the folder it was given, only files it owns, atomically.

Every command that writes goes through this module:

* :func:`check_out_dir` / :func:`check_out_file` run **before any work**: the
  path must be (or be able to become) a writable folder (a file's folder), must
  not be a file where a folder is wanted (or a folder where a file is wanted),
  and an existing folder may hold only files dcpsim wrote there (unless
  ``force``; the user's files are never overwritten otherwise).
* :func:`write_text`, :func:`write_bytes`, :func:`write_json` and
  :func:`write_with` (for writers that take a path: matplotlib, pandas,
  pyarrow) write a temporary file in the same folder, ``fsync`` it and
  ``os.replace`` it over the target, so a reader (or a killed process) sees
  the old file or the new one, never half of one. Each written file is
  recorded in the folder's manifest.

Ownership is recorded per folder in ``.dcpsim-manifest.json`` (JSON: file
name -> size in bytes, modification time and SHA-256 of the content when
written). A file is dcpsim's when the manifest of its folder lists its name
*and* its content is still what dcpsim wrote: a file the user edited since
(a hand-tuned ``summary.json``) is the user's and is refused like any other.
The entry is made before the file is renamed into place, so a process killed
at any moment never leaves a file of its own that looks foreign.

Single-file outputs (``--trace FILE``, ``--plot FILE``, ``--csv FILE``,
``plot --out FILE``: paths checked with :func:`check_out_file`) put nothing
else into the user's folder: their ownership goes to a per-user registry
(``owned-files.json`` in ``$DCPSIM_STATE_DIR``, else
``$XDG_STATE_HOME/dcpsim``, else ``~/.local/state/dcpsim``; absolute path ->
the same fingerprint), unless the folder already is a dcpsim folder with a
manifest. Names starting with ``.dcpsim-`` (the manifest, temporary
files, the sweep lock) are dcpsim's own; ``.gitignore``/``.gitkeep`` markers do not count
as foreign (and are never written). A rerun into the same folder, and a resumed
sweep, therefore overwrite only what an earlier run wrote.

``force=True`` (the CLI's ``--force``) allows writing into a folder that
holds other files and overwriting a file dcpsim did not write; it is
remembered for the folders and files checked with it during this process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from dcpsim.errors import ConfigError, DcpsimError

__all__ = [
    "MANIFEST",
    "OWN_PREFIX",
    "check_out_dir",
    "changed_since_written",
    "check_distinct",
    "check_out_file",
    "fingerprint",
    "foreign_files",
    "is_owned",
    "owned_names",
    "record_owned",
    "remove_owned",
    "reset_forced",
    "state_dir",
    "write_bytes",
    "write_json",
    "write_text",
    "write_with",
]

MANIFEST = ".dcpsim-manifest.json"
OWN_PREFIX = ".dcpsim-"
TMP_PREFIX = ".dcpsim-tmp-"
NEUTRAL_NAMES = frozenset({".gitignore", ".gitkeep", ".gitattributes", ".keep"})
"""Files that do not make a folder "someone else's" (version-control markers); dcpsim never writes them."""
REGISTRY = "owned-files.json"
_REGISTRY_MAX = 5_000  # entries kept; the oldest are dropped (a dropped file then needs --force to be overwritten)
_SCAN_LIMIT = 20_000  # entries looked at before a folder counts as "not dcpsim's" without a full walk
_FORCED: set[str] = set()
_SINGLE: set[str] = set()


class OutputError(DcpsimError):
    """Writing an output failed (disk full, permissions); the target file is unchanged."""


def reset_forced() -> None:
    """Forget the ``force`` permissions and single-file outputs checked so far (the CLI calls this per command)."""
    _FORCED.clear()
    _SINGLE.clear()


def _key(p: Path) -> str:
    return os.path.abspath(p)


# ------------------------------------------------------------------ manifest
Entry = dict[str, Any]
"""What dcpsim remembers of a file it wrote: ``{"bytes": n, "mtime_ns": t, "sha256": hex}``."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fingerprint(path: str | Path) -> Entry:
    """Size, modification time and SHA-256 of the file at ``path``."""
    st = os.stat(path)
    return {"bytes": int(st.st_size), "mtime_ns": int(st.st_mtime_ns), "sha256": _sha256(Path(path))}


def _unchanged(p: Path, entry: Any) -> bool:
    """Whether ``p`` still holds what dcpsim wrote (``entry`` from a manifest; a bare int is an old size-only entry)."""
    try:
        st = p.lstat()
    except OSError:
        return False
    if isinstance(entry, bool) or not isinstance(entry, (int, dict)):
        return False
    if isinstance(entry, int):
        return st.st_size == entry
    if st.st_size != entry.get("bytes"):
        return False
    if st.st_mtime_ns == entry.get("mtime_ns"):
        return True
    try:
        return _sha256(p) == entry.get("sha256")
    except OSError:
        return False


def owned_names(folder: str | Path) -> dict[str, Any]:
    """``{file name: entry}`` of the files dcpsim wrote in ``folder`` (empty if none or unreadable)."""
    m = Path(folder) / MANIFEST
    try:
        data = json.loads(m.read_text(encoding="utf-8"))
        files = data.get("files", {})
        return {str(k): v for k, v in files.items()} if isinstance(files, dict) else {}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}  # no manifest, or one that cannot be read: nothing is provably dcpsim's


def changed_since_written(path: str | Path) -> bool:
    """Whether ``path`` is listed as dcpsim's but its content changed since (someone edited it)."""
    p = Path(path)
    owned = owned_names(p.parent)
    if p.name in owned:
        return not _unchanged(p, owned[p.name])
    entry = _registry().get(_key(p))
    return entry is not None and not _unchanged(p, entry)


def is_owned(path: str | Path, owned: dict[str, Any] | None = None) -> bool:
    """Whether dcpsim wrote ``path`` and it is unchanged since (manifest of its folder, or the single-file registry)."""
    p = Path(path)
    if p.name.startswith(OWN_PREFIX):
        return True
    if p.is_symlink():
        return False
    owned = owned_names(p.parent) if owned is None else owned
    if p.name in owned:
        return _unchanged(p, owned[p.name])
    entry = _registry().get(_key(p))
    return entry is not None and _unchanged(p, entry)


def _write_manifest(folder: Path, owned: dict[str, Any], keep: set[str] = frozenset()) -> None:
    owned = {k: v for k, v in owned.items() if k in keep or (folder / k).exists()}
    text = json.dumps({"about": "files dcpsim wrote in this folder (name: bytes, mtime_ns, sha256); dcpsim "
                                "overwrites only these, and only while their content is what it wrote",
                       "files": dict(sorted(owned.items()))}, indent=1) + "\n"
    _atomic(folder / MANIFEST, lambda t: t.write_text(text, encoding="utf-8"))


def record_owned(paths: Iterable[str | Path], sources: Iterable[str | Path] | None = None) -> None:
    """Add files (in one folder or several) to their folders' manifests.

    ``sources``: the files whose content will become ``paths`` (the temporary
    files of an atomic write); by default ``paths`` themselves.
    """
    by_dir: dict[Path, dict[str, Entry]] = {}
    paths = [Path(p) for p in paths]
    srcs = [Path(s) for s in sources] if sources is not None else paths
    for p, src in zip(paths, srcs, strict=True):
        by_dir.setdefault(p.parent, {})[p.name] = fingerprint(src)
    for folder, new in by_dir.items():
        _write_manifest(folder, owned_names(folder) | new, keep=set(new))


# ------------------------------------------------------------------ single-file registry
def state_dir() -> Path:
    """Where dcpsim keeps per-user state (the single-file registry)."""
    env = os.environ.get("DCPSIM_STATE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "dcpsim"


_REGISTRY_CACHE: dict[str, tuple[int, dict[str, Any]]] = {}


def _registry() -> dict[str, Any]:
    """The registry's ``{absolute path: entry}`` (read again only when the file changed)."""
    f = state_dir() / REGISTRY
    try:
        stamp = f.stat().st_mtime_ns
        cached = _REGISTRY_CACHE.get(str(f))
        if cached is not None and cached[0] == stamp:
            return cached[1]
        data = json.loads(f.read_text(encoding="utf-8"))
        files = data.get("files", {})
        files = files if isinstance(files, dict) else {}
    except (OSError, ValueError, AttributeError):
        return {}
    _REGISTRY_CACHE[str(f)] = (stamp, files)
    return files


def _register_single(p: Path, src: Path) -> None:
    """Remember that dcpsim wrote ``p`` (content of ``src``) in the per-user registry (a warning if it cannot)."""
    import fcntl
    import warnings

    from dcpsim.errors import DcpsimWarning

    d = state_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        entry = fingerprint(src)
        with open(d / f"{REGISTRY}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _REGISTRY_CACHE.clear()
            files = {k: v for k, v in _registry().items() if k != _key(p)}
            if len(files) >= _REGISTRY_MAX:
                files = {k: v for k, v in files.items() if os.path.exists(k)}
                files = dict(list(files.items())[-(_REGISTRY_MAX - 1):])
            files[_key(p)] = entry
            text = json.dumps({"about": "single files dcpsim wrote outside its own folders (absolute path: bytes, "
                                        "mtime_ns, sha256)", "files": files}, indent=0) + "\n"
            _atomic(d / REGISTRY, lambda t: t.write_text(text, encoding="utf-8"))
    except OSError as exc:
        warnings.warn(f"could not record {p} as dcpsim's in {d} ({exc.strerror or exc}); writing it again will "
                      "need --force", DcpsimWarning, stacklevel=4)


def _record(p: Path, tmp: Path) -> None:
    """Record ``p`` (about to get ``tmp``'s content) as dcpsim's: its folder's manifest, or the registry for a single file."""
    if _key(p) in _SINGLE and not (p.parent / MANIFEST).exists():
        _register_single(p, tmp)
    else:
        record_owned([p], [tmp])


def remove_owned(path: str | Path) -> bool:
    """Delete ``path`` if dcpsim wrote it (and drop it from the manifest); never deletes anything else."""
    p = Path(path)
    if not is_owned(p) or p.name == MANIFEST:
        return False
    p.unlink(missing_ok=True)
    owned = owned_names(p.parent)
    owned.pop(p.name, None)
    _write_manifest(p.parent, owned)
    return True


def foreign_files(folder: str | Path, *, limit: int = 3, ignore: Callable[[Path], bool] | None = None) -> list[Path]:
    """Up to ``limit`` files (or links, or other entries) under ``folder`` that dcpsim did not write.

    ``ignore(path)`` may exclude entries from the check (a sweep ignores parquet
    parts it did not write instead of refusing the folder). An empty folder and
    empty subfolders are fine.
    """
    found: list[Path] = []
    seen = 0
    stack = [Path(folder)]
    while stack and len(found) < limit:
        d = stack.pop()
        owned = owned_names(d)
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            found.append(d)
            continue
        for e in entries:
            seen += 1
            p = Path(e.path)
            if seen > _SCAN_LIMIT:
                return found + [Path(folder) / f"... (more than {_SCAN_LIMIT} entries)"]
            if (ignore is not None and ignore(p)) or e.name in NEUTRAL_NAMES:
                continue
            if e.is_dir(follow_symlinks=False):
                stack.append(p)
            elif not is_owned(p, owned):
                found.append(p)
                if len(found) >= limit:
                    break
    return found


# ------------------------------------------------------------------ checks before work
NAME_MAX = 255
"""Bytes in one file or folder name on Linux file systems."""
_TMP_EXTRA = len(TMP_PREFIX) + 9  # a temporary file is named TMP_PREFIX + 8 hex digits + "-" + the final name


def _check_names(p: Path, field: str, what: str, *, file: bool) -> None:
    """Every name in ``p`` short enough to write (a file's with dcpsim's temporary prefix); checked before any work."""
    for i, part in enumerate(p.parts):
        limit = NAME_MAX - (_TMP_EXTRA if file and i == len(p.parts) - 1 else 0)
        n = len(os.fsencode(part))
        if n > limit:
            shown = part if len(part) <= 40 else part[:18] + "..." + part[-19:]
            raise ConfigError(field, shown, f"{what} whose names have at most {limit} bytes (this one has {n}; "
                              f"the file system allows {NAME_MAX}"
                              + (f" and dcpsim writes through a temporary name {_TMP_EXTRA} bytes longer)" if limit < NAME_MAX
                                 else ")"))


def _nearest_existing(p: Path) -> Path:
    q = p
    while not q.exists() and not q.is_symlink():
        if q.parent == q:
            break
        q = q.parent
    return q


def _check_creatable(p: Path, field: str, what: str) -> None:
    """``p`` does not exist: its nearest existing ancestor must be a folder where a folder can be made."""
    anc = _nearest_existing(p.parent if p.parent != p else p)
    if not anc.is_dir():
        raise ConfigError(field, str(p), f"{what} path whose parents are folders ({anc} is not a folder)")
    _probe(anc, p, field, what)


def _probe(folder: Path, p: Path, field: str, what: str) -> None:
    """Make and remove an empty ``.dcpsim-tmp-`` folder in ``folder``: permissions alone miss read-only mounts, /proc, ..."""
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(field, str(p), f"{what} in a folder you may write to ({folder} is not writable)")
    probe = folder / f"{TMP_PREFIX}probe-{secrets.token_hex(4)}"
    try:
        probe.mkdir()
    except OSError as exc:
        raise ConfigError(field, str(p), f"{what} in a folder dcpsim can write to ({folder}: {exc.strerror})") from None
    with contextlib.suppress(OSError):
        probe.rmdir()


def check_out_dir(path: str | Path, *, force: bool = False, field: str = "--out",
                  ignore: Callable[[Path], bool] | None = None) -> Path:
    """Check, before any work, that ``path`` can be dcpsim's output folder; returns it as a Path.

    It must be an existing writable folder or a path that can be created;
    an existing folder may hold only files dcpsim wrote (see the module
    docstring) unless ``force``. Nothing is created here.
    """
    p = Path(path)
    if str(path) == "" or "\x00" in str(path):
        raise ConfigError(field, str(path), "a folder path")
    _check_names(p, field, "a folder path", file=False)
    force = force or _is_forced(p)
    if p.exists() or p.is_symlink():
        if not p.is_dir():
            raise ConfigError(field, str(p), "a folder (this path is a file)")
        _probe(p, p, field, "a folder")
        if not force:
            bad = foreign_files(p, ignore=ignore)
            if bad:
                names = ", ".join(_rel(b, p) + (" (changed since dcpsim wrote it)" if changed_since_written(b) else "")
                                  for b in bad)
                raise ConfigError(field, str(p), f"an empty folder or one dcpsim wrote; it holds files dcpsim did not "
                                  f"write ({names}{', ...' if len(bad) >= 3 else ''}); pick another folder or pass "
                                  "--force to write there anyway")
    else:
        _check_creatable(p, field, "a folder")
    if force:
        _FORCED.add(_key(p))
    return p


def check_out_file(path: str | Path, *, force: bool = False, field: str = "--out",
                   suffixes: tuple[str, ...] | None = None) -> Path:
    """Check, before any work, that dcpsim may write the file ``path``; returns it as a Path.

    Its folder must exist (or be creatable) and be writable; the path must not
    be a folder; an existing file must be one dcpsim wrote unless ``force``.
    ``suffixes`` (lower case, with the dot) restricts the file type.
    """
    p = Path(path)
    if str(path) == "" or "\x00" in str(path) or str(path).endswith(os.sep):
        raise ConfigError(field, str(path), "a file path")
    _check_names(p, field, "a file path", file=True)
    force = force or _is_forced(p)
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise ConfigError(field, str(p), f"a file name ending in {' or '.join(suffixes)}")
    if p.is_dir():
        raise ConfigError(field, str(p), "a file path (this is a folder)")
    if p.exists() or p.is_symlink():
        _probe(p.parent, p, field, "a file")
        if not force and not is_owned(p):
            why = ("it changed since dcpsim wrote it" if changed_since_written(p)
                   else "this file was not written by dcpsim")
            raise ConfigError(field, str(p), f"a new file or one dcpsim wrote ({why}; pass --force to overwrite it)")
    else:
        _check_creatable(p, field, "a file")
    if force:
        _FORCED.add(_key(p))
    _SINGLE.add(_key(p))
    return p


def check_distinct(outputs: dict[str, Iterable[str | Path]]) -> None:
    """Refuse (before any work) two output flags that would write the same file: ``{flag: files it writes}``.

    ``--trace o/summary.json --out o`` would have one output silently replace the other.
    """
    seen: dict[str, tuple[str, Path]] = {}
    for flag, files in outputs.items():
        for f in files:
            k = _key(Path(f))
            if k in seen and seen[k][0] != flag:
                other, q = seen[k]
                raise ConfigError(flag, str(f), f"a path that {other} does not also write ({other} writes {q} there; "
                                  "pick another name)")
            seen[k] = (flag, Path(f))


def _rel(p: Path, base: Path) -> str:
    try:
        return str(p.relative_to(base))
    except ValueError:
        return str(p)


# ------------------------------------------------------------------ atomic writes
def _is_forced(p: Path) -> bool:
    """Whether ``p`` is (inside) a folder or file checked with ``force`` in this process."""
    k = _key(p)
    return any(k == f or k.startswith(f.rstrip(os.sep) + os.sep) for f in _FORCED)


def _allowed(p: Path, force: bool) -> bool:
    return force or not p.exists() and not p.is_symlink() or is_owned(p) or _is_forced(p)


def _fsync_dir(d: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _atomic(final: Path, writer: Callable[[Path], Any], before_replace: Callable[[Path], Any] | None = None) -> None:
    tmp = final.with_name(f"{TMP_PREFIX}{secrets.token_hex(4)}-{final.name}")
    try:
        writer(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        if before_replace is not None:
            before_replace(tmp)
        os.replace(tmp, final)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    _fsync_dir(final.parent)


def write_with(path: str | Path, writer: Callable[[Path], Any], *, force: bool = False, mode: int | None = None) -> Path:
    """Write ``path`` atomically: ``writer(tmp)`` writes a temporary file in the same folder (same suffix).

    Refuses (``ConfigError``) to replace a file dcpsim did not write unless
    ``force`` or the file/folder was checked with ``force``. ``mode``: file
    permissions to set (e.g. ``0o755`` for a script). Returns ``path``.
    """
    p = Path(path)
    if not _allowed(p, force):
        why = "it changed since dcpsim wrote it" if changed_since_written(p) else "it was not written by dcpsim"
        raise ConfigError("--out", str(p), f"a file dcpsim wrote ({why}; pass --force to overwrite)")

    def _write(tmp: Path) -> None:
        writer(tmp)
        if mode is not None:
            os.chmod(tmp, mode)

    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        _atomic(p, _write, before_replace=lambda tmp: _record(p, tmp))
    except OSError as exc:  # disk full, permissions changed, folder removed meanwhile: one line, old file intact
        raise OutputError(f"could not write {p}: {exc.strerror or exc} (nothing there was changed)") from None
    return p


def write_bytes(path: str | Path, data: bytes, *, force: bool = False, mode: int | None = None) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`write_with`)."""
    return write_with(path, lambda t: t.write_bytes(data), force=force, mode=mode)


def write_text(path: str | Path, text: str, *, force: bool = False, mode: int | None = None) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically (see :func:`write_with`)."""
    return write_bytes(path, text.encode("utf-8"), force=force, mode=mode)


def write_json(path: str | Path, obj: Any, *, force: bool = False, indent: int | None = 2, **kw: Any) -> Path:
    """Write ``obj`` as JSON (``json.dumps(obj, indent=indent, **kw)``) to ``path`` atomically."""
    return write_text(path, json.dumps(obj, indent=indent, **kw) + "\n", force=force)
