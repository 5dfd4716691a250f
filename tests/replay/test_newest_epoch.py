"""Which epoch is the newest (the one allowed to stay open) is decided by chained data (SPEC §5 "Crash vs loss").

An older epoch whose tail (its `end` record among it) was deleted, with its head row
moved back to the last record left, is caught as "missing end" - unless it counts as
the newest epoch, whose writer may still be running. ``journal_epochs.started_at`` and
``journal_incarnations.started_at`` are plain columns: bumping them must not make an
older epoch the newest. Both backends, with and without a key.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from kruntimes.journal import chain, records
from kruntimes.journal.store import schema
from kruntimes.journal.store.backends import Journal
from replay import errors, source, verify
from tests.replay import journals

T = schema.journal_records
E = schema.journal_epochs
I = schema.journal_incarnations
AT = datetime(2026, 11, 1, tzinfo=timezone.utc)
KEY = chain.ChainKey(b"n" * 48)


def epoch(name: str, first: int, at: datetime, *, ended: bool, count: int = 30) -> list[records.JournalRecord]:
    rows = [records.JournalRecord(name, first, at, "incarnation", {"version": "test", "config_hash": "c" * 64})]
    rows += [records.JournalRecord(name, first + i, at + timedelta(seconds=i), "bind",
                                   {"namespace": "ns", "run_uid": f"uid-{i}", "result": "ok"}) for i in range(1, count)]
    if ended:
        rows.append(records.JournalRecord(name, first + count, at + timedelta(seconds=count), "end",
                                          {"reason": "shutdown"}))
    return rows


def _write(url: str, key: chain.ChainKey | None) -> None:
    journal = Journal.open(url)
    try:
        journal.append_batch(epoch("older", 1, AT, ended=True), key=key)
        journal.append_batch(epoch("newer", 32, AT + timedelta(hours=1), ended=False), key=key)
    finally:
        journal.close()


def _verify(url: str, key: chain.ChainKey | None) -> verify.VerifyReport:
    journal = Journal.open(url)
    try:
        return verify.verify(journal, source.Selection(), key=key)
    finally:
        journal.close()


def _truncate_older_and_call_it_newest(url: str) -> None:
    """The older epoch's last 10 records (its end among them) deleted, its head row moved back to the record
    left last (its link is stored: no key needed), and its start moved after the newer epoch's."""
    last = journals._rows(url, sa.select(T.c.lsn, T.c.chain_hash).where(T.c.incarnation == "older", T.c.lsn == 21))[0]
    journals._rows(url, sa.delete(T).where(T.c.incarnation == "older", T.c.lsn > 21))
    later = AT + timedelta(days=1)
    journals._rows(url, sa.update(E).where(E.c.epoch == "older").values(
        head_lsn=last[0], head_hash=last[1], end_lsn=None, end_reason=None, started_at=later, updated_at=later))
    journals._rows(url, sa.update(I).where(I.c.incarnation == "older").values(started_at=later))


@pytest.mark.parametrize("key", [None, KEY], ids=["plain", "keyed"])
def test_bumping_an_older_epochs_start_does_not_make_its_truncated_tail_pass(journal_url: str,
                                                                              key: chain.ChainKey | None) -> None:
    _write(journal_url, key)
    assert _verify(journal_url, key).ok
    _truncate_older_and_call_it_newest(journal_url)
    report = _verify(journal_url, key)
    assert [e.state for e in report.epochs.values()] != ["ended", "open"]
    missing = [p for p in report.problems if isinstance(p, errors.MissingEnd)]
    assert [(p.epoch, p.lsn) for p in missing] == [("older", 21)], [str(p) for p in report.problems]
    assert list(report.epochs) == ["older", "newer"]  # still ordered by their first records' (chained) times
