"""JournalWriter: batching, spilling and draining, crashes, bad records, back pressure.

Most tests put a ``FlakyJournal`` in front of a real journal (both backends): its
``append_batch`` fails while ``down`` is set and hangs while ``stalled`` is set, and
it counts transactions.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kruntimes.journal import errors, records
from kruntimes.journal.write import settings, spool, writer
from kruntimes.journal.store import backends
from tests.journal.factories import record, unchained

WAIT = 10.0  # generous upper bound for anything that should take milliseconds
#: Retries in these tests come quickly: a recovered database is written to within a test's patience.
FAST_RETRY = settings.Patience(retry_interval=0.02, max_retry_interval=0.05)


class FlakyJournal:
    """A journal whose database fails or hangs on demand."""

    def __init__(self, inner: backends.Journal, delay: float = 0.0) -> None:
        self.inner = inner
        self.down = False
        self.late = False
        self.delay = delay
        self.stalled = threading.Event()
        self.entered = threading.Event()
        self.batch_sizes: list[int] = []

    def append_batch(self, rows: list[records.EncodedRecord], *, skip_existing: bool = False,
                     **options: Any) -> int:
        self.entered.set()
        deadline = time.monotonic() + WAIT
        while self.stalled.is_set() and time.monotonic() < deadline:
            time.sleep(0.005)
        if self.down:
            raise errors.JournalUnavailable("simulated outage")
        time.sleep(self.delay)
        n = self.inner.append_batch(rows, skip_existing=skip_existing, **options)
        self.batch_sizes.append(len(rows))
        return n

    def last_lsn(self, timeout: float | None = None) -> int | None:
        if self.down:
            raise errors.JournalUnavailable("simulated outage")
        if self.late:  # what the journal answers when its database does not answer within the bound
            assert timeout is not None, "asked without a bound, a caller would wait for a database that does not answer"
            raise errors.JournalUnavailable(f"the journal database did not answer within {timeout:g} s")
        return self.inner.last_lsn(timeout)

    def epochs(self, only: Any = None) -> dict[str, backends.EpochHead]:
        if self.down:
            raise errors.JournalUnavailable("simulated outage")
        return self.inner.epochs(only)

    @property
    def history_deferred(self) -> bool:
        return self.inner.history_deferred


@pytest.fixture
def flaky(journal: backends.Journal) -> FlakyJournal:
    return FlakyJournal(journal)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def make_writer(tmp_path: Path, registry: CollectorRegistry) -> Iterator[Any]:
    made: list[writer.JournalWriter] = []

    def make(journal: Any, batching: settings.Batching = settings.Batching(), *, spool_path: Path | None = None,
             patience: settings.Patience = FAST_RETRY) -> writer.JournalWriter:
        w = writer.JournalWriter(journal, settings.Spool(spool_path or tmp_path / "journal.spool"), batching=batching,
                                 patience=patience, instruments=settings.Instruments(registry=registry))
        made.append(w)
        return w

    yield make
    for w in made:
        if w._thread is None or w._thread.is_alive():
            w.close(timeout=WAIT)


def metric(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels or None)
    return 0.0 if value is None else value


def stored(journal: backends.Journal) -> list[records.EncodedRecord]:
    """What the journal holds, its chain checked, links blanked (to compare with ``records.encode``)."""
    return unchained(journal.read_encoded())


def test_records_appended_before_start_go_out_in_batches_of_max_batch(flaky: FlakyJournal, make_writer: Any) -> None:
    w = make_writer(flaky, settings.Batching(max_batch=1000))
    appended = [record(lsn) for lsn in range(1, 2501)]
    for r in appended:
        w.append(r)
    w.start()
    assert w.flush(WAIT)
    assert flaky.batch_sizes == [1000, 1000, 500]
    assert stored(flaky.inner) == [records.encode(r) for r in appended]


def test_a_single_record_is_written_at_once_without_waiting_for_a_batch(
    flaky: FlakyJournal, make_writer: Any, registry: CollectorRegistry
) -> None:
    w = make_writer(flaky).start()
    started = time.monotonic()
    w.append(record(1))
    assert w.flush(WAIT)
    assert time.monotonic() - started < 1.0
    assert flaky.batch_sizes == [1]
    assert metric(registry, "kruntimes_journal_records_written_total") == 1
    assert metric(registry, "kruntimes_journal_write_latency_seconds_count") == 1


def test_a_commit_interval_gathers_a_trickle_into_few_transactions_and_a_full_batch_goes_at_once(
    flaky: FlakyJournal, make_writer: Any
) -> None:
    w = make_writer(flaky, settings.Batching(commit_interval=1.0, max_batch=50)).start()
    w.append(record(1))
    assert w.flush(WAIT)  # the first record goes at once: nothing was written for a while
    for lsn in range(2, 12):  # a trickle, well within one interval
        w.append(record(lsn))
        time.sleep(0.005)
    assert w.flush(WAIT)
    assert flaky.batch_sizes == [1, 10]
    started = time.monotonic()
    for lsn in range(12, 62):  # a full batch does not wait for the interval
        w.append(record(lsn))
    assert w.flush(WAIT)
    assert flaky.batch_sizes[2:] == [50]
    assert time.monotonic() - started < 0.5
    assert [r.lsn for r in stored(flaky.inner)] == list(range(1, 62))


def test_an_outage_spills_in_order_and_the_journal_ends_complete_exactly_once(
    flaky: FlakyJournal, make_writer: Any, registry: CollectorRegistry
) -> None:
    w = make_writer(flaky, settings.Batching(max_batch=50)).start()
    everything = [record(lsn) for lsn in range(1, 501)]
    for r in everything[:100]:
        w.append(r)
    assert w.flush(WAIT)
    flaky.down = True
    for r in everything[100:400]:
        w.append(r)
    assert w.flush(WAIT)
    assert w.spooled >= 300 and [r.lsn for r in stored(flaky.inner)] == list(range(1, 101))
    flaky.down = False
    for r in everything[400:]:
        w.append(r)
    assert w.drain(WAIT)
    assert stored(flaky.inner) == [records.encode(r) for r in everything]
    assert w.spooled == 0
    assert metric(registry, "kruntimes_journal_records_spilled_total") >= 300
    assert metric(registry, "kruntimes_journal_records_written_total") == 500
    assert metric(registry, "kruntimes_journal_write_errors_total") >= 1


def test_a_flapping_database_under_a_concurrent_producer_loses_and_duplicates_nothing(
    flaky: FlakyJournal, make_writer: Any
) -> None:
    w = make_writer(flaky, settings.Batching(max_batch=64, buffer_size=1000)).start()
    everything = [record(lsn) for lsn in range(1, 3001)]

    def produce() -> None:
        for r in everything:
            w.append(r)

    producer = threading.Thread(target=produce)
    producer.start()
    for i in range(12):
        flaky.down = i % 2 == 0
        time.sleep(0.02)
    flaky.down = False
    producer.join(WAIT)
    assert w.drain(WAIT)
    assert stored(flaky.inner) == [records.encode(r) for r in everything]


def test_a_slow_database_makes_the_writer_spill_until_it_recovers(flaky: FlakyJournal, make_writer: Any) -> None:
    flaky.delay = 0.1
    w = make_writer(flaky, settings.Batching(max_batch=10), patience=replace(FAST_RETRY, slow_write_seconds=0.05)).start()
    everything = [record(lsn) for lsn in range(1, 101)]
    for r in everything:
        w.append(r)
        if r.lsn == 10:
            time.sleep(0.05)  # let the first, slow, batch happen alone
    assert w.flush(WAIT)
    assert w.stats().spilled > 0
    flaky.delay = 0.0
    assert w.drain(WAIT)
    assert stored(flaky.inner) == [records.encode(r) for r in everything]


def test_a_torn_spool_left_by_a_crash_is_cut_and_its_intact_records_drained_once(
    flaky: FlakyJournal, make_writer: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "journal.spool"
    crashed = spool.Spool.open(path)
    crashed.append([records.encode(record(lsn)) for lsn in range(1, 51)])
    crashed.close()
    with path.open("ab") as f:  # the crash hit in the middle of the next frame
        f.write(b"\x00\x00\x04\x00\xde\xad\xbe\xefhalf a rec")
    # ... and after records 1..20 had already been drained into the database.
    flaky.inner.append_batch([record(lsn) for lsn in range(1, 21)])

    w = make_writer(flaky, spool_path=path)
    assert "torn tail at offset" in caplog.text
    assert w.last_lsn() == 50  # the next incarnation starts after the spooled records
    w.start()
    for lsn in range(51, 61):
        w.append(record(lsn))
    assert w.drain(WAIT)
    assert stored(flaky.inner) == [records.encode(record(lsn)) for lsn in range(1, 61)]
    assert w.spooled == 0


@pytest.mark.parametrize("database", ["down", "late"])
def test_with_records_spooled_a_database_that_cannot_answer_at_once_leaves_the_next_lsn_to_the_spool(
    flaky: FlakyJournal, make_writer: Any, tmp_path: Path, database: str
) -> None:
    path = tmp_path / "journal.spool"
    earlier = spool.Spool.open(path)
    earlier.append([records.encode(record(lsn)) for lsn in range(1, 51)])
    earlier.close()
    flaky.inner.append_batch([record(lsn) for lsn in range(1, 101)])  # the database knows more, but does not say
    setattr(flaky, database, True)

    w = make_writer(flaky, spool_path=path)
    assert w.last_lsn() == 50  # the new epoch starts on the spool alone (its keys cannot collide: SPEC §5)


def test_a_killed_process_keeps_what_it_spooled_and_the_next_one_drains_it(journal_url: str, tmp_path: Path) -> None:
    spool_path = tmp_path / "journal.spool"
    child = textwrap.dedent(
        f"""
        import sys, time
        from prometheus_client import CollectorRegistry
        from kruntimes.journal import errors
        from kruntimes.journal.write import settings, writer
        from kruntimes.journal.store import backends
        from tests.journal.factories import record

        class Down:
            history_deferred = False

            def append_batch(self, rows, **options):
                raise errors.JournalUnavailable("database unreachable")

        w = writer.JournalWriter(Down(), settings.Spool({str(spool_path)!r}),
                                 instruments=settings.Instruments(registry=CollectorRegistry())).start()
        for lsn in range(1, 201):
            w.append(record(lsn))
        assert w.flush(10)
        print("spooled", w.spooled, flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "spooled 200"
    finally:
        proc.kill()
        proc.wait(WAIT)

    journal = backends.Journal.open(journal_url)
    try:
        w = writer.JournalWriter(journal, settings.Spool(spool_path),
                                 instruments=settings.Instruments(registry=CollectorRegistry()))
        assert journal.last_lsn() is None and w.last_lsn() == 200
        with w:
            assert w.drain(WAIT)
        assert stored(journal) == [records.encode(record(lsn)) for lsn in range(1, 201)]
    finally:
        journal.close()


def test_a_malformed_record_is_rejected_and_counted_and_its_batch_lands(
    flaky: FlakyJournal, make_writer: Any, registry: CollectorRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    w = make_writer(flaky, settings.Batching(max_payload_bytes=1000))
    good = [record(lsn) for lsn in (1, 2, 4, 6)]
    w.append(good[0])
    w.append(good[1])
    w.append(record(3, payload={"score": 0.25}))
    w.append(good[2])
    w.append(record(5, payload={"blob": "x" * 2000}))
    w.append(good[3])
    w.start()
    assert w.flush(WAIT)
    assert flaky.batch_sizes == [4]
    assert stored(flaky.inner) == [records.encode(r) for r in good]
    assert metric(registry, "kruntimes_journal_records_rejected_total", reason="malformed") == 1
    assert metric(registry, "kruntimes_journal_records_rejected_total", reason="oversized") == 1
    assert "rejected 2 record(s)" in caplog.text and "payload['score'] is the float 0.25" in caplog.text


def test_pre_encoded_records_are_written_as_they_are(flaky: FlakyJournal, make_writer: Any) -> None:
    w = make_writer(flaky).start()
    rows = [records.encode(record(lsn)) for lsn in range(1, 6)]
    for r in rows:
        w.append(r)
    assert w.flush(WAIT)
    assert stored(flaky.inner) == rows


def test_drop_policy_drops_and_counts_when_the_buffer_is_full(
    flaky: FlakyJournal, make_writer: Any, registry: CollectorRegistry
) -> None:
    w = make_writer(flaky, settings.Batching(policy="drop", buffer_size=10, max_batch=5)).start()
    flaky.stalled.set()
    w.append(record(1))
    assert flaky.entered.wait(WAIT)  # the writer hangs inside the database call
    accepted = [w.append(record(lsn)) for lsn in range(2, 21)]
    assert accepted == [True] * 10 + [False] * 9
    assert metric(registry, "kruntimes_journal_records_dropped_total") == 9
    flaky.stalled.clear()
    assert w.flush(WAIT)
    assert [r.lsn for r in stored(flaky.inner)] == list(range(1, 12))


def test_block_policy_blocks_append_until_the_writer_frees_room(flaky: FlakyJournal, make_writer: Any) -> None:
    w = make_writer(flaky, settings.Batching(buffer_size=5, max_batch=5)).start()
    flaky.stalled.set()
    w.append(record(1))
    assert flaky.entered.wait(WAIT)
    done = threading.Event()

    def produce() -> None:
        for lsn in range(2, 21):
            w.append(record(lsn))
        done.set()

    producer = threading.Thread(target=produce)
    producer.start()
    assert not done.wait(0.3), "append should block while the buffer is full"
    assert w.stats().buffer_depth == 5
    flaky.stalled.clear()
    assert done.wait(WAIT)
    producer.join(WAIT)
    assert w.flush(WAIT)
    assert [r.lsn for r in stored(flaky.inner)] == list(range(1, 21))
    assert w.stats().dropped == 0


def _unwritable(self: spool.Spool, batch: Any) -> None:
    raise errors.SpoolUnwritable(f"cannot write the journal spool {self.path}: [Errno 28] No space left on device")


def test_drop_policy_counts_records_neither_database_nor_spool_took(
    flaky: FlakyJournal, make_writer: Any, registry: CollectorRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spool.Spool, "append", _unwritable)
    flaky.down = True
    w = make_writer(flaky, settings.Batching(policy="drop")).start()
    for lsn in range(1, 11):
        w.append(record(lsn))
    assert w.flush(WAIT)
    assert metric(registry, "kruntimes_journal_records_dropped_total") == 10
    assert stored(flaky.inner) == []


def test_block_policy_holds_records_until_the_database_or_the_spool_takes_them(
    flaky: FlakyJournal, make_writer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spool.Spool, "append", _unwritable)
    flaky.down = True
    w = make_writer(flaky, settings.Batching(buffer_size=5, max_batch=5)).start()
    for lsn in range(1, 6):
        w.append(record(lsn))
    assert not w.flush(0.3)
    blocked = threading.Thread(target=lambda: [w.append(record(lsn)) for lsn in range(6, 12)])
    blocked.start()
    blocked.join(0.3)
    assert blocked.is_alive(), "append should block: nothing can take the held records"
    flaky.down = False
    blocked.join(WAIT)
    assert w.flush(WAIT)
    assert [r.lsn for r in stored(flaky.inner)] == list(range(1, 12))
    assert w.stats().dropped == 0


def test_closing_while_the_database_is_down_leaves_the_records_in_the_spool(
    flaky: FlakyJournal, make_writer: Any, tmp_path: Path
) -> None:
    flaky.down = True
    w = make_writer(flaky).start()
    for lsn in range(1, 31):
        w.append(record(lsn))
    w.close(timeout=WAIT)
    with pytest.raises(errors.JournalError, match="closed"):
        w.append(record(31))
    reopened = spool.Spool.open(tmp_path / "journal.spool")
    assert [r.lsn for r in reopened.records()] == list(range(1, 31))
    reopened.close()


def test_several_writers_share_one_registry_and_counters_never_go_down(
    journal: backends.Journal, tmp_path: Path, registry: CollectorRegistry
) -> None:
    for i in range(3):
        with writer.JournalWriter(journal, settings.Spool(tmp_path / f"s{i}"),
                                  instruments=settings.Instruments(registry=registry)) as w:
            w.append(record(i + 1))
    assert metric(registry, "kruntimes_journal_records_appended_total") == 3
    assert metric(registry, "kruntimes_journal_records_written_total") == 3
    assert metric(registry, "kruntimes_journal_buffer_depth") == 0


def test_writers_on_the_default_registry_do_not_collide(journal: backends.Journal, tmp_path: Path) -> None:
    for i in range(2):
        with writer.JournalWriter(journal, settings.Spool(tmp_path / f"s{i}")) as w:
            w.append(record(i + 1))
    assert journal.last_lsn() == 2
