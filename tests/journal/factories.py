"""Small valid journal records for tests (also imported by a test's child process)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from kruntimes.journal import records

T0 = datetime(2026, 5, 9, 7, 35, 25, 123456, tzinfo=timezone.utc)
INCARNATION = "7f0c1d2e3b4a59687766554433221100"


def record(lsn: int, kind: str = "cycle", payload: dict[str, Any] | None = None, **kw: Any) -> records.JournalRecord:
    """A small valid record; the timestamp advances one millisecond per LSN."""
    return records.JournalRecord(
        incarnation=kw.pop("incarnation", INCARNATION),
        lsn=lsn,
        recorded_at=kw.pop("recorded_at", T0 + timedelta(milliseconds=lsn)),
        kind=kind,
        payload={"lsn": lsn, "run": f"team-a/run-{lsn}"} if payload is None else payload,
        **kw,
    )
