"""One actionable, bounded message for a Run or Runtime that failed validation.

A malformed Run becomes terminal ``Failed`` with this message (SPEC §3.2, §3.7), so it
must speak the user's language: the camelCase path they wrote
(``spec.resources.requests["example.com/gpu"]``), what is wrong and what to do. It must
also stay small (it lands in a status condition) and be identical for identical input
(it lands in the journal and replay compares it), whatever the input was.
"""

import difflib
import types
import typing
from typing import Any

import pydantic

from kruntimes.api import models, quantity

MAX_MESSAGE_CHARS = 1000

_ROOTS: dict[str, type[pydantic.BaseModel]] = {
    "Run": models.Run,
    "Runtime": models.Runtime,
}

# Phrasing for pydantic's built-in error types; custom kruntimes errors carry their own.
_PHRASES: dict[str, str] = {
    "string_type": "must be a string",
    "string_too_short": "must not be empty",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "list_type": "must be a list",
    "datetime_type": "must be an RFC 3339 time such as 2024-01-31T12:00:00Z",
    "datetime_parsing": "must be an RFC 3339 time such as 2024-01-31T12:00:00Z",
    "datetime_from_date_parsing": "must be an RFC 3339 time such as 2024-01-31T12:00:00Z",
}


def describe_validation_error(exc: pydantic.ValidationError, *, kind: str = "Run") -> str:
    """Render ``exc`` as ``invalid <kind>: <path>: <problem>; ...``, at most 1,000 chars.

    Problems are sorted by path so the message does not depend on input key order.
    """
    root = _ROOTS.get(kind)
    problems = sorted({_describe_one(error, root) for error in _errors(exc)})
    if not problems:
        problems = ["validation failed"]
    return _bounded(f"invalid {kind}: ", problems)


def _errors(exc: pydantic.ValidationError) -> list[dict[str, Any]]:
    # No URLs (they do not help a user); context carries kruntimes' verbatim messages.
    return [dict(error) for error in exc.errors(include_url=False, include_context=True)]


def _describe_one(error: dict[str, Any], root: type[pydantic.BaseModel] | None) -> str:
    loc = tuple(error.get("loc", ()))
    path, parent = _render_path(loc, root)
    message = _phrase(error, parent, loc)
    if not path:
        return message
    # Messages that already name their field ("spec.mode must set ...") read as-is.
    return message if message.startswith(path) else f"{path}: {message}"


def _phrase(error: dict[str, Any], parent: Any, loc: tuple[Any, ...]) -> str:
    kind = str(error.get("type", ""))
    context = error.get("ctx") or {}
    if "detail" in context:  # a kruntimes error (models._invalid): verbatim
        return str(context["detail"])
    if kind == "missing":
        return "is required" + _field_hint(parent, loc)
    if kind == "extra_forbidden":
        return _unknown_field(parent, loc)
    # Bounds (docs/api-bounds.md): the input itself is never rendered, it may be huge.
    if kind == "too_long":
        actual = context.get("actual_length")
        got = f" (got {actual})" if isinstance(actual, int) else ""
        return f"at most {context.get('max_length')} entries are allowed{got}"
    if kind == "string_too_long":
        return f"must be at most {context.get('max_length')} characters"
    shown = quantity.describe_input(error.get("input"))
    if kind == "literal_error":
        return f"must be one of {context.get('expected', '?')} (got {shown})"
    if kind == "greater_than_equal":
        return f"must be at least {context.get('ge')} (got {shown})"
    if kind == "too_short":
        least = context.get("min_length", 1)
        return "must not be empty" if least == 1 else f"must have at least {least} items"
    if kind == "int_type" and isinstance(error.get("input"), (str, bool)):
        # Strict integers (weights, SPEC §2.2): "10" and true look right but are not numbers.
        what = "a string" if isinstance(error.get("input"), str) else "a boolean"
        return f"must be a whole number written without quotes, not {what} (got {shown})"
    if kind in _PHRASES:
        return f"{_PHRASES[kind]} (got {shown})"
    message = str(error.get("msg", "is invalid"))
    return message.removeprefix("Value error, ")


def _field_hint(parent: Any, loc: tuple[Any, ...]) -> str:
    field = _field(parent, loc[-1]) if loc else None
    if field is None or not field.description:
        return ""
    return f" ({field.description.rstrip('.')})"


def _unknown_field(parent: Any, loc: tuple[Any, ...]) -> str:
    parent = _unwrap(parent)
    if not (_is_model(parent) and loc):
        return "unknown field; remove it"
    known = [info.alias or name for name, info in parent.model_fields.items()]
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    guess = f'did you mean "{close[0]}"? ' if close else ""
    return f"unknown field; {guess}supported fields: {', '.join(known)}"


def _render_path(loc: tuple[Any, ...], root: type[pydantic.BaseModel] | None) -> tuple[str, Any]:
    """The user's path for ``loc``, and the type that holds its last element.

    Walking the model types tells field names (``.requests``) from map keys
    (``["example.com/gpu"]``); where the walk loses track it falls back to the shape.
    """
    path = ""
    current: Any = root
    parent: Any = None
    for element in loc:
        if element == "[key]":  # pydantic's marker: the error is in the map key itself
            continue
        parent = current
        current, is_field = _step(current, element)
        if isinstance(element, int):
            path += f"[{element}]"
        elif is_field or (current is None and str(element).isidentifier()):
            name = _field_alias(parent, element)
            path += f".{name}" if path else name
        else:
            path += f"[{quantity.describe_input(element, 72)}]"
    return path, parent


def _step(tp: Any, element: Any) -> tuple[Any, bool]:
    """The type found at ``element`` inside ``tp``, and whether ``element`` is a field."""
    tp = _unwrap(tp)
    if _is_model(tp):
        field = _field(tp, element)
        return (field.annotation, True) if field is not None else (None, False)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is list and isinstance(element, int) and args:
        return args[0], False
    if origin is dict and len(args) == 2:
        return args[1], False
    return None, False


def _unwrap(tp: Any) -> Any:
    """Strip Annotated and ``X | None`` so the walk sees the model, list or dict."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            options = [arg for arg in typing.get_args(tp) if arg is not type(None)]
            if len(options) != 1:
                return tp
            tp = options[0]
        else:
            return tp


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, pydantic.BaseModel)


def _field(tp: Any, element: Any) -> Any:
    """The pydantic FieldInfo named ``element`` (by Python name or wire alias), or None."""
    tp = _unwrap(tp)
    if not _is_model(tp):
        return None
    fields = tp.model_fields
    if element in fields:
        return fields[element]
    for info in fields.values():
        if info.alias == element:
            return info
    return None


def _field_alias(tp: Any, element: Any) -> str:
    field = _field(tp, element)
    return field.alias if field is not None and field.alias else str(element)


def _bounded(prefix: str, problems: list[str]) -> str:
    """Join problems after ``prefix``, cutting at MAX_MESSAGE_CHARS with "… and N more"."""
    shown: list[str] = []
    for index, problem in enumerate(problems):
        remaining = len(problems) - index - 1
        suffix = f" … and {remaining} more" if remaining else ""
        candidate = prefix + "; ".join([*shown, problem]) + suffix
        if len(candidate) > MAX_MESSAGE_CHARS:
            break
        shown.append(problem)
    if len(shown) == len(problems):
        return prefix + "; ".join(shown)
    if not shown:  # even the first problem alone is too long: cut it
        tail = f" … and {len(problems) - 1} more" if len(problems) > 1 else ""
        room = MAX_MESSAGE_CHARS - len(prefix) - len(tail) - 1
        return prefix + problems[0][:room] + "…" + tail
    return prefix + "; ".join(shown) + f" … and {len(problems) - len(shown)} more"
