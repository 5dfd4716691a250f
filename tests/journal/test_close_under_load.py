"""Closing a writer under load loses nothing: what the database has not taken goes to the spool.

SPEC §5: no record the scheduler handed over is lost. A scheduler that stops after a
burst (the end of a term, a rollout) closes its writer with a bounded timeout; records
the database has not taken by then must be in the synced spool when ``close`` returns,
for the next writer to drain - never dropped as "neither in the database nor in the
spool" (what the real-server bench logged: 29,193 to 68,904 records per stop).

A timeout of 0 is a database too slow for the backlog, deterministically: the producer
appends far more than either backend stores in the moment ``close`` gives it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kruntimes.journal import records
from kruntimes.journal.write import settings, spool
from kruntimes.journal.store import backends
from kruntimes.journal.write.process import ProcessJournalWriter
from kruntimes.journal.write.writer import JournalWriter
from tests.journal.factories import record, unchained

RECORDS = 30_000
WAIT = 60.0


def open_writer(kind: str, journal: backends.Journal, url: str, spool_path: Path) -> Any:
    if kind == "process":
        return ProcessJournalWriter(settings.Store(url), settings.Spool(spool_path))
    return JournalWriter(journal, settings.Spool(spool_path)).start()


@pytest.mark.parametrize("kind", ["process", "thread"])
def test_records_the_database_has_not_taken_at_close_are_in_the_spool_and_drain_complete(
        kind: str, journal: backends.Journal, journal_url: str, tmp_path: Path) -> None:
    spool_path = tmp_path / "journal.spool"
    sent = [record(lsn) for lsn in range(1, RECORDS + 1)]
    w = open_writer(kind, journal, journal_url, spool_path)
    for r in sent:
        assert w.append(r)
    w.close(timeout=0.0)  # the database's time is up at once: the rest must go to the spool
    assert w.stats().dropped == 0

    in_db = {r.lsn for r in journal.read_encoded()}
    s = spool.Spool.open(spool_path)
    try:
        in_spool = {r.lsn for r in s.records()}
    finally:
        s.close()
    assert len(in_spool) > 0, "the database took everything at once: the test proves nothing"
    missing = set(range(1, RECORDS + 1)) - in_db - in_spool
    assert not missing, f"{len(missing)} records handed over are neither in the database nor in the spool"

    # The next writer on the spool drains it: every record once, in order, the chain whole.
    nxt = JournalWriter(journal, settings.Spool(spool_path)).start()
    try:
        assert nxt.drain(WAIT), "the spool did not drain"
    finally:
        nxt.close(WAIT)
    assert [(r.lsn, r.payload) for r in unchained(journal.read_encoded())] == [
        (r.lsn, records.encode(r).payload) for r in sent]
