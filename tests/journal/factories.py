"""Small valid journal records for tests (also imported by a test's child process)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from collections.abc import Iterable
from typing import Any

from kruntimes.journal import chain, records
from kruntimes.journal.history import order
from kruntimes.journal.store import backends

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


def unchained(rows: Iterable[records.EncodedRecord], key: chain.ChainKey | None = None) -> list[records.EncodedRecord]:
    """``rows`` (stored, in LSN order) with every epoch's chain checked from GENESIS, then the links blanked.

    What the writer tests compare with ``records.encode(...)`` of what they appended:
    the content must be identical, and the links a chain whatever path a record took.
    """
    heads: dict[str, str] = {}
    out = []
    for r in rows:
        expected = chain.link(heads.get(r.incarnation, chain.GENESIS), r.incarnation, r.lsn, r.recorded_at, r.kind,
                              r.schema_version, r.payload_sha256, key)
        assert r.chain_hash == expected, f"broken link at epoch {r.incarnation} LSN {r.lsn}"
        heads[r.incarnation] = r.chain_hash
        out.append(r._replace(chain_hash=""))
    return out


def in_epoch_order(journal: backends.Journal, kinds: Iterable[str] | None = None) -> list[records.JournalRecord]:
    """Every stored record (of ``kinds``), the oldest epoch's first (``history.order``), each epoch's in LSN order.

    What a reader of several epochs compares: ``Journal.read`` without an epoch gives the
    epochs by their ID, and an order by the bare LSN would interleave overlapping epochs.
    """
    with journal.engine.connect() as conn:
        oldest_first = [s.epoch for s in order.starts(conn)]
    wanted = None if kinds is None else set(kinds)
    return [r for epoch in oldest_first for r in journal.read(epoch, kinds=wanted)]
