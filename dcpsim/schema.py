"""One validated input layer: strict typed models with physical bounds, errors in the user's words.

Every input dcpsim reads (run configs, sweep and experiment specs, model
specs, hardware profiles, policy options, CLI flags) is checked by a
pydantic model derived from :class:`InputModel`:

* strict types: ``2.5`` is not an int, ``"false"`` is not a bool, ``true``
  is not a number;
* finite numbers only (``nan``, ``inf`` and ``1e400``, which TOML reads as
  ``inf``, are refused);
* bounds declared once on the field (``Field(gt=0)``, ``Field(ge=1, le=1)``);
* unknown keys are refused.

A new field gets all of this by being declared, e.g.::

    vp: int = Field(1, ge=1, description="virtual pipeline stages per rank")

Errors are :class:`~dcpsim.errors.ConfigError` naming the user's field (or
CLI flag), the value and what was expected, described from the field's own
declaration (:func:`describe`), never in pydantic's wording.
"""

from __future__ import annotations

import functools
import math
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from dcpsim.errors import ConfigError

STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class InputModel(BaseModel):
    """Base of every input model: strict types, finite numbers, no unknown keys, immutable."""

    model_config = STRICT


# ------------------------------------------------------------------ files
def read_text(path: str | Path, what: str, kind: str = "file") -> str:
    """The UTF-8 text of ``path``; a one-line :class:`ConfigError` naming the file otherwise."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(what, str(p), f"an existing {kind}")
    try:
        return p.read_bytes().decode("utf-8-sig")  # a byte-order mark (Excel, Notepad) is not part of the text
    except UnicodeDecodeError as exc:
        raise ConfigError(what, str(p), f"a UTF-8 text file (byte {exc.start} is not UTF-8)") from None
    except OSError as exc:
        raise ConfigError(what, str(p), f"a readable file ({exc.strerror})") from None


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """Parse the TOML file ``path`` (UTF-8); one-line :class:`ConfigError` naming the file otherwise."""
    text = read_text(path, what, "TOML file")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(what, str(path), f"valid TOML ({exc})") from None


# ------------------------------------------------------- plain-word types
def _unwrap(annotation: Any, metadata: Sequence[Any] = ()) -> tuple[Any, list[Any]]:
    meta = list(metadata)
    while get_origin(annotation) is typing.Annotated:
        args = get_args(annotation)
        annotation, meta = args[0], meta + list(args[1:])
    flat: list[Any] = []
    for m in meta:  # Field(ge=1) inside Annotated arrives as a FieldInfo holding the bounds
        flat.extend(m.metadata if isinstance(m, FieldInfo) else [m])
    return annotation, flat


def _bounds(metadata: Sequence[Any]) -> str:
    words = []
    for m in metadata:
        for attr, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            v = getattr(m, attr, None)
            if v is not None and isinstance(m, (at.Gt, at.Ge, at.Lt, at.Le, at.Interval)):
                words.append(f"{op} {v:g}" if isinstance(v, float) else f"{op} {v}")
        if isinstance(m, at.MinLen) and m.min_length:
            words.append(f"at least {m.min_length} item(s)")
        if isinstance(m, at.MaxLen) and m.max_length is not None:
            words.append(f"at most {m.max_length} item(s)")
    return " and ".join(words)


def describe(annotation: Any, metadata: Sequence[Any] = ()) -> str:
    """What a value of this declared type must be, in plain words (``'an integer >= 1 or "auto"'``)."""
    annotation, meta = _unwrap(annotation, metadata)
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        if len(members) == 1:  # Optional[X]: None means "not given", not a value to type
            return describe(members[0], meta)
        tags = [t for m in members for t in _type_tags(m)]
        if tags and all(_is_model_class(m) for m in members):  # a discriminated union of tables
            return "a table with type = one of " + ", ".join(f'"{t}"' for t in tags)
        parts = [describe(a) for a in members]
        text = " or ".join(parts)
        bounds = _bounds(meta)
        return f"{text} ({bounds})" if bounds else text
    if origin is Literal:
        vals = [f'"{v}"' if isinstance(v, str) else str(v) for v in get_args(annotation)]
        return vals[0] if len(vals) == 1 else "one of " + ", ".join(vals)
    bounds = _bounds(meta)
    tail = f" {bounds}" if bounds else ""
    if annotation is bool:
        return "true or false (a boolean, not text)"
    if annotation is int:
        return f"an integer{tail}"
    if annotation is float:
        return f"a finite number{tail}"
    if annotation is str:
        return "non-empty text" if bounds == "at least 1 item(s)" else (f"text with {bounds}" if bounds else "text")
    if origin in (list, tuple, Sequence) or annotation in (list, tuple):
        inner = get_args(annotation)
        what = describe(inner[0]) if inner else "any value"
        return "a list" + (f" with {bounds}" if bounds else "") + f", each {what}"
    if origin in (dict, Mapping) or annotation is dict:
        return "a table (key = value pairs)"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"a table with the keys {', '.join(annotation.model_fields)}"
    return getattr(annotation, "__name__", str(annotation))


# --------------------------------------------------------- error translation
def _members(annotation: Any) -> list[Any]:
    annotation, _ = _unwrap(annotation)
    if get_origin(annotation) in (typing.Union, types.UnionType):
        out = []
        for a in get_args(annotation):
            out.extend(_members(a))
        return out
    return [annotation]


def _type_tags(m: Any) -> tuple:
    if not _is_model_class(m) or "type" not in m.model_fields:
        return ()
    return get_args(_unwrap(m.model_fields["type"].annotation)[0])


def _model_member(annotation: Any, tag: str) -> type[BaseModel] | None:
    """The BaseModel in a (discriminated) union whose ``type`` literal or class name is ``tag``."""
    for m in _members(annotation):
        if isinstance(m, type) and issubclass(m, BaseModel):
            disc = m.model_fields.get("type")
            tags = get_args(_unwrap(disc.annotation)[0]) if disc is not None else ()
            if tag in tags or tag == m.__name__:
                return m
    return None


def locate(model: Any, loc: Sequence[str | int]) -> tuple[list[str], FieldInfo | None, Any]:
    """Walk a pydantic error location through the declaration ``model`` (a model class or any type).

    Returns (the user's path: field names and list indices only, the deepest
    field reached or None below it, the annotation there). Union member tags
    that pydantic inserts into locations (``constrained-int``,
    ``literal['auto']``, a discriminated union's ``type`` value) are skipped.
    """
    path: list[str] = []
    info: FieldInfo | None = None
    ann: Any = model
    for seg in loc:
        base, _ = _unwrap(ann)
        if isinstance(seg, int):
            path[-1:] = [f"{path[-1]}[{seg}]"] if path else [f"[{seg}]"]
            seq = [m for m in _members(ann) if get_origin(m) in (list, tuple, Sequence) or m in (list, tuple)]
            inner = get_args(seq[0]) if seq else ()
            info, ann = None, (inner[0] if inner else Any)
        elif _is_model_class(base):
            info = base.model_fields.get(seg)
            ann = info.annotation if info is not None else Any
            path.append(seg)
        elif (member := _model_member(ann, seg)) is not None:
            ann = member  # a union tag naming the member: no path segment
        elif get_origin(base) in (dict, Mapping) or base is dict:
            path.append(seg)  # a free-form table (policy options): keep the key, no declaration to describe
            info, ann = None, Any
    return path, info, ann


def _shown(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return value
    if isinstance(value, Mapping) and len(repr(value)) > 80:
        return "{...}"
    return value


def translate(exc: ValidationError, model: type[BaseModel] | Any, *, where: str | None = None,
              prefix: str = "", names: Mapping[str, str] | None = None) -> ConfigError:
    """One :class:`ConfigError` for the first problem in ``exc``, in the user's words.

    ``model``: the model (or type, for a :class:`TypeAdapter`) that was
    validated, to look up the field's declaration. ``prefix``: dotted path of
    that model in the user's file (``"policy.options"``). ``names``: user
    names (e.g. CLI flags) replacing dotted paths.
    """
    errors = exc.errors()
    err = errors[0]
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, ConfigError):  # a cross-field check: already names its field and the expectation
        inner = ".".join(p for p in [prefix, *_error_path(model, err["loc"])[0]] if p)
        field = cause.field if not inner or cause.field.startswith(inner) else f"{inner}.{cause.field}"
        return ConfigError(_rename(field, names), cause.value, cause.expected, where=where)
    extra = err["type"] == "extra_forbidden"
    path, info, ann = _error_path(model, err["loc"][:-1] if extra else err["loc"])
    if extra:
        path = [*path, str(err["loc"][-1])]
    field = _rename((".".join(p for p in [prefix, *path] if p) or "value").replace(".[", "["), names)
    value = _shown(err.get("input"))
    if extra:
        parent, _, key = field.rpartition(".")
        known = _known_keys(model, err["loc"][:-1])
        where_in = f"[{parent}]" if parent else "the top level"
        return ConfigError(field, value, f"a known key ({key!r} is not one; {where_in} has: {', '.join(known)})",
                           where=where)
    if err["type"] == "missing":
        expected = describe(ann, info.metadata if info else ()) if (info or ann is not Any) else "a value"
        return ConfigError(field, None, f"a value ({expected}); it is required", where=where)
    # union members report each member's failure: the value of the innermost non-union error
    for e in errors:
        if e["loc"][: len(err["loc"])] == err["loc"] and e.get("input") is not None:
            value = _shown(e["input"])
            break
    return ConfigError(field, value, _expected(model, info, ann, err), where=where)


def _is_model_class(model: Any) -> bool:
    return isinstance(model, type) and issubclass(model, BaseModel)


def _error_path(model: Any, loc: Sequence[Any]) -> tuple[list[str], FieldInfo | None, Any]:
    return locate(model, [seg for seg in loc if isinstance(seg, int) or not _is_tag(seg)])


def _expected(model: Any, info: FieldInfo | None, ann: Any, err: Mapping[str, Any]) -> str:
    if info is not None:
        return describe(info.annotation, info.metadata)
    if ann is not Any:
        return describe(ann)
    return _plain_message(err)


def _is_tag(seg: Any) -> bool:
    return isinstance(seg, str) and (seg.startswith(("constrained-", "literal[", "function-")) or seg in (
        "int", "float", "str", "bool", "dict", "list"))


def _known_keys(model: Any, loc: Sequence[Any]) -> list[str]:
    _, info, ann = locate(model, loc)
    base = _unwrap(ann)[0] if loc else model
    if isinstance(base, type) and issubclass(base, BaseModel):
        return list(base.model_fields)
    last = loc[-1] if loc else None
    cls = _model_member(ann, str(last)) if last is not None else None
    return list(cls.model_fields) if cls else []


def _plain_message(err: Mapping[str, Any]) -> str:
    """Plain words for an error on a value with no declaration to describe (free-form tables)."""
    kind = err["type"]
    table = {
        "finite_number": "a finite number (not nan or inf)",
        "bool_type": "true or false (a boolean, not text)",
        "int_type": "an integer", "int_from_float": "an integer", "float_type": "a finite number",
        "string_type": "text", "dict_type": "a table", "list_type": "a list",
    }
    if kind in table:
        return table[kind]
    ctx = err.get("ctx") or {}
    for key, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
        if key in ctx:
            return f"a number {op} {ctx[key]}"
    return "a valid value"


def _rename(field: str, names: Mapping[str, str] | None) -> str:
    if not names:
        return field
    if field in names:
        return names[field]
    for path, name in names.items():  # a sub-field of a flag's value (--set policy.options={...})
        if field.startswith(path + "."):
            return f"{name} ({field})"
    return field


# ------------------------------------------------------------ one value
_ADAPTERS: dict[Any, TypeAdapter] = {}


def check_value(annotation: Any, value: Any, field: str, *, where: str | None = None) -> Any:
    """Validate one value against a declared type (strict, finite); ConfigError naming ``field``."""
    key = annotation
    adapter = _ADAPTERS.get(key)
    if adapter is None:
        adapter = _ADAPTERS[key] = TypeAdapter(annotation, config=STRICT if not _is_model(annotation) else None)
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        err = translate(exc, annotation, where=where, prefix=field)
        if err.field.startswith(field + "."):  # list index or member tag after the name
            pass
        raise err from None


def _is_model(annotation: Any) -> bool:
    base = _unwrap(annotation)[0]
    return isinstance(base, type) and issubclass(base, BaseModel)


def parse_model(model: type[BaseModel], data: Any, *, where: str | None = None, prefix: str = "",
                names: Mapping[str, str] | None = None) -> Any:
    """``model.model_validate(data)`` with errors translated into one :class:`ConfigError`."""
    if not isinstance(data, Mapping):
        raise ConfigError(prefix or "config", _shown(data), "a table (key = value pairs)", where=where)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise translate(exc, model, where=where, prefix=prefix, names=names) from None


def parse_text_value(text: str, annotation: Any) -> Any:
    """A CLI string as the value a TOML file would hold for a field of this type.

    Text fields (and choice fields) keep the string; everything else is read
    as a TOML value (``4``, ``0.5``, ``true``, ``[1, 2]``, ``{a = 1}``),
    falling back to the string, so that validation then reports the
    user's text against the declared type.
    """
    members = _members(annotation)
    if text.lstrip()[:1] in ("{", "[") and any(get_origin(m) in (dict, list) or m in (dict, list) for m in members):
        try:  # an inline table or array for a field that takes one (model.name = {...})
            return tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            return text
    if any(m is str or get_origin(m) is Literal for m in members) and not any(
            m in (int, float, bool) for m in members):
        if text[:1] in ('"', "'"):  # a quoted TOML string is the same text
            try:
                value = tomllib.loads(f"v = {text}")["v"]
                return value if isinstance(value, str) else text
            except tomllib.TOMLDecodeError:
                return text
        return text
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


@functools.lru_cache(maxsize=256)
def _type_hints(func: Any) -> dict[str, Any]:
    """``typing.get_type_hints(func)``, once per function (a policy's options are checked for every candidate
    layout a plan screens); empty when the hints cannot be resolved. Callers must not modify the result."""
    try:
        return typing.get_type_hints(func)
    except Exception:  # noqa: BLE001  # unresolvable hints: no declared types to check against
        return {}


def check_options(func: Any, options: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """Check keyword ``options`` of ``func`` against its type hints (strict, finite numbers).

    Used for policy options: ``cap_delta = nan`` or ``respect_memory = "no"``
    is a :class:`ConfigError` naming ``<prefix>.<option>`` before the policy
    sees it; bounds stay with the policy's own checks.
    """
    hints = _type_hints(func)
    out = {}
    for key, value in options.items():
        ann = hints.get(key)
        out[key] = check_value(ann, value, f"{prefix}.{key}") if ann is not None and ann is not Any else value
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{prefix}.{key}", value, "a finite number (not nan or inf)")
    return out
