"""Migrations run once (SPEC §5 "Availability"): `kruntimes db upgrade` migrates, replicas wait.

A scheduler with ``--journal-migrate never`` (the default for PostgreSQL) only reads the
schema's revision, and waits for the head in the background: its writer spools until
then, and scheduling never waits. Two `db upgrade`s started together serialise on
PostgreSQL's advisory lock, and the second finds the head.
"""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from kruntimes.cli import main as cli_main
from kruntimes.cluster import logs
from kruntimes.cli import scheduler_cmd
from kruntimes.journal import errors
from kruntimes.journal.store import backends, engines, migrate, schema_wait
from kruntimes.journal.write import settings
from kruntimes.journal.write.session import JournalSession
from kruntimes.scheduler.config import SchedulerConfig

ROOT = Path(__file__).resolve().parents[2]


def _tables(url: str) -> set[str]:
    engine = engines.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_a_server_database_is_never_migrated_by_the_scheduler_unless_told() -> None:
    assert migrate.default_migrate_mode("sqlite:///kruntimes-journal.db") == "auto"
    assert migrate.default_migrate_mode("postgresql+psycopg://kruntimes@db/kruntimes") == "never"


def _gate_refuses(journal_url: str, match: str) -> None:
    engine = engines.create_engine(journal_url)
    try:
        with pytest.raises(errors.JournalUnavailable, match=match):
            schema_wait.SchemaGate(migrate=False).check(engine)
    finally:
        engine.dispose()


def test_a_writer_that_may_not_migrate_refuses_to_write_until_the_schema_is_at_the_head(journal_url: str) -> None:
    _gate_refuses(journal_url, r"revision None, this kruntimes needs .*kruntimes db upgrade")
    assert migrate.current_revision(journal_url) is None  # it migrated nothing
    migrate.upgrade(journal_url)
    engine = engines.create_engine(journal_url)
    try:
        schema_wait.SchemaGate(migrate=False).check(engine)
    finally:
        engine.dispose()


def test_a_schema_newer_than_the_code_is_never_written_to(journal_url: str) -> None:
    migrate.upgrade(journal_url)
    engine = engines.create_engine(journal_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
    engine.dispose()
    _gate_refuses(journal_url, "9999_from_the_future")
    assert not migrate.known_revision("9999_from_the_future") and migrate.known_revision(migrate.head_revision())


def test_a_session_on_an_unmigrated_journal_spools_then_drains_once_db_upgrade_ran(
        journal_url: str, tmp_path: Path) -> None:
    session = JournalSession(journal_url, SchedulerConfig(), spool_path=str(tmp_path / "spool"), writer="thread",
                             migrate=False, patience=settings.Patience(retry_interval=0.05, max_retry_interval=0.2))
    try:
        for i in range(50):
            session.recorder.record("leader", {"event": "acquired", "identity": f"r{i}"})
        assert session.writer.flush(30.0)
        assert session.writer.spooled == 51 and session.writer.stats().written == 0
        assert migrate.current_revision(journal_url) is None  # the scheduler migrated nothing
        assert cli_main.main(["db", "upgrade", "--journal", journal_url]) == 0
        assert session.writer.drain(30.0)
    finally:
        session.close()
    store = backends.Journal.open(journal_url, create=False)
    try:
        stored = [(r.lsn, r.kind) for r in store.read_encoded()]
    finally:
        store.close()
    assert [lsn for lsn, _ in stored] == list(range(1, 53)) and stored[-1] == (52, "end")  # the epoch's end, at close


def test_a_session_told_to_migrate_migrates_before_its_first_write(journal_url: str, tmp_path: Path) -> None:
    with JournalSession(journal_url, SchedulerConfig(), spool_path=str(tmp_path / "spool"), migrate=True) as session:
        assert session.writer.drain(30.0)
    assert migrate.current_revision(journal_url) == migrate.head_revision()


def test_the_schema_watch_says_the_replica_waits_names_the_job_when_late_and_ends_at_the_head(
        journal_url: str, caplog: pytest.LogCaptureFixture) -> None:
    waiting: list[bool] = []
    with caplog.at_level(logging.INFO, logger="kruntimes.journal.migrate"):
        watch = schema_wait.SchemaWatch(journal_url, patience=0.0, poll=0.05, on_waiting=waiting.append).start()
        try:
            assert not watch.reached.wait(0.5)
            assert waiting == [True] and migrate.current_revision(journal_url) is None
            assert cli_main.main(["db", "upgrade", "--url", journal_url]) == 0
            assert watch.reached.wait(30.0)
        finally:
            watch.stop()
    messages = [r.getMessage() for r in caplog.records if r.name == "kruntimes.journal.migrate"]
    assert messages.count("waiting for the journal schema: run `kruntimes db upgrade` (the kruntimes-db-upgrade Job)") == 1
    assert sum("after 0 s of waiting" in m and "kruntimes-db-upgrade Job" in m for m in messages) == 1
    assert messages[-1] == "journal schema reached the head revision" and waiting == [True, False]


def test_the_scheduler_checks_its_journal_url_at_start_but_never_waits_for_the_database() -> None:
    unreachable = "postgresql+psycopg://kruntimes@127.0.0.1:9/kruntimes?connect_timeout=30"
    started = time.monotonic()
    scheduler_cmd.check_journal(unreachable)
    assert time.monotonic() - started < 1.0
    with pytest.raises(scheduler_cmd.UsageError, match="bad journal URL"):
        scheduler_cmd.check_journal("mysql://kruntimes@db/kruntimes")


def test_two_db_upgrades_started_together_on_postgresql_both_succeed_once(postgres_url: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KRUNTIMES_JOURNAL_URL": ""}
    command = [sys.executable, "-m", "kruntimes.cli.main", "db", "upgrade", "--journal", postgres_url]
    upgrades = [subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for _ in range(2)]
    results = [(p.wait(120), *p.communicate()) for p in upgrades]
    assert [code for code, _, _ in results] == [0, 0], results
    assert migrate.current_revision(postgres_url) == migrate.head_revision()
    assert {"journal_records", "alembic_version"} <= _tables(postgres_url)


@pytest.mark.parametrize("level,alembic_lines", [("info", False), ("debug", True)])
def test_a_migration_logs_one_line_of_its_own_and_alembics_only_when_debugging(
        level: str, alembic_lines: bool, tmp_path: Path) -> None:
    root, alembic = logging.getLogger(), logging.getLogger("alembic")
    saved = (root.handlers[:], root.level, alembic.level)
    stream = io.StringIO()
    try:
        logs.configure(level, stream)
        migrate.upgrade(f"sqlite:///{tmp_path}/j.db")
        migrate.upgrade(f"sqlite:///{tmp_path}/j.db")  # at the head: nothing to say
    finally:
        root.handlers[:], _, _ = saved
        root.setLevel(saved[1])
        alembic.setLevel(saved[2])
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    ours = [line for line in lines if line["message"] == "journal schema migrated"]
    assert [(line["from_revision"], line["to_revision"]) for line in ours] == [("empty", migrate.head_revision())]
    assert any(line["logger"].startswith("alembic") for line in lines) is alembic_lines
