"""`kruntimes_journal_history_deferred`: the writer says when its records wait for the indexer.

1 in follow mode, and in inline mode while the history tables trail the records (rows
another writer left to ``kruntimes journal index``); 0 once an inline writer derives
its batches itself again. The process writer's child reports it with its counters.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from kruntimes.journal.write import process, settings, writer
from kruntimes.journal.store import backends
from tests.journal.history_journal import Generated

pytest_plugins = ("tests.journal.history_fixtures",)


def deferred_after(url: str, batch: list, history: str) -> tuple[int, str]:  # type: ignore[type-arg]
    """The writer's gauge, and the registry's exposition, once ``batch`` is stored with ``history``."""
    journal = backends.Journal.open(url, history=history)
    registry = CollectorRegistry()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            w = writer.JournalWriter(journal, settings.Spool(Path(tmp) / "spool"), batching=settings.Batching(max_batch=7),
                                     instruments=settings.Instruments(registry=registry)).start()
            try:
                for record in batch:
                    assert w.append(record)
                assert w.drain(60)
                return w.stats().history_deferred, generate_latest(registry).decode()
            finally:
                w.close()
    finally:
        journal.close()


def test_a_follow_writer_defers_and_an_inline_one_does_not(generated: Generated, tmp_path: Path) -> None:
    follow_value, exposition = deferred_after(f"sqlite:///{tmp_path}/follow.db", generated.records, "follow")
    assert follow_value == 1 and "kruntimes_journal_history_deferred 1.0" in exposition
    inline_value, exposition = deferred_after(f"sqlite:///{tmp_path}/inline.db", generated.records, "inline")
    assert inline_value == 0 and "kruntimes_journal_history_deferred 0.0" in exposition


def test_an_inline_writer_defers_while_the_tables_trail_and_stops_once_they_caught_up(
        generated: Generated, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/journal.db"
    first, second, third = generated.records[:40], generated.records[40:90], generated.records[90:]
    deferred_after(url, first, "follow")
    assert deferred_after(url, second, "inline")[0] == 1
    journal = backends.Journal.open(url, create=False)
    try:
        journal.index()
    finally:
        journal.close()
    assert deferred_after(url, third, "inline")[0] == 0


def test_the_process_writer_reports_its_childs_gauge(generated: Generated, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/journal.db"
    backends.Journal.open(url).close()
    registry = CollectorRegistry()
    w = process.ProcessJournalWriter(settings.Store(url, history="follow"), settings.Spool(tmp_path / "spool"),
                                     registry=registry)
    try:
        for record in generated.records:
            assert w.append(record)
        assert w.flush(60)
        deadline = time.monotonic() + 30
        while w.stats().history_deferred != 1:  # the child's counters come with its next acknowledgement
            assert time.monotonic() < deadline, w.stats()
            time.sleep(0.05)
        assert "kruntimes_journal_history_deferred 1.0" in generate_latest(registry).decode()
    finally:
        w.close()
    # A closed writer's gauge is not carried over, as its buffer depth is not.
    assert "kruntimes_journal_history_deferred 0.0" in generate_latest(registry).decode()
