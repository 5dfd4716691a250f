"""Times on the command line: one parser and one set of forms for every command.

`simulate --now`, `history --at/--since/--until`, `replay --since/--until` and
`journal prune --before` all read a time the same way: RFC 3339 / ISO 8601 (no zone
means UTC; a date alone is its midnight UTC), ``now``, or an age before now such as
``90m``, ``2h``, ``1d``, ``1w`` or a sum of them like ``1h30m`` or ``1d 12h``. The
result is an aware datetime in UTC. ``duration`` reads the same ages as lengths of time.

Times inside Kubernetes objects are a different matter: they are RFC 3339 with a zone,
as the API server writes them, and ``kruntimes.api.ingest.parse_time`` reads them.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

_AGE = re.compile(r"(?:[0-9]+\s*[smhdw]\s*)+", re.ASCII)
_AGE_PART = re.compile(r"([0-9]+)\s*([smhdw])", re.ASCII)
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


class NotATime(ValueError):
    """Text that is none of the accepted forms; the message names the option and shows them."""


def parse(text: str, *, now: datetime | None = None, what: str = "time") -> datetime:
    """The instant ``text`` names, in UTC; ages count back from ``now`` (default: the clock)."""
    value = text.strip()
    now = now or datetime.now(timezone.utc)
    try:
        if value == "now":
            return now.astimezone(timezone.utc)
        if _AGE.fullmatch(value):
            return (now - _length(value)).astimezone(timezone.utc)
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        return parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed.astimezone(timezone.utc)
    except (ValueError, OverflowError):  # OverflowError: beyond the calendar, such as 99999999d
        raise NotATime(f"{what} {text!r} is not a time: use RFC 3339 (2026-11-29T10:00:00Z;"
                       " no zone means UTC) or an age such as 30m, 2h, 1h30m, 1d") from None


def duration(text: str, *, what: str = "duration") -> timedelta:
    """A length of time written as an age: ``90s``, ``30m``, ``1h30m``, ``2d``."""
    value = text.strip()
    try:
        if _AGE.fullmatch(value):
            return _length(value)
    except OverflowError:
        pass
    raise NotATime(f"{what} {text!r} is not a duration: use a number with a unit, such as 90s, 30m, 1h30m, 2d")


def _length(value: str) -> timedelta:
    total = timedelta()
    for amount, unit in _AGE_PART.findall(value):
        total += timedelta(**{_UNITS[unit]: int(amount)})
    return total
