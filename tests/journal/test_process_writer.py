"""ProcessJournalWriter: the writer in its own process loses, duplicates and reorders nothing.

The child is a real process on a real database (both backends). Failures are real
too: the child is killed with SIGKILL, and the database "goes away" by renaming the
journal table under the child's feet, so its inserts fail until it is renamed back.
"""

from __future__ import annotations

import operator
import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from kruntimes.journal import errors, payloads, records
from kruntimes.journal.store import backends
from kruntimes.journal.write import settings
from kruntimes.journal.write.process import SEAL_AT, ProcessJournalWriter
from kruntimes.journal.write.recorder import JournalRecorder
from kruntimes.journal.write.session import JournalSession
from kruntimes.scheduler.config import SchedulerConfig
from tests import builders
from tests.journal import factories
from tests.journal.factories import INCARNATION, T0, record, unchained
from tests.replay import journals

WAIT = 30.0


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def make_writer(journal: backends.Journal, journal_url: str, tmp_path: Path,
                registry: CollectorRegistry) -> Iterator[Any]:
    made: list[ProcessJournalWriter] = []

    def make(batching: settings.Batching = settings.Batching(), **kw: Any) -> ProcessJournalWriter:
        w = ProcessJournalWriter(settings.Store(journal_url), settings.Spool(tmp_path / "journal.spool"),
                                 batching=batching, patience=settings.Patience(retry_interval=0.02, max_retry_interval=0.1),
                                 registry=registry, **kw)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close(timeout=WAIT)


def stored(journal: backends.Journal) -> list[records.EncodedRecord]:
    """What the journal holds, every epoch's chain checked link by link (links blanked)."""
    return unchained(journal.read_encoded())


def rename_table(journal: backends.Journal, old: str, new: str) -> None:
    with journal.engine.begin() as conn:
        conn.execute(sa.text(f"ALTER TABLE {old} RENAME TO {new}"))


class Tee:
    """Forwards deferred records to the writer and keeps them, to build their payloads here too."""

    accepts_deferred = True

    def __init__(self, writer: Any) -> None:
        self.writer, self.copy, self.lock = writer, [], threading.Lock()

    def append(self, record: Any) -> bool:
        with self.lock:
            self.copy.append(record)
        return bool(self.writer.append(record))


def test_payloads_built_in_the_child_are_the_ones_this_process_would_build(
        journal_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The scripted history has every record kind the cache makes: the child builds each payload
    # from data pickled across, and must write byte for byte what the parent would have.
    tee: list[Tee] = []
    original = JournalSession.__init__

    def session_with_tee(self: JournalSession, *args: Any, **kw: Any) -> None:
        original(self, *args, **kw)
        tee.append(Tee(self.writer))
        self.recorder.sink = tee[0]

    monkeypatch.setattr(JournalSession, "__init__", session_with_tee)
    written = journals.scripted(journal_url, tmp_path, checkpoint_every=7, detail="full")
    deferred = tee[0].copy
    assert all(type(d) is payloads.DeferredRecord for d in deferred)
    assert {d.kind for d in deferred} >= {"mutation", "cycle", "reserve", "release", "bind", "drop", "checkpoint"}
    journal = backends.Journal.open(journal_url)
    try:
        by_lsn = {r.lsn: r for r in journal.read_encoded(written.incarnation)}
    finally:
        journal.close()
    # Every record but the incarnation record, which start() made before the tee was in place.
    assert [d.lsn for d in deferred] == sorted(by_lsn)[1:]
    for d in deferred:
        assert by_lsn[d.lsn].payload == records.encode(payloads.realize(d)).payload, d.kind


def test_a_killed_writer_process_is_replaced_and_the_journal_ends_complete_exactly_once(
        journal: backends.Journal, make_writer: Any) -> None:
    w = make_writer()
    sent = [record(lsn) for lsn in range(1, 3001)]
    for r in sent[:1500]:
        assert w.append(r)
    assert w.flush(WAIT)
    first = w.pid
    os.kill(first, signal.SIGKILL)  # mid-run, between acknowledged and new records
    for r in sent[1500:]:
        assert w.append(r)
    assert w.flush(WAIT), "records sent to the dead child were not resent"
    assert w.restarts >= 1 and w.pid != first
    assert [(r.lsn, r.payload) for r in stored(journal)] == [(r.lsn, records.encode(r).payload) for r in sent]


def test_a_child_killed_with_records_in_flight_resends_them_and_skips_what_it_had_stored(
        journal: backends.Journal, make_writer: Any) -> None:
    w = make_writer()
    # An epoch's first record: the first child chains in memory, the next one continues
    # from the head the database stored.
    sent = [record(1, "incarnation", {"version": "1", "config_hash": "c"})]
    sent += [record(lsn) for lsn in range(2, 20_001)]
    feeder_done = threading.Event()

    def feed() -> None:
        for r in sent:
            w.append(r)
        feeder_done.set()

    feeder = threading.Thread(target=feed)
    feeder.start()
    deadline = time.monotonic() + WAIT
    while w.stats().written < 2_000 and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(w.pid, signal.SIGKILL)  # some records stored, some in the pipe, some still buffered
    feeder.join(WAIT)
    assert feeder_done.is_set()
    assert w.flush(WAIT)
    assert w.restarts >= 1
    got = stored(journal)
    assert [r.lsn for r in got] == list(range(1, 20_001)), "a gap or a duplicate"
    assert all(g.payload == records.encode(s).payload for g, s in zip(got, sent))


def test_a_database_outage_spills_in_the_child_and_drains_complete_in_order(
        journal: backends.Journal, make_writer: Any, registry: CollectorRegistry) -> None:
    w = make_writer()
    sent = [record(lsn) for lsn in range(1, 1201)]
    for r in sent[:400]:
        w.append(r)
    assert w.flush(WAIT)
    rename_table(journal, "journal_records", "journal_records_away")  # the database "goes away"
    try:
        for r in sent[400:800]:
            w.append(r)
        assert w.flush(WAIT), "records must be durable in the spool while the database is away"
        assert w.spooled > 0 and w.stats().spilled > 0
    finally:
        rename_table(journal, "journal_records_away", "journal_records")
    for r in sent[800:]:
        w.append(r)
    assert w.drain(WAIT), "the spool did not drain once the database was back"
    assert [(r.lsn, r.payload) for r in stored(journal)] == [(r.lsn, records.encode(r).payload) for r in sent]
    stats = w.stats()
    assert stats.appended == 1200 and stats.written >= 1200 and stats.write_errors >= 1
    assert (registry.get_sample_value("kruntimes_journal_write_latency_seconds_count") or 0) >= 1


def test_bad_records_are_rejected_and_counted_on_either_side_and_their_batches_land(
        journal: backends.Journal, make_writer: Any) -> None:
    w = make_writer()
    good = [record(lsn) for lsn in (1, 3, 5)]
    w.append(good[0])
    w.append(record(2, payload={"score": 0.5}))  # a finished payload: rejected before the pipe
    w.append(good[1])
    # A deferred record whose payload cannot be built: rejected by the child.
    w.append(payloads.DeferredRecord("7f0c1d2e3b4a59687766554433221100", 4, datetime.now(timezone.utc),
                                     "mutation", {"kind": "Run", "event": "ADDED"}, "summary", 5))
    w.append(good[2])
    assert w.flush(WAIT)
    assert [r.lsn for r in stored(journal)] == [1, 3, 5]
    assert w.stats().rejected["malformed"] == 2


def test_a_record_whose_data_cannot_cross_is_rejected_and_counted_and_its_chunk_lands(
        journal: backends.Journal, make_writer: Any) -> None:
    w = make_writer()
    w.append(record(1))
    w.append(payloads.DeferredRecord("7f0c1d2e3b4a59687766554433221100", 2, datetime.now(timezone.utc),
                                     "bind", {"result": lambda: "ok"}, "summary", 5))  # cannot be pickled
    w.append(record(3))
    assert w.flush(WAIT)
    assert [r.lsn for r in stored(journal)] == [1, 3]
    assert w.stats().rejected["malformed"] == 1


def test_flush_does_not_wait_out_the_child_s_commit_interval(journal: backends.Journal, make_writer: Any) -> None:
    w = make_writer(settings.Batching(commit_interval=5.0))
    w.append(record(1))
    assert w.flush(WAIT)  # the first batch: nothing was written for a while
    started = time.monotonic()
    w.append(record(2))  # would wait for the interval, but a flush is waiting for it
    assert w.flush(WAIT)
    assert time.monotonic() - started < 2.5
    assert [r.lsn for r in stored(journal)] == [1, 2]


def test_flush_does_not_wait_out_the_child_s_acknowledgement_gap(journal: backends.Journal, make_writer: Any) -> None:
    w = make_writer(ack_gap=5.0)
    for lsn in range(1, 4):
        started = time.monotonic()
        w.append(record(lsn))
        assert w.flush(WAIT)
        assert time.monotonic() - started < 2.5  # acknowledged at once, not after the gap
    assert [r.lsn for r in stored(journal)] == [1, 2, 3]


class _Witness:
    """Stands for a pod in a checkpoint's data; notes the thread that pickles it, which gets the pod."""

    threads: list[str] = []

    def __init__(self, info: Any) -> None:
        self.info = info

    def __reduce__(self) -> tuple[Any, ...]:
        _Witness.threads.append(threading.current_thread().name)
        return operator.itemgetter(0), ((self.info,),)


def test_a_checkpoint_is_pickled_by_the_sender_not_by_the_thread_that_appends_it(
        journal: backends.Journal, make_writer: Any) -> None:
    # The appending thread holds the cache lock: pickling the whole cache there would stop
    # every worker (~0.7 s at 100,000 objects). A chunk of ordinary records is sealed here.
    _Witness.threads.clear()
    w = make_writer()
    state = {"pods": [_Witness(builders.pod("p0"))], "runs": [], "assumed": []}
    w.append(payloads.DeferredRecord(INCARNATION, 1, T0, "checkpoint", state, "summary", 5))
    for lsn in range(2, SEAL_AT + 2):
        w.append(record(lsn))
    assert w.flush(WAIT)
    assert _Witness.threads == ["kruntimes-journal-sender"]
    written = stored(journal)
    assert [r.lsn for r in written] == list(range(1, SEAL_AT + 2))
    assert [p["name"] for p in records.decode(written[0]).payload["pods"]] == ["p0"]


def test_the_drop_policy_accounts_for_every_record(journal: backends.Journal, make_writer: Any) -> None:
    w = make_writer(settings.Batching(policy="drop", buffer_size=50))
    accepted = [r.lsn for r in (record(lsn) for lsn in range(1, 5001)) if w.append(r)]
    assert w.flush(WAIT)
    stats = w.stats()
    assert [r.lsn for r in stored(journal)] == accepted
    assert stats.dropped == 5000 - len(accepted)


def test_the_next_writer_continues_after_the_last_durable_lsn(journal_url: str, tmp_path: Path) -> None:
    for _ in range(2):
        with JournalSession(journal_url, SchedulerConfig(), spool_path=str(tmp_path / "spool")) as session:
            first = session.first_lsn
            session.recorder.record("leader", {"event": "acquired", "identity": "a", "term": 1})
    journal = backends.Journal.open(journal_url)
    try:
        stored = [(r.lsn, r.kind, r.incarnation) for r in factories.in_epoch_order(journal)]
        epochs = journal.epochs()
    finally:
        journal.close()
    assert [(lsn, kind) for lsn, kind, _ in stored] == [
        (1, "incarnation"), (2, "leader"), (3, "end"), (4, "incarnation"), (5, "leader"), (6, "end")]
    assert first == 4 and len({epoch for _, _, epoch in stored}) == 2
    assert [(e.first_lsn, e.head_lsn, e.end_lsn, e.end_reason) for e in epochs.values()] == [
        (1, 3, 3, "shutdown"), (4, 6, 6, "shutdown")]


def test_a_session_that_cannot_start_its_recorder_leaves_no_writer_process_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: JournalRecorder, *args: Any, **kw: Any) -> int:
        raise errors.JournalError("the incarnation record cannot be made")

    monkeypatch.setattr(JournalRecorder, "start", broken)
    started: list[ProcessJournalWriter] = []
    original = ProcessJournalWriter.__init__

    def remember(self: ProcessJournalWriter, *args: Any, **kw: Any) -> None:
        original(self, *args, **kw)
        started.append(self)

    monkeypatch.setattr(ProcessJournalWriter, "__init__", remember)
    with pytest.raises(errors.JournalError, match="cannot be made"):
        JournalSession(f"sqlite:///{tmp_path}/j.db", SchedulerConfig(), spool_path=str(tmp_path / "spool"))
    assert len(started) == 1 and started[0]._process.poll() is not None, "the writer process still runs"
