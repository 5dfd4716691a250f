"""A standby drains what a killed term left in its spool (``SpoolRecovery``), and gives the spool up to a term."""

from __future__ import annotations

from pathlib import Path

from kruntimes.journal import backends, migrate, records, spool
from kruntimes.journal.recovery import SpoolRecovery, has_records
from tests.journal.factories import record


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
    recovery = SpoolRecovery(journal_url, str(path), migrate=True, retry_interval=0.05).start()
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
    recovery = SpoolRecovery(journal_url, str(path), migrate=False, retry_interval=0.05).start()
    assert not recovery.drained.wait(1.0)
    recovery.stop()
    assert migrate.current_revision(journal_url) is None
    reopened = spool.Spool.open(path)  # the lock is free again: a term's writer can take the spool over
    try:
        assert [r.lsn for r in reopened.records()] == list(range(1, 21))
    finally:
        reopened.close()
