"""A payload's values as the history tables' columns take them: deriving never rejects a record.

A field of the wrong type becomes NULL (``text_or_none``, ``int_or_none``, ...); a list
the tables keep as text (scores, capacities, requests) becomes compact JSON; a time
becomes the hourly tables' bucket or integer microseconds. ``derive`` makes rows with
these.
"""

from __future__ import annotations

import json
import json.encoder
from datetime import datetime, timedelta, timezone
from typing import Any

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MAX_INT = 2**63


def text_or_none(value: Any) -> str | None:
    # PostgreSQL refuses NUL in text; a payload may carry one (escaped in its JSON).
    return value if type(value) is str and "\x00" not in value else None


def int_or_none(value: Any) -> int | None:
    return value if type(value) is int and -_MAX_INT <= value < _MAX_INT else None


def bool_or_none(value: Any) -> bool | None:
    return value if type(value) is bool else None


def list_or_empty(value: Any) -> list[Any]:
    return value if type(value) is list else []


def _unencodable(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON")


# The C encoder itself, set up once: json.dumps with these options builds an encoder per
# call and costs ~20 times as much for a candidate's few scores.
_encode_compact = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    None, _unencodable, json.encoder.encode_basestring, None, ":", ",", False, False, False)


def compact_json(value: Any) -> str | None:
    """The compact JSON text of a list (scores, capacities) as stored; None if not encodable.

    Payloads are acyclic (built by the recorder or parsed from JSON), so no cycle check.
    """
    if _encode_compact is None:  # a Python without the C accelerator
        try:
            return text_or_none(json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False))
        except (TypeError, ValueError, RecursionError):
            return None
    try:
        return text_or_none("".join(_encode_compact(value, 0)))
    except (TypeError, ValueError, RecursionError):
        return None


_hours: dict[int, str] = {}


def hour_of(at: datetime) -> str:
    """The UTC hour bucket of an instant, ``YYYY-MM-DD HH:00`` (the hourly tables' key)."""
    index = int(at.timestamp()) // 3600
    text = _hours.get(index)
    if text is None:
        if len(_hours) > 10_000:
            _hours.clear()
        text = _hours[index] = f"{at.astimezone(timezone.utc):%Y-%m-%d %H}:00"
    return text


def micros(at: datetime) -> int:
    """An instant as integer microseconds since the Unix epoch (waits are differences of these)."""
    return (at - _EPOCH) // _MICROSECOND


_MICROSECOND = timedelta(microseconds=1)
