"""Migrations run once (SPEC §5 "Availability"): `kruntimes db upgrade` migrates, replicas wait.

A scheduler with ``--journal-migrate never`` (the default for PostgreSQL) only reads the
schema's revision and waits, bounded, for the head; two `db upgrade`s started together
serialise on PostgreSQL's advisory lock, and the second finds the head.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from kruntimes.cli import main as cli_main
from kruntimes.cli import scheduler_cmd
from kruntimes.journal import backends, migrate

ROOT = Path(__file__).resolve().parents[2]


def _tables(url: str) -> set[str]:
    engine = backends.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_a_server_database_is_never_migrated_by_the_scheduler_unless_told() -> None:
    assert migrate.default_migrate_mode("sqlite:///kruntimes-journal.db") == "auto"
    assert migrate.default_migrate_mode("postgresql+psycopg://kruntimes@db/kruntimes") == "never"


def test_the_wait_returns_at_once_on_a_journal_at_the_head(journal_url: str) -> None:
    migrate.upgrade(journal_url)
    migrate.wait_for_head(journal_url, timeout=0.0)


def test_the_wait_ends_in_an_error_naming_the_upgrade_command_and_migrates_nothing(
        journal_url: str, caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    with caplog.at_level(logging.WARNING, logger="kruntimes.journal.migrate"):
        with pytest.raises(migrate.SchemaNotReady, match=r"after 10 s .*kruntimes db upgrade"):
            migrate.wait_for_head(journal_url, timeout=10.0, poll=2.0, clock=lambda: now[0],
                                  sleep=lambda seconds: now.__setitem__(0, now[0] + seconds))
    assert now[0] == 10.0
    assert [r.getMessage() for r in caplog.records].count(
        "waiting for the journal schema: run `kruntimes db upgrade` (the kruntimes-db-upgrade Job)") == 1
    assert migrate.current_revision(journal_url) is None


def test_a_schema_newer_than_the_code_fails_at_once(journal_url: str) -> None:
    migrate.upgrade(journal_url)
    engine = backends.create_engine(journal_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
    engine.dispose()
    with pytest.raises(migrate.SchemaNotReady, match="does not know"):
        migrate.wait_for_head(journal_url, timeout=3600.0, sleep=lambda seconds: pytest.fail("waited"))


def test_a_scheduler_on_an_unmigrated_database_waits_then_proceeds_once_db_upgrade_ran(journal_url: str) -> None:
    outcome: list[BaseException | None] = []

    def start_scheduler() -> None:
        try:
            scheduler_cmd.check_journal(journal_url, migrate="never", schema_wait=30.0)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)

    waiting = threading.Thread(target=start_scheduler)
    waiting.start()
    try:
        waiting.join(1.0)
        assert waiting.is_alive(), outcome
        assert migrate.current_revision(journal_url) is None  # the scheduler migrated nothing
        assert cli_main.main(["db", "upgrade", "--journal", journal_url]) == 0
    finally:
        waiting.join(30.0)
    assert outcome == [None]
    assert migrate.current_revision(journal_url) == migrate.head_revision()


def test_a_scheduler_that_waited_in_vain_exits_with_one_line_naming_the_job(journal_url: str) -> None:
    with pytest.raises(scheduler_cmd.UsageError, match="kruntimes-db-upgrade Job"):
        scheduler_cmd.check_journal(journal_url, migrate="never", schema_wait=0.0)
    assert migrate.current_revision(journal_url) is None


def test_a_scheduler_told_to_migrate_still_migrates_its_own_journal(journal_url: str) -> None:
    scheduler_cmd.check_journal(journal_url, migrate="auto")
    assert migrate.current_revision(journal_url) == migrate.head_revision()


def test_two_db_upgrades_started_together_on_postgresql_both_succeed_once(postgres_url: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KRUNTIMES_JOURNAL_URL": ""}
    command = [sys.executable, "-m", "kruntimes.cli.main", "db", "upgrade", "--journal", postgres_url]
    upgrades = [subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for _ in range(2)]
    results = [(p.wait(120), *p.communicate()) for p in upgrades]
    assert [code for code, _, _ in results] == [0, 0], results
    assert migrate.current_revision(postgres_url) == migrate.head_revision()
    assert {"journal_records", "alembic_version"} <= _tables(postgres_url)
