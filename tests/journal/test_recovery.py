"""A standby drains what a killed term left in its spool (``SpoolRecovery``), and gives the spool up to a term."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from kruntimes.journal import records
from kruntimes.journal.write import settings, spool
from kruntimes.journal.store import backends, migrate
from kruntimes.journal.write.recovery import SpoolRecovery, has_records, left_behind
from kruntimes.journal.write.writer import JournalWriter
from replay import integrity
from tests.journal.factories import record
from tests.journal.test_epochs_writer import E1, epoch_records

QUICK = settings.Patience(retry_interval=0.05)  # a recovered database is drained into within the test's wait

def _spool_with(path: Path, n: int) -> None:
    opened = spool.Spool.open(path)
    try:
        opened.append([records.encode(record(lsn)) for lsn in range(1, n + 1)])
    finally:
        opened.close()


def test_a_spool_left_by_a_killed_term_drains_into_the_database_and_its_epoch_is_closed_without_a_term(
        journal_url: str, tmp_path: Path) -> None:
    path = tmp_path / "spool"
    _spool_with(path, 300)
    assert has_records(path) and not has_records(tmp_path / "missing")
    recovery = SpoolRecovery(journal_url, str(path), migrate=True, patience=QUICK).start()
    try:
        assert recovery.drained.wait(30.0)
    finally:
        recovery.stop()
    assert not has_records(path)
    journal = backends.Journal.open(journal_url, create=False)
    try:
        stored = [(r.lsn, r.kind) for r in journal.read_encoded()]
    finally:
        journal.close()
    # The killed term's epoch is closed too: an end record chained after its last spooled record.
    assert [lsn for lsn, _ in stored] == list(range(1, 302)) and stored[-1] == (301, "end")


def test_a_recovery_stopped_before_the_database_answers_leaves_every_record_in_the_spool(
        journal_url: str, tmp_path: Path) -> None:
    path = tmp_path / "spool"
    _spool_with(path, 20)
    # Not migrated and not allowed to migrate: the writer cannot store anything yet.
    recovery = SpoolRecovery(journal_url, str(path), migrate=False, patience=QUICK).start()
    assert not recovery.drained.wait(1.0)
    recovery.stop()
    assert migrate.current_revision(journal_url) is None
    reopened = spool.Spool.open(path)  # the lock is free again: a term's writer can take the spool over
    try:
        assert [r.lsn for r in reopened.records()] == list(range(1, 21))
    finally:
        reopened.close()


def test_a_leader_killed_while_the_database_answered_is_closed_by_its_restart_as_a_standby_and_verify_passes(
        journal_url: str, tmp_path: Path) -> None:
    # Issue 22 item 4: its spool is empty, only its note says the epoch is open.
    path = tmp_path / "spool"
    journal = backends.Journal.open(journal_url)
    try:
        leader = JournalWriter(journal, settings.Spool(path), epochs=settings.Epochs(epoch=E1),
                               instruments=settings.Instruments(registry=CollectorRegistry())).start()
        for r in epoch_records(E1, 1, 50):
            leader.append(r)
        assert leader.flush(30.0)
        leader.close(30.0)  # no end record: as if the process had been killed
        assert not has_records(path) and left_behind(path)
        recovery = SpoolRecovery(journal_url, str(path), migrate=False, patience=QUICK).start()
        try:
            assert recovery.drained.wait(30.0)
        finally:
            recovery.stop()
        assert not left_behind(path)
        [report] = integrity.check(journal)
    finally:
        journal.close()
    assert (report.ok, report.state, report.end_reason, report.head_lsn) == (True, integrity.ENDED, "recovered", 51)
