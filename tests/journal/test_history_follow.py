"""History tables that follow the journal: a ``follow`` writer stores records only, and the indexer
(``Journal.index``, ``kruntimes journal index``) later builds exactly what an inline writer builds.

The journal the real scheduler wrote (``history_journal``) is stored by the writer in
small batches; the tables must end equal to the inline writer's, on SQLite and
PostgreSQL, whatever the indexer's chunks, with an inline writer taking over in the
middle, and with the writer and the indexer running at once.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from kruntimes.cli import main as cli
from kruntimes.journal import records
from kruntimes.journal.history import derive, indexer
from kruntimes.journal.write import settings, writer
from kruntimes.journal.store import backends, engines, migrate, schema
from tests.journal.history_journal import Generated
from tests.journal.test_history_queries import QUERIES
from tests.journal.test_history_tables import empty_journal_url, snapshot, write_through_writer

pytest_plugins = ("tests.journal.history_fixtures",)

BACKENDS = ["sqlite", "postgresql"]


def store(url: str, batch: list[records.JournalRecord], *, history: str, max_batch: int = 7) -> None:
    """Append ``batch`` through a JournalWriter whose journal derives ``history`` (inline or follow)."""
    journal = backends.Journal.open(url, history=history)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            w = writer.JournalWriter(journal, settings.Spool(Path(tmp) / "spool"),
                                     batching=settings.Batching(max_batch=max_batch),
                                     instruments=settings.Instruments(registry=CollectorRegistry())).start()
            try:
                for record in batch:
                    assert w.append(record)
                assert w.drain(60)
                assert w.stats().written == len(batch)
            finally:
                w.close()
    finally:
        journal.close()


def inline_tables(request: pytest.FixtureRequest, backend: str, generated: Generated) -> dict[str, Any]:
    with empty_journal_url(request, backend) as url:
        write_through_writer(url, generated, max_batch=7)
        return snapshot(url)


def lag(url: str) -> list[indexer.Lag]:
    journal = backends.Journal.open(url, create=False)
    try:
        return journal.history_lag()
    finally:
        journal.close()


def documented_lag(url: str) -> list[dict[str, Any]]:
    """docs/journal.md's "history-lag" query, as an operator runs it."""
    engine = engines.create_engine(url)
    try:
        with engine.connect() as conn:
            return [dict(row) for row in conn.execute(sa.text(QUERIES["history-lag"]["any"])).mappings()]
    finally:
        engine.dispose()


def in_thread(url: str, work: Callable[[backends.Journal], None], failures: list[BaseException]) -> threading.Thread:
    """A thread (not started) that opens the journal, runs ``work`` on it and keeps what it raised."""
    def run() -> None:
        journal = backends.Journal.open(url, create=False)
        try:
            work(journal)
        except Exception as exc:  # noqa: BLE001 - reported by the test thread
            failures.append(exc)
        finally:
            journal.close()

    return threading.Thread(target=run)


def index(url: str, chunk_size: int) -> int:
    journal = backends.Journal.open(url, create=False)
    try:
        return journal.index(chunk_size=chunk_size)
    finally:
        journal.close()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("chunk_size", [1, 13, 5000])
def test_a_follow_writer_stores_records_only_and_the_indexer_builds_what_an_inline_writer_builds(
        backend: str, chunk_size: int, generated: Generated, request: pytest.FixtureRequest) -> None:
    expected = inline_tables(request, backend, generated)
    with empty_journal_url(request, backend) as url:
        store(url, generated.records, history="follow")
        assert not any(snapshot(url).values()), "a follow writer writes no history row"
        epoch, head = generated.records[0].incarnation, generated.records[-1].lsn
        assert lag(url) == [indexer.Lag(epoch, None, head, generated.records[0].lsn)]
        assert documented_lag(url) == [{"epoch": epoch, "history_lsn": None, "head_lsn": head,
                                        "lsns_behind": head - generated.records[0].lsn + 1}]
        assert index(url, chunk_size) == len(generated.records)
        assert documented_lag(url) == []
        assert lag(url) == []
        assert snapshot(url) == expected
        assert index(url, chunk_size) == 0, "caught up: nothing more to do"


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_inline_writer_leaves_its_batches_to_the_indexer_while_the_tables_trail_then_takes_over(
        backend: str, generated: Generated, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture) -> None:
    expected = inline_tables(request, backend, generated)
    first, second, third = (generated.records[:40], generated.records[40:90], generated.records[90:])
    with empty_journal_url(request, backend) as url:
        store(url, first, history="follow")
        store(url, second, history="inline")  # the tables trail: this writer's rows are the indexer's too
        assert "the history tables trail the journal" in caplog.text
        assert not any(snapshot(url).values())
        assert lag(url)[0].history_lsn is None and lag(url)[0].head_lsn == second[-1].lsn
        assert index(url, 11) == len(first) + len(second)
        assert lag(url) == []
        store(url, third, history="inline")  # caught up: the inline writer derives again, in its transaction
        assert lag(url) == []
        assert snapshot(url) == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_indexer_and_a_follow_writer_run_at_once_and_nothing_is_lost_or_reordered(
        backend: str, generated: Generated, request: pytest.FixtureRequest) -> None:
    expected = inline_tables(request, backend, generated)
    with empty_journal_url(request, backend) as url:
        backends.Journal.open(url).close()  # migrated before either starts
        done, rounds = threading.Event(), [0]
        failures: list[BaseException] = []

        def index_a_chunk_a_call(journal: backends.Journal) -> None:
            while not done.is_set():
                rounds[0] += bool(journal.index(chunk_size=3, limit=3))  # one chunk a call

        thread = in_thread(url, index_a_chunk_a_call, failures)
        thread.start()
        journal = backends.Journal.open(url, create=False, history="follow")
        try:
            for start in range(0, len(generated.records), 5):
                journal.append_batch(generated.records[start:start + 5])
                time.sleep(0.002)  # the indexer gets its turns between batches
        finally:
            journal.close()
            done.set()
            thread.join(60)
        assert not failures
        assert rounds[0] > 1, "the indexer ran while records were being stored"
        index(url, 3)
        assert lag(url) == []
        assert snapshot(url) == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_indexers_at_once_take_turns_and_build_the_tables_once(
        backend: str, generated: Generated, request: pytest.FixtureRequest) -> None:
    expected = inline_tables(request, backend, generated)
    with empty_journal_url(request, backend) as url:
        store(url, generated.records, history="follow")
        read: list[int] = []
        failures: list[BaseException] = []
        start = threading.Barrier(2)

        def index_all(journal: backends.Journal) -> None:
            start.wait(10)
            read.append(journal.index(chunk_size=3))

        threads = [in_thread(url, index_all, failures) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert failures == []
        assert sum(read) == len(generated.records), "each record indexed once, by one of them"
        assert snapshot(url) == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_reindex_leaves_every_epoch_caught_up(backend: str, generated: Generated,
                                              request: pytest.FixtureRequest) -> None:
    expected = inline_tables(request, backend, generated)
    with empty_journal_url(request, backend) as url:
        store(url, generated.records, history="follow")
        journal = backends.Journal.open(url)
        try:
            journal.reindex(chunk_size=50)
            assert journal.history_lag() == []
        finally:
            journal.close()
        assert snapshot(url) == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_revision_starts_every_epoch_caught_up_and_its_downgrade_drops_the_column(
        backend: str, generated: Generated, request: pytest.FixtureRequest) -> None:
    with empty_journal_url(request, backend) as url:
        migrate.upgrade(url, "0006_churn")
        engine = engines.create_engine(url)
        try:
            with engine.begin() as conn:  # an epoch as the writer of revision 0006 left it
                conn.execute(sa.text(
                    "INSERT INTO journal_epochs (epoch, first_lsn, head_lsn, head_hash, algorithm, started_at,"
                    " updated_at) VALUES ('e1', 1, 42, 'h', 'sha256', :t, :t)"),
                    {"t": schema.sqlite_timestamp(generated.records[0].recorded_at)
                     if backend == "sqlite" else generated.records[0].recorded_at})
            migrate.upgrade(url)
            with engine.connect() as conn:
                assert indexer.lag(conn) == []
                assert conn.execute(sa.text("SELECT history_lsn FROM journal_epochs")).scalar() == 42
            migrate.downgrade(url, "0006_churn")
            with engine.connect() as conn:
                assert "history_lsn" not in {c["name"] for c in sa.inspect(conn).get_columns("journal_epochs")}
        finally:
            engine.dispose()


def test_an_epoch_whose_head_names_a_record_no_longer_stored_is_caught_up_at_its_head(
        generated: Generated, request: pytest.FixtureRequest) -> None:
    with empty_journal_url(request, "sqlite") as url:
        store(url, generated.records, history="follow")
        engine = engines.create_engine(url)
        try:
            with engine.begin() as conn:  # the epoch's last records are gone (a table restored from a copy)
                conn.execute(sa.delete(schema.journal_records).where(
                    schema.journal_records.c.lsn > generated.records[-5].lsn))
        finally:
            engine.dispose()
        assert index(url, 1000) == len(generated.records) - 4
        assert lag(url) == []


def test_kruntimes_journal_index_brings_the_tables_up_to_date_and_says_so(
        generated: Generated, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]) -> None:
    expected = inline_tables(request, "sqlite", generated)
    with empty_journal_url(request, "sqlite") as url:
        store(url, generated.records, history="follow")
        assert cli.main(["journal", "index", "--journal", url, "--chunk", "10"]) == 0
        out = capsys.readouterr().out
        assert f"indexed {len(generated.records)} records" in out
        assert "the history tables hold every stored record" in out
        assert snapshot(url) == expected
        assert cli.main(["journal", "index", "--journal", url]) == 0
        assert "indexed 0 records" in capsys.readouterr().out


def test_kruntimes_journal_index_refuses_a_bad_chunk_and_a_missing_journal(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["journal", "index", "--journal", f"sqlite:///{tmp_path}/j.db", "--chunk", "0"])
    assert "--chunk" in capsys.readouterr().err
    assert cli.main(["journal", "index", "--journal", f"sqlite:///{tmp_path}/missing.db"]) == 2
    assert "kruntimes journal index:" in capsys.readouterr().err


def test_an_unknown_history_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="inline, follow"):
        backends.Journal(engines.create_engine("sqlite://"), history="later")


def test_derived_kinds_are_the_only_payloads_the_indexer_reads() -> None:
    # A checkpoint's payload is large and derives nothing: the indexer leaves it in the database.
    assert "checkpoint" not in derive.KINDS and {"cycle", "mutation", "bind", "reserve"} <= derive.KINDS


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_reindex_waits_for_an_indexers_chunk_in_flight(backend: str, generated: Generated,
                                                         request: pytest.FixtureRequest) -> None:
    expected = inline_tables(request, backend, generated)
    with empty_journal_url(request, backend) as url:
        store(url, generated.records, history="follow")
        engine = engines.create_engine(url)
        done = threading.Event()
        failures: list[BaseException] = []
        try:
            with engine.begin() as held:
                indexer.take_turn(held)  # an indexer's transaction, mid-chunk
                thread = in_thread(url, lambda journal: (journal.reindex(), done.set()), failures)
                thread.start()
                assert not done.wait(0.5), "the reindex went ahead of the chunk in flight"
            thread.join(60)
        finally:
            engine.dispose()
        assert failures == [] and done.is_set()
        assert lag(url) == []
        assert snapshot(url) == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_prune_waits_for_an_indexers_chunk_in_flight(backend: str, generated: Generated,
                                                       request: pytest.FixtureRequest) -> None:
    from kruntimes.journal import prune

    cut = [r.lsn for r in generated.records if r.kind == "checkpoint"][-1]
    with empty_journal_url(request, backend) as url:
        store(url, generated.records, history="follow")
        engine = engines.create_engine(url)
        done = threading.Event()
        failures: list[BaseException] = []
        try:
            with engine.begin() as held:
                indexer.take_turn(held)  # an indexer's transaction, mid-chunk
                thread = in_thread(url, lambda journal: (prune.prune_to(journal, cut), done.set()), failures)
                thread.start()
                assert not done.wait(0.5), "the prune went ahead of the chunk in flight"
            thread.join(60)
        finally:
            engine.dispose()
        assert failures == [] and done.is_set()
        index(url, 1000)
        lsn = [c.name for c in derive.cycles.columns].index("lsn")
        assert all(row[lsn] >= cut for row in snapshot(url)["history_cycles"]), "no row of a pruned record"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["inline", "follow"])
def test_records_stored_while_a_reindex_runs_end_in_the_tables_once(
        backend: str, mode: str, generated: Generated, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A live scheduler's writer stores the journal's second half while `journal reindex`
    # has rebuilt the first and not yet committed. On PostgreSQL, before the reindex held
    # inline writers off and marked only the heads it had read, those records were marked
    # as in the tables without their rows (an inline writer trailed, a follow writer was
    # counted as indexed), and the indexer never came back for them.
    expected = inline_tables(request, backend, generated)
    half = len(generated.records) // 2
    with empty_journal_url(request, backend) as url:
        store(url, generated.records[:half], history="follow")
        rebuilt, go = threading.Event(), threading.Event()
        rebuild = indexer.rebuild_history

        def rebuild_then_wait(conn: sa.Connection, **kwargs: Any) -> int:
            read = rebuild(conn, **kwargs)
            rebuilt.set()
            go.wait(60)  # the reindex's transaction stays open while the writer stores
            return read

        monkeypatch.setattr(indexer, "rebuild_history", rebuild_then_wait)
        failures: list[BaseException] = []
        reindex = in_thread(url, lambda journal: journal.reindex(chunk_size=50), failures)
        reindex.start()
        assert rebuilt.wait(60)

        def second_half() -> None:
            try:
                store(url, generated.records[half:], history=mode)
            except BaseException as exc:  # noqa: BLE001 - reported by the test thread
                failures.append(exc)

        writer_thread = threading.Thread(target=second_half)
        writer_thread.start()
        writer_thread.join(2.0)  # a follow writer on PostgreSQL stores now; the others wait for the reindex
        go.set()
        reindex.join(60)
        writer_thread.join(120)
        assert failures == [] and not reindex.is_alive() and not writer_thread.is_alive()
        index(url, 1000)  # what a follow writer stored after the heads were read
        assert lag(url) == []
        assert snapshot(url) == expected
