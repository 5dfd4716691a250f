"""A request's query parameters, read the way every page reads them: typed, bounded, with clear errors.

A malformed parameter is a ``BadParameter`` naming the parameter and the forms it
takes; the server answers it with 400 and that sentence, never a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from kruntimes import wire


class BadParameter(ValueError):
    """A query parameter that is not what the page accepts; the message says what is."""


class Query:
    """One request's parameters, and ``memory``: what the application keeps between requests
    (the Integrity page's last verify result; never the journal's)."""

    def __init__(self, values: Mapping[str, Sequence[str]], memory: dict[str, Any] | None = None) -> None:
        self._values = values
        self.memory = memory if memory is not None else {}

    def text(self, name: str, default: str = "", *, limit: int = 512) -> str:
        found = self._values.get(name)
        value = found[-1].strip() if found else default
        if len(value) > limit or not value.isprintable():
            raise BadParameter(f"{name} must be printable text of at most {limit} characters")
        return value

    def all(self, name: str) -> list[str]:
        return [v.strip() for v in self._values.get(name, ()) if v.strip()]

    def names(self, prefix: str = "") -> list[str]:
        """The parameter names given that start with ``prefix``, sorted: a page refuses those it does not know."""
        return sorted(name for name in self._values if name.startswith(prefix))

    def integer(self, name: str, default: int, *, low: int = 0, high: int = 1 << 62) -> int:
        raw = self.text(name)
        if not raw:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise BadParameter(f"{name} must be a whole number, got {raw!r}") from None
        if not low <= value <= high:
            raise BadParameter(f"{name} must be between {low} and {high}, got {value}")
        return value

    def time(self, name: str, default: datetime | None, *, now: datetime | None = None) -> datetime | None:
        """RFC 3339 (no zone means UTC) or an age (``5m``) counted back from ``now`` (the journal's end)."""
        raw = self.text(name)
        if not raw:
            return default
        try:
            return wire.parse_when(raw, now=now or datetime.now(timezone.utc), what=name)
        except wire.NotATime as exc:
            raise BadParameter(str(exc)) from None

    def window(self, end: datetime, default: timedelta, start: datetime | None = None) -> tuple[datetime, datetime]:
        """``since``/``until``; by default the last ``default`` of the journal (from ``start``, its first record,
        if that is later). Ages count back from the journal's end."""
        until = self.time("until", None, now=end) or end + timedelta(microseconds=1)
        since = self.time("since", None, now=end) or max(until - default, start or until - default)
        if since >= until:
            raise BadParameter(f"since ({since.isoformat()}) must be before until ({until.isoformat()})")
        return since, until
