"""An older epoch's records stored after a newer epoch's rows: left to the indexer, which rebuilds.

A replica that drains a dead epoch's spool (or a demoted leader's tail) after another
replica's newer epoch has history rows would, deriving inline, apply its records after
the newer ones: its UPDATEs of a Run's open rows land on the newer epoch's. A rebuild
applies the epochs oldest first and gives other rows, so the tables would be silently
wrong until ``kruntimes journal reindex --check``. The writer stores such a batch's
records only (the epoch lags), readers are told to run ``kruntimes journal index``, and
the indexer rebuilds the tables in epoch order instead of applying the late records last.

The journal here: the newer epoch's Run ``r`` is pending (an open wait episode); the
older epoch, which began minutes earlier, had ``r`` pending and then placed it.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa

from kruntimes.cli import main as cli
from kruntimes.journal import records
from kruntimes.journal.history import check as history_check
from kruntimes.journal.history import indexer
from kruntimes.journal.store import backends
from tests.journal.factories import in_epoch_order
from tests.journal.test_history_epoch_order import NEWER, OLDER, T0, _cycle


def _older() -> list[records.JournalRecord]:
    return [_cycle(OLDER, 501, T0 + timedelta(seconds=1), "unschedulable"),
            _cycle(OLDER, 502, T0 + timedelta(seconds=2), "scheduled", "pod-a")]


def _newer(lsn: int = 1, minutes: int = 5) -> list[records.JournalRecord]:
    return [_cycle(NEWER, lsn, T0 + timedelta(minutes=minutes), "unschedulable")]


def test_an_older_epochs_late_records_are_left_to_the_indexer_which_rebuilds_in_epoch_order(
        journal: backends.Journal) -> None:
    journal.append_batch(_newer())  # the newer term's rows are written inline: r is pending
    assert journal.history_lag() == [] and not journal.history_deferred
    journal.append_batch(_older())  # then the older term's tail arrives
    journal.append_batch(_newer(2, 6))  # and the newer term goes on: its rows wait for the indexer too

    lag = journal.history_lag()
    assert [(e.epoch, e.late) for e in lag] == [(OLDER, True), (NEWER, False)]
    assert journal.history_deferred
    advice = indexer.advice(lag)
    assert advice is not None and f'run "{indexer.CATCH_UP}"' in advice and "rebuild" in advice
    assert not history_check.check(journal).ok  # trailing: nothing compared yet

    assert journal.index(chunk_size=1) == 4  # one rebuild reads every record
    assert journal.history_lag() == []
    found = history_check.check(journal)
    assert found.ok and not found.differences, found.differences
    assert [(r.incarnation, r.lsn) for r in in_epoch_order(journal)] == [(OLDER, 501), (OLDER, 502), (NEWER, 1),
                                                                         (NEWER, 2)]
    journal.append_batch(_newer(3, 7))  # caught up: the writer derives inline again
    assert journal.history_lag() == [] and not journal.history_deferred
    assert history_check.check(journal).ok


def test_epochs_stored_oldest_first_are_still_derived_inline(journal: backends.Journal) -> None:
    journal.append_batch(_older())
    journal.append_batch(_newer())
    journal.append_batch(_newer(2, 6))
    assert journal.history_lag() == [] and not journal.history_deferred
    assert journal.index() == 0
    assert history_check.check(journal).ok


def test_an_older_epochs_late_end_derives_nothing_and_stays_inline(journal: backends.Journal) -> None:
    # What a restarted replica writes for its own old epoch after another replica's term began.
    journal.append_batch(_older())
    journal.append_batch(_newer())
    journal.append_batch([records.JournalRecord(OLDER, 503, T0 + timedelta(minutes=6), "end", {"reason": "lost"})])
    assert journal.history_lag() == [] and not journal.history_deferred
    assert history_check.check(journal).ok


def test_the_indexer_rebuilds_when_a_follow_writer_stored_an_older_epochs_records_late(journal_url: str) -> None:
    journal = backends.Journal.open(journal_url, history="follow")
    try:
        journal.append_batch(_newer())
        assert journal.index() == 1
        journal.append_batch(_older())
        assert [(e.epoch, e.late) for e in journal.history_lag()] == [(OLDER, True)]
        assert journal.index(chunk_size=1) == 3
        assert journal.history_lag() == []
        assert history_check.check(journal).ok
    finally:
        journal.close()


def test_on_postgresql_an_inline_writer_checks_only_after_another_writers_transaction_ends(
        postgres_url: str) -> None:
    """Two replicas committing at once must not both miss each other's rows: the second waits."""
    journal = backends.Journal.open(postgres_url)
    holder = sa.create_engine(postgres_url)
    try:
        journal.append_batch(_newer())
        done = threading.Event()
        with holder.connect() as conn, conn.begin():
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": indexer._WRITERS_LOCK})
            appending = threading.Thread(target=lambda: (journal.append_batch(_newer(2, 6)), done.set()))
            appending.start()
            assert not done.wait(0.5)  # the other writer's transaction is still open
        assert done.wait(10)  # its end lets the check run
        appending.join()
        assert journal.history_lag() == []
    finally:
        journal.close()
        holder.dispose()


def test_journal_index_says_it_rebuilt_the_tables(journal_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    journal = backends.Journal.open(journal_url)
    try:
        journal.append_batch(_newer())
        journal.append_batch(_older())
    finally:
        journal.close()
    assert cli.main(["journal", "index", "--journal", journal_url]) == 0
    said = capsys.readouterr().out
    assert said.startswith("rebuilt the history tables in epoch order") and "indexed 3 records" in said
    assert cli.main(["journal", "index", "--journal", journal_url]) == 0
    assert capsys.readouterr().out.startswith("indexed 0 records")  # nothing late any more: nothing rebuilt
