"""The history tables are derived, and rebuildable: the writer's batches, a reindex and the migration's backfill agree.

The journal the real scheduler wrote (``history_journal``) goes through the writer in
small batches (so a Run's pending cycles, placement and end straddle batch boundaries),
and the tables it built must equal what ``Journal.reindex`` and the revision that
creates them derive from the stored records, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from kruntimes.journal import records
from kruntimes.journal.history import derive
from kruntimes.journal.history import cycles as history_cycles
from kruntimes.journal.write import settings, writer
from kruntimes.journal.store import backends, engines, migrate, schema
from tests.journal.history_journal import NS, Generated, fresh_postgres_schema

pytest_plugins = ("tests.journal.history_fixtures",)

Snapshot = dict[str, list[tuple[Any, ...]]]


@contextmanager
def empty_journal_url(request: pytest.FixtureRequest, backend: str) -> Iterator[str]:
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/journal.db"
        return
    with fresh_postgres_schema(request.getfixturevalue("postgres_base_url")) as url:
        yield url


def snapshot(url: str) -> Snapshot:
    """Every history table's rows, sorted, with times as UTC instants (both backends alike)."""
    engine = engines.create_engine(url)
    try:
        with engine.connect() as conn:
            return {table.name: sorted((tuple(row) for row in conn.execute(sa.select(table))), key=repr)
                    for table in derive.TABLES}
    finally:
        engine.dispose()


def write_through_writer(url: str, generated: Generated, max_batch: int) -> None:
    journal = backends.Journal.open(url)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            w = writer.JournalWriter(journal, settings.Spool(Path(tmp) / "spool"),
                                     batching=settings.Batching(max_batch=max_batch),
                                     instruments=settings.Instruments(registry=CollectorRegistry())).start()
            try:
                for record in generated.records:
                    assert w.append(record)
                assert w.drain(60)
                assert w.stats().written == len(generated.records)
            finally:
                w.close()
    finally:
        journal.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_reindex_rebuilds_exactly_what_the_writer_built_batch_by_batch(
        backend: str, generated: Generated, request: pytest.FixtureRequest) -> None:
    with empty_journal_url(request, backend) as url:
        write_through_writer(url, generated, max_batch=7)
        incremental = snapshot(url)
        journal = backends.Journal.open(url)
        try:
            assert journal.reindex(chunk_size=50) == sum(r.kind in derive.KINDS for r in generated.records)
        finally:
            journal.close()
        assert snapshot(url) == incremental
    cycles = [r for r in generated.records if r.kind == "cycle"]
    assert len(incremental["history_cycles"]) == len(cycles)
    assert len(incremental["history_candidates"]) == sum(len(r.payload["candidates"]) for r in cycles)
    assert len(incremental["history_placements"]) == sum(r.payload["chosen"] is not None for r in cycles)
    # Each scheduled placement carries its reservation's requests, whichever batch the reservation was in.
    requests = {r.payload["assumption"]["run_uid"]: derive.compact_json(r.payload["assumption"]["requests"])
                for r in generated.records if r.kind == "reserve"}
    columns = [c.name for c in derive.placements.columns]
    scheduled = [dict(zip(columns, row)) for row in incremental["history_placements"]]
    scheduled = [p for p in scheduled if p["outcome"] == "scheduled"]
    assert scheduled and all(p["requests"] == requests[p["run_uid"]] is not None for p in scheduled)
    assert incremental["history_waits"] and incremental["history_pod_hours"]
    # Placements whose previous cycle was in an earlier batch of 7 are linked alike.
    previous = [c.name for c in derive.placements.columns].index("previous_lsn")
    assert any(row[previous] is not None for row in incremental["history_placements"])


# journal_records as revision 0002 left it: no chain_hash yet.
_LEGACY_RECORDS = sa.Table(
    "journal_records", sa.MetaData(), sa.Column("lsn", sa.BigInteger), sa.Column("incarnation", sa.String(64)),
    sa.Column("recorded_at", schema.UtcDateTime()), sa.Column("kind", sa.String(16)),
    sa.Column("schema_version", sa.Integer), sa.Column("payload", sa.Text), sa.Column("payload_sha256", sa.String(64)))


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_revision_that_creates_the_tables_backfills_what_the_writer_builds(
        backend: str, generated: Generated, request: pytest.FixtureRequest) -> None:
    with empty_journal_url(request, backend) as url:
        write_through_writer(url, generated, max_batch=1000)
        incremental = snapshot(url)
    with empty_journal_url(request, backend) as url:
        migrate.upgrade(url, "0002_history_views")
        engine = engines.create_engine(url)
        try:
            with engine.begin() as conn:  # records stored before the history tables (and epochs) existed
                conn.execute(sa.insert(_LEGACY_RECORDS), [{k: v for k, v in r._asdict().items() if k != "chain_hash"}
                                                   for r in map(records.encode, generated.records)])
        finally:
            engine.dispose()
        migrate.upgrade(url)
        assert snapshot(url) == incremental


def test_waits_follow_a_run_from_its_first_pending_cycle_to_its_placement(history_url: str,
                                                                          generated: Generated) -> None:
    rows = {row[3]: row for row in snapshot(history_url)["history_waits"]}  # by run name
    late = generated.truth.pending_after_phase1 & set(generated.truth.placed)
    assert late
    columns = [c.name for c in derive.waits.columns]
    for run in late:
        wait = dict(zip(columns, rows[run]))
        assert wait["outcome"] == "scheduled" and wait["pod"] == generated.truth.placed[run]
        assert timedelta(minutes=89) < wait["ended_at"] - wait["first_pending_at"] < timedelta(minutes=91)
        assert wait["waited_us"] == (wait["ended_at"] - wait["first_pending_at"]) // timedelta(microseconds=1)
    still = {run for run, row in rows.items() if dict(zip(columns, row))["end_lsn"] is None}
    assert still == set(generated.truth.pending)


T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)


def _record(lsn: int, kind: str, payload: dict[str, Any]) -> records.JournalRecord:
    return records.JournalRecord("e" * 32, lsn, T0 + timedelta(seconds=lsn), kind, payload)


def test_a_payload_of_the_wrong_shape_gives_nulls_and_its_batch_lands(journal: backends.Journal) -> None:
    journal.append_batch([
        _record(1, "cycle", {"run": {"not": "a name"}, "namespace": "ns\x00", "total": 2**70, "candidates": "x",
                             "rejections": [["Plugin", "reason"], 7], "chosen": 5}),
        _record(2, "mutation", {"kind": "Pod", "object": [], "name": "p"}),
        _record(3, "mutation", {"kind": "Run", "namespace": "ns", "uid": "u", "event": "DELETED", "object": None}),
        _record(4, "bind", {"namespace": 1}),
        _record(5, "cycle", {"namespace": "ns", "run": "r", "run_uid": "u", "status": "scheduled",
                             "result": "scheduled", "chosen": "pod-a", "candidates": [
                                 {"pod": "pod-a", "total": 3, "scores": [["Odd plugin", {"a": 1}, "x"]]}]}),
    ])
    with journal.engine.connect() as conn:
        cycle = conn.execute(sa.select(derive.cycles).where(derive.cycles.c.lsn == 1)).one()
        assert (cycle.run, cycle.namespace, cycle.total, cycle.chosen) == (None, None, None, None)
        assert conn.execute(sa.select(sa.func.count()).select_from(derive.rejections)).scalar() == 2
        assert conn.execute(sa.select(derive.pods.c.name, derive.pods.c.capacity)).all() == [("p", None)]
        assert conn.execute(sa.select(derive.binds.c.namespace)).scalar() is None
        scores = conn.execute(sa.select(derive.candidates.c.plugin_scores)).scalar()
        assert scores == '[["Odd plugin",{"a":1},"x"]]'  # an unusual shape is kept as compact JSON
        assert conn.execute(sa.select(derive.placements.c.pod)).scalar() == "pod-a"


def test_a_placement_ends_when_its_run_succeeds_and_a_new_placement_ends_the_old(journal: backends.Journal) -> None:
    def cycle(lsn: int, result: str, pod: str | None = None) -> records.JournalRecord:
        status = "unschedulable" if result == "unschedulable" else "scheduled"
        return _record(lsn, "cycle", {"namespace": NS, "run": "r", "run_uid": "u", "status": status,
                                      "result": result, "chosen": pod, "message": "full" if pod is None else None,
                                      "candidates": [], "rejections": []})

    def run(lsn: int, phase: str) -> records.JournalRecord:
        return _record(lsn, "mutation", {"kind": "Run", "event": "MODIFIED", "namespace": NS, "name": "r",
                                         "uid": "u", "object": {"phase": phase, "runtime": "cpu"}})

    journal.append_batch([cycle(1, "unschedulable"), cycle(2, "unschedulable"), cycle(3, "scheduled", "a")])
    journal.append_batch([cycle(4, "scheduled", "b"), run(5, "Running")])
    journal.append_batch([run(6, "Succeeded"), run(7, "Succeeded")])
    p = derive.placements
    with journal.engine.connect() as conn:
        ends = conn.execute(sa.select(p.c.pod, p.c.end_lsn, p.c.end_reason).order_by(p.c.lsn)).all()
        wait = conn.execute(sa.select(derive.waits)).one()
    assert ends == [("a", 4, "replaced"), ("b", 6, "succeeded")]
    assert (wait.first_lsn, wait.pending_cycles, wait.end_lsn, wait.pod) == (1, 2, 3, "a")
    assert wait.waited_us == 2_000_000


def test_a_placement_keeps_its_previous_cycle_and_top_candidate_from_this_batch_or_an_earlier_one(
        journal: backends.Journal) -> None:
    def cycle(lsn: int, run: str, result: str, pod: str, top: str) -> records.JournalRecord:
        return _record(lsn, "cycle", {"namespace": NS, "run": run, "run_uid": f"uid-{run}", "status": "scheduled",
                                      "result": result, "chosen": pod, "candidates": [
                                          {"pod": top, "total": 9, "scores": []}, {"pod": "z", "total": 1,
                                                                                   "scores": []}]})

    journal.append_batch([cycle(1, "u", "conflict", "a", "a"), cycle(2, "v", "scheduled", "c", "c")])
    journal.append_batch([cycle(3, "u", "scheduled", "b", "b"),  # its previous cycle is in the batch before
                          cycle(4, "w", "scheduled", "a", "a"), cycle(5, "w", "scheduled", "c", "c")])
    p = derive.placements

    def linked() -> list[tuple[Any, ...]]:
        with journal.engine.connect() as conn:
            return [tuple(row) for row in conn.execute(
                sa.select(p.c.lsn, p.c.previous_lsn, p.c.previous_result, p.c.previous_top).order_by(p.c.lsn))]

    incremental = linked()
    assert incremental == [(1, None, None, None), (2, None, None, None), (3, 1, "conflict", "a"),
                           (4, None, None, None), (5, 4, "scheduled", "a")]
    churned = history_cycles.churn(journal)
    assert [(c["lsn"], c["pod"], c["previous_top"], c["previous_top_total"]) for c in churned] == [
        (3, "b", "a", 9), (5, "c", "a", 9)]
    journal.reindex()
    assert linked() == incremental
    # A prune that deletes a kept placement's previous cycle clears the link, as a reindex would.
    from kruntimes.journal import prune

    journal.append_batch([_record(6, "checkpoint", {}), cycle(7, "u", "scheduled", "d", "d")])
    assert linked()[-1] == (7, 3, "scheduled", "b")
    prune.prune_to(journal, 6)
    assert linked() == [(7, None, None, None)]
    journal.reindex()
    assert linked() == [(7, None, None, None)]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_prune_deletes_the_history_rows_of_the_records_it_deletes(
        backend: str, generated: Generated, request: pytest.FixtureRequest) -> None:
    from kruntimes.journal import prune

    checkpoints = [r.lsn for r in generated.records if r.kind == "checkpoint"]
    assert len(checkpoints) >= 2
    cut = checkpoints[len(checkpoints) // 2]
    with empty_journal_url(request, backend) as url:
        write_through_writer(url, generated, max_batch=1000)
        journal = backends.Journal.open(url)
        try:
            prune.prune_to(journal, cut)
        finally:
            journal.close()
        kept = snapshot(url)
    for table in derive.ROW_TABLES:
        lsn = [c.name for c in table.columns].index("lsn")
        assert all(row[lsn] >= cut for row in kept[table.name]), table.name
    assert all(row[1] >= cut for row in kept["history_waits"])
    assert kept["history_cycles"], "the cycles after the cut stay"


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_revision_that_adds_placement_requests_backfills_what_the_writer_builds(
        backend: str, generated: Generated, request: pytest.FixtureRequest) -> None:
    with empty_journal_url(request, backend) as url:
        write_through_writer(url, generated, max_batch=1000)
        incremental = snapshot(url)
        migrate.downgrade(url, "0004_history_tables")  # the tables as they were, without the column
        migrate.upgrade(url)
        assert snapshot(url) == incremental
