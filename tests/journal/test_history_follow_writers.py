"""``history="follow"`` reaches every writer the scheduler opens: the session's (in its own process,
started again if it dies, or a thread) and the one that drains a killed term's spool (``SpoolRecovery``).

Each stores records only; ``Journal.index`` then builds the tables an inline writer builds.
A session's records carry its epoch and wall-clock times, so two sessions of one script
are compared on everything else (``shape``), and the indexed tables are also compared
exactly with what an inline writer builds from the very records the session stored.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kruntimes.journal import records
from kruntimes.journal.history import indexer
from kruntimes.journal.history import tables as history_tables
from kruntimes.journal.write import settings, spool
from kruntimes.journal.store import backends, schema
from kruntimes.journal.write.process import ProcessJournalWriter
from kruntimes.journal.write.recovery import SpoolRecovery
from tests.journal.history_journal import Generated
from tests.journal.test_history_follow import index, inline_tables, lag, store
from tests.journal.test_history_tables import Snapshot, empty_journal_url, snapshot
from tests.replay import journals

pytest_plugins = ("tests.journal.history_fixtures",)

BACKENDS = ["sqlite", "postgresql"]
_EPOCHS = ("epoch", "end_epoch", "last_epoch")
#: Tables of counts per hour: their key's columns other than the hour (the rest are counts).
_HOURLY = {"history_pod_hours": 2, "history_rejection_hours": 2}


def shape(tables: Snapshot) -> dict[str, Counter[tuple[Any, ...]]]:
    """``tables`` without what differs between two runs of one script: the epoch's id, wall-clock
    times and the durations measured with them (``*_us``); per-hour counts summed over the hours."""
    out: dict[str, Counter[tuple[Any, ...]]] = {}
    for table in history_tables.TABLES:
        columns = [(i, c.name) for i, c in enumerate(table.columns)
                   if not isinstance(c.type, schema.UtcDateTime) and not c.name.endswith("_us") and c.name != "hour"]
        rows = Counter(tuple("E" if name in _EPOCHS and row[i] is not None else row[i] for i, name in columns)
                       for row in tables[table.name])
        if table.name in _HOURLY:
            width, totals = _HOURLY[table.name], {}
            for row, n in rows.items():
                before = totals.get(row[:width], (0,) * (len(row) - width))
                totals[row[:width]] = tuple(a + b * n for a, b in zip(before, row[width:]))
            rows = Counter((*key, *counts) for key, counts in totals.items())
        out[table.name] = rows
    return out


def _script(url: str, spool_dir: Path, *, writer: str, history: str) -> journals.Written:
    """The replay tests' deterministic script, journalled by a session with ``writer`` and ``history``."""
    return journals.scripted(url, spool_dir, checkpoint_every=10, writer=writer, history=history)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("writer", ["process", "thread"])
def test_a_follow_session_stores_records_only_and_the_indexer_builds_what_an_inline_session_builds(
        backend: str, writer: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    with empty_journal_url(request, backend) as url:
        _script(url, tmp_path / "inline", writer=writer, history="inline")
        inline = snapshot(url)
    assert inline["history_placements"] and inline["history_waits"], "the script places and keeps Runs waiting"
    with empty_journal_url(request, backend) as url:
        written = _script(url, tmp_path / "follow", writer=writer, history="follow")
        assert not any(snapshot(url).values()), f"a follow session's {writer} writer writes no history row"
        assert lag(url) == [indexer.Lag(written.incarnation, None, written.records, 1)]
        journal = backends.Journal.open(url, create=False)
        try:
            stored = list(journal.read())
            assert journal.index(chunk_size=17) == written.records
            assert journal.history_lag() == []
        finally:
            journal.close()
        indexed = snapshot(url)
    assert shape(indexed) == shape(inline)
    with empty_journal_url(request, backend) as url:  # the same records, through an inline writer
        store(url, stored, history="inline")
        assert snapshot(url) == indexed


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_writer_process_started_again_after_a_kill_still_stores_records_only(
        backend: str, generated: Generated, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    expected = inline_tables(request, backend, generated)
    half = len(generated.records) // 2
    with empty_journal_url(request, backend) as url:
        w = ProcessJournalWriter(settings.Store(url, migrate=True, history="follow"), settings.Spool(tmp_path / "spool"),
                                 patience=settings.Patience(retry_interval=0.02, max_retry_interval=0.1),
                                 registry=CollectorRegistry())
        try:
            for record in generated.records[:half]:
                assert w.append(record)
            assert w.flush(30.0)
            assert index(url, 50) == half and lag(url) == []  # caught up: an inline writer would derive again
            first = w.pid
            assert first is not None
            os.kill(first, signal.SIGKILL)
            for record in generated.records[half:]:
                assert w.append(record)
            assert w.flush(30.0)
            assert w.restarts >= 1 and w.pid != first
        finally:
            w.close(30.0)
        start, mid, end = generated.records[0], generated.records[half - 1], generated.records[-1]
        assert lag(url) == [indexer.Lag(start.incarnation, mid.lsn, end.lsn, start.lsn)], \
            "the new writer process was told to follow too"
        assert index(url, 50) == len(generated.records) - half
        assert snapshot(url) == expected


def _spool_with(path: Path, batch: list[records.JournalRecord]) -> None:
    opened = spool.Spool.open(path)
    try:
        opened.append([records.encode(r) for r in batch])
    finally:
        opened.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_follow_recovery_drains_a_spool_without_history_rows_and_the_indexer_builds_them(
        backend: str, generated: Generated, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    expected = inline_tables(request, backend, generated)
    path = tmp_path / "spool"
    _spool_with(path, generated.records)  # what a term killed while the database was away left
    with empty_journal_url(request, backend) as url:
        recovery = SpoolRecovery(url, str(path), migrate=True, history="follow",
                                 patience=settings.Patience(retry_interval=0.05)).start()
        try:
            assert recovery.drained.wait(60.0)
        finally:
            recovery.stop()
        assert not any(snapshot(url).values()), "a follow recovery writes no history row"
        first, last = generated.records[0], generated.records[-1]
        # The drained epoch is closed by the recovery's own `end` record, one past the spool's last.
        assert lag(url) == [indexer.Lag(first.incarnation, None, last.lsn + 1, first.lsn)]
        journal = backends.Journal.open(url, create=False)
        try:
            assert journal.index(chunk_size=50) == len(generated.records) + 1
            assert journal.history_lag() == []
        finally:
            journal.close()
        assert snapshot(url) == expected
