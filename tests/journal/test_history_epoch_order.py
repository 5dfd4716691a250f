"""A rebuild and the indexer apply records epoch by epoch, as the writer stored them, not by bare LSN.

(epoch, LSN) is a record's identity, and LSNs overlap between epochs begun while the
database was away (issue 22 items 3 and 9). Some history rows follow a Run across
records - its pending episode, its placement's end - so the order records are applied
in decides them. The writer applies each epoch's records as it stores them: an epoch's
in LSN order, an earlier epoch's before a later one's (a term's writer drains the
spool of the epochs before it first). A rebuild (``journal reindex``, the check
``verify`` names) and the ``follow`` indexer must build the same tables, so they go
epoch by epoch, oldest first (``history.order``), each epoch in LSN order.

The journal here: a Run waits in the older epoch (LSNs 501-502) and is placed in the
newer one, which began while the database was away and numbered from 1. In (LSN,
epoch) order the placement comes first and the episode never closes.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

from kruntimes.journal import records
from kruntimes.journal.history import check as history_check
from kruntimes.journal.history import derive
from kruntimes.journal.store import backends

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
NS = "team-a"
OLDER, NEWER = "0" * 31 + "b", "0" * 31 + "a"  # the newer epoch's ID sorts first: neither order comes by accident


def _cycle(epoch: str, lsn: int, at: datetime, result: str, pod: str | None = None) -> records.JournalRecord:
    status = "unschedulable" if result == "unschedulable" else "scheduled"
    return records.JournalRecord(epoch, lsn, at, "cycle", {
        "namespace": NS, "run": "r", "run_uid": "u", "status": status, "result": result, "chosen": pod,
        "candidates": [], "rejections": [], "message": "full" if pod is None else None})


def _older() -> list[records.JournalRecord]:
    return [_cycle(OLDER, 501, T0 + timedelta(seconds=1), "unschedulable"),
            _cycle(OLDER, 502, T0 + timedelta(seconds=2), "unschedulable")]


def _newer() -> list[records.JournalRecord]:
    later = T0 + timedelta(minutes=5)
    return [_cycle(NEWER, 1, later, "scheduled", "pod-a")]


def _wait(journal: backends.Journal) -> Any:
    with journal.engine.connect() as conn:
        return conn.execute(sa.select(derive.waits)).one()


def test_a_rebuild_gives_what_the_writer_built_from_epochs_whose_lsns_overlap(journal: backends.Journal) -> None:
    journal.append_batch(_older())  # the older term's records, stored as it ran
    journal.append_batch(_newer())  # then the newer one's, numbered from 1
    wait = _wait(journal)
    assert (wait.epoch, wait.first_lsn, wait.end_epoch, wait.end_lsn, wait.pod) == (OLDER, 501, NEWER, 1, "pod-a")

    found = history_check.check(journal)
    assert found.ok and not found.differences, found.differences
    journal.reindex(chunk_size=1)  # a page boundary between every record
    wait = _wait(journal)
    assert (wait.end_epoch, wait.end_lsn, wait.pod) == (NEWER, 1, "pod-a")


def test_the_indexer_follows_epochs_whose_lsns_overlap_as_the_writer_would(journal_url: str) -> None:
    journal = backends.Journal.open(journal_url, history="follow")
    try:
        journal.append_batch(_older())
        journal.append_batch(_newer())
        assert journal.index(chunk_size=1) == 3  # a chunk of one record at a time
        wait = _wait(journal)
        assert (wait.epoch, wait.first_lsn, wait.end_epoch, wait.end_lsn, wait.pod) == (OLDER, 501, NEWER, 1, "pod-a")
        assert history_check.check(journal).ok
    finally:
        journal.close()
