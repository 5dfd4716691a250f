"""A database that accepts and never answers costs the writer at most its bound (SPEC §5 "Availability").

Issue 22 item 1: blackholed (the proxy accepts and never answers, as a partition behind
a peer that still acknowledges TCP does) or holding ``journal_records`` locked, the
database once kept every record in the writer's memory until 100,000 were unsettled,
and then scheduling stopped. Now a call the database has not answered within the
writer's ``write_timeout`` counts as failed: its batch and every later one go to the
spool, the producer never waits for more than the bound, and the spool drains in order
once the database answers again. SQLite's version of the hang is a write lock another
connection holds.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from kruntimes.journal import records
from kruntimes.journal.write import settings, writer
from kruntimes.journal.store import backends
from kruntimes.journal.write.process import ProcessJournalWriter
from tests.integration.db_proxy import Cut, ProxiedJournal, proxied_journal  # noqa: F401 - the fixture
from tests.journal.factories import record, unchained
from tests.journal.test_epochs_writer import E1, epoch_records
from tests.journal.test_writer import FlakyJournal

BOUND = 0.5  # the writer's write_timeout in these tests
PATIENCE = settings.Patience(write_timeout=BOUND, retry_interval=0.05, max_retry_interval=0.2)
SETTLED = 10 * BOUND  # records are durable (spooled) well within this while the database hangs
WAIT = 60.0  # anything that does not depend on the hang


class Hung(NamedTuple):
    url: str  # the journal, as the writer reaches it
    direct: str  # the journal, as the test reads it afterwards
    hold: Callable[[], contextlib.AbstractContextManager[None]]  # the database hangs inside


def _proxy_cut(mode: Cut) -> Callable[[pytest.FixtureRequest, Path], Hung]:
    def hung(request: pytest.FixtureRequest, tmp_path: Path) -> Hung:
        proxied: ProxiedJournal = request.getfixturevalue("proxied_journal")
        return Hung(proxied.url, proxied.direct, lambda: proxied.proxy.cut_for(mode))

    return hung


def _locked_table(request: pytest.FixtureRequest, tmp_path: Path) -> Hung:
    proxied: ProxiedJournal = request.getfixturevalue("proxied_journal")

    @contextlib.contextmanager
    def hold() -> Iterator[None]:
        engine = sa.create_engine(proxied.direct)
        try:
            with engine.connect() as conn, conn.begin() as transaction:
                conn.execute(sa.text("LOCK TABLE journal_records IN ACCESS EXCLUSIVE MODE"))
                yield
                transaction.rollback()
        finally:
            engine.dispose()

    return Hung(proxied.url, proxied.direct, hold)


def _sqlite_write_lock(request: pytest.FixtureRequest, tmp_path: Path) -> Hung:
    url = f"sqlite:///{tmp_path}/journal.db"
    backends.Journal.open(url).close()  # migrated

    @contextlib.contextmanager
    def hold() -> Iterator[None]:
        conn = sqlite3.connect(tmp_path / "journal.db", isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")  # the write lock, held until the rollback
            yield
            conn.execute("ROLLBACK")
        finally:
            conn.close()

    return Hung(url, url, hold)


HANGS = {
    "postgresql blackholed: it accepts and never answers": _proxy_cut("blackhole"),
    # The server gets the writer's statements and does them; its answers wait (a COPY waits for the
    # server's go-ahead, so here the cut rolls back the transaction it began).
    "postgresql that does the work and answers late (the proxy holds its answers)": _proxy_cut("hold"),
    "postgresql with journal_records locked by another session": _locked_table,
    "sqlite with its write lock held by another connection": _sqlite_write_lock,
}


def _stored(url: str) -> list[records.EncodedRecord]:
    journal = backends.Journal.open(url, create=False)
    try:
        return unchained(journal.read_encoded())
    finally:
        journal.close()


@pytest.mark.parametrize("hang", HANGS.values(), ids=HANGS.keys())
def test_records_written_while_the_database_hangs_are_spooled_within_the_bound_and_drain_in_order_after(
        hang: Callable[[pytest.FixtureRequest, Path], Hung], request: pytest.FixtureRequest, tmp_path: Path) -> None:
    hung = hang(request, tmp_path)
    journal = backends.Journal.open(hung.url, create=False)
    w = writer.JournalWriter(journal, settings.Spool(tmp_path / "journal.spool"), patience=PATIENCE,
                             epochs=settings.Epochs(epoch=E1),
                             instruments=settings.Instruments(registry=CollectorRegistry())).start()
    expected = epoch_records(E1, 1, 10) + [record(lsn, incarnation=E1) for lsn in range(11, 511)]
    try:
        for r in expected[:10]:
            w.append(r)
        assert w.flush(WAIT)
        with hung.hold():
            for r in expected[10:]:
                w.append(r)
            assert w.flush(SETTLED), "records waited in memory for a database that does not answer"
            assert w.spooled > 0
        assert w.drain(WAIT)
    finally:
        w.close(WAIT)
        journal.close()
    assert _stored(hung.direct) == [records.encode(r) for r in expected]


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_a_blackholed_database_never_makes_the_producer_wait_for_room_longer_than_the_bound(
        kind: str, proxied_journal: ProxiedJournal, tmp_path: Path) -> None:
    spool = settings.Spool(tmp_path / "journal.spool")
    batching = settings.Batching(buffer_size=200, max_batch=50)
    journal = backends.Journal.open(proxied_journal.url, create=False)
    w: Any = (writer.JournalWriter(journal, spool, batching=batching, patience=PATIENCE,
                                   instruments=settings.Instruments(registry=CollectorRegistry())).start()
              if kind == "thread"
              else ProcessJournalWriter(settings.Store(proxied_journal.url), spool, batching=batching, patience=PATIENCE,
                                        registry=CollectorRegistry()))
    expected = epoch_records(E1, 1, 3000)
    done = threading.Event()

    def produce() -> None:  # as the scheduler does: ten buffers' worth while the database hangs
        for r in expected[1:]:
            w.append(r)
        done.set()

    try:
        w.append(expected[0])
        assert w.flush(WAIT)
        with proxied_journal.proxy.cut_for("blackhole"):
            producer = threading.Thread(target=produce)
            producer.start()
            finished = done.wait(10 * SETTLED)
            producer.join(WAIT)
            assert finished, "the producer waited for room held by records the database does not answer for"
        assert w.drain(WAIT)
    finally:
        w.close(WAIT)
        journal.close()
    assert _stored(proxied_journal.direct) == [records.encode(r) for r in expected]


def test_a_write_that_commits_after_the_writer_gave_up_on_it_is_stored_once(
        journal: backends.Journal, tmp_path: Path) -> None:
    late = FlakyJournal(journal, delay=4 * BOUND)  # answers, and commits, after the bound
    w = writer.JournalWriter(late, settings.Spool(tmp_path / "journal.spool"), patience=PATIENCE,
                             epochs=settings.Epochs(epoch=E1),
                             instruments=settings.Instruments(registry=CollectorRegistry())).start()
    expected = epoch_records(E1, 1, 50)
    try:
        for r in expected:
            w.append(r)
        assert w.flush(SETTLED) and w.spooled == len(expected), "given up on: the batch went to the spool"
        late.delay = 0.0
        assert w.drain(WAIT)
    finally:
        w.close(WAIT)
    assert late.batch_sizes and late.batch_sizes[0] >= 1, "the call given up on committed after all"
    assert unchained(journal.read_encoded()) == [records.encode(r) for r in expected]
