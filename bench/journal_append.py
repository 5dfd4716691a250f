"""Append throughput of the journal writer vs the raw driver limit (issue 3; not a test).

For SQLite (WAL) and PostgreSQL, at writer batch sizes 1, 100 and 1,000, measures in
the same run:

- raw: the same rows, pre-encoded, inserted by the bare driver in one transaction per
  batch (sqlite3 ``executemany``; psycopg binary ``COPY``) -- the practical limit;
- writer: ``JournalWriter`` end to end -- ``append`` N ``JournalRecord`` s (built
  before the clock starts), then ``flush``; encoding happens on the writer thread;
- writer, caller encodes: the producer calls ``records.encode`` itself and appends
  the encoded record (both inside the timed region);
- process: ``ProcessJournalWriter``, the scheduler's default, end to end the same way:
  finished records are encoded by its sender thread in this process, and the child
  process only inserts (or spills), on the other core.

Records are cycle-sized (~800 bytes of canonical JSON payload).

    python bench/journal_append.py [--records N] [--postgres URL | --no-postgres]
                                   [--workload cycles|cluster] [--batches 1,100,1000]
                                   [--history inline|follow]

``--workload cluster`` appends a busy cluster's record mix instead (bench/history_workload.py:
mutations, cycles, binds, reserves, drops, with the payloads the scheduler writes), the
records the history tables are derived from. ``--history follow`` measures writers that
store records only and leave the history rows to ``kruntimes journal index``
(``--journal-history follow``); the default, ``inline``, writes them in each batch.

PostgreSQL URL: --postgres, $KRUNTIMES_BENCH_POSTGRES_URL, or
postgresql+psycopg://postgres@127.0.0.1:5432/test (each run uses a fresh schema).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from prometheus_client import CollectorRegistry

sys.path.append(str(Path(__file__).resolve().parent.parent))  # bench.history_workload, run as a script

from kruntimes.journal import records
from kruntimes.journal.write import process, settings, writer
from kruntimes.journal.store import backends, engines, schema

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
INCARNATION = uuid.uuid4().hex
T0 = datetime(2026, 5, 9, 7, 35, 25, tzinfo=timezone.utc)
BATCHES = (1, 100, 1000)


def cycle_payload(i: int) -> dict[str, Any]:
    """What a cycle record of SPEC §5 carries: top candidates, rejections, digest -- no snapshot."""
    return {
        "run": {"namespace": "team-a", "name": f"train-{i}", "uid": f"5f0c1d2e-3b4a-5968-7766-{i:012d}"},
        "snapshot_lsn": 1_000_000 + i,
        "now": "2026-05-09T07:35:25.123456Z",
        "outcome": "placed",
        "pod": f"team-a/rt-gpu-7c9f-{i % 40}",
        "total": 187,
        "rejections": {"Capacity": {"insufficient example.com/gpu": 3}, "RuntimeMatch": {"other runtime": 12}},
        "candidates": [
            {"pod": f"rt-gpu-7c9f-{k}", "scores": {"Affinity": [10, 100], "LeastAllocated": [80 + k, 80]}, "total": 180 - k}
            for k in range(3)
        ],
        "evaluated": 40,
        "feasible": 25,
        "digest": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "duration_ns": 183_456,
    }


def make_records(n: int) -> list[records.JournalRecord]:
    """An epoch's first record, its incarnation record, then cycle records (the writer chains from it)."""
    start = records.JournalRecord(INCARNATION, 1, T0, "incarnation", {"version": "bench", "config_hash": "bench"})
    return [start] + [
        records.JournalRecord(INCARNATION, lsn, T0 + timedelta(microseconds=lsn), "cycle", cycle_payload(lsn))
        for lsn in range(2, n + 1)
    ]


@contextmanager
def fresh_sqlite() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        yield f"sqlite:///{tmp}/journal.db"


@contextmanager
def fresh_postgres(base: str) -> Iterator[str]:
    url = engines.parse_url(base)
    name = f"bench_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(url)
    with admin.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{name}"'))
    try:
        yield url.update_query_dict({"options": f"-csearch_path={name}"}).render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{name}" CASCADE'))
        admin.dispose()


# The stored columns are the encoded record's fields (the chain link too, where the
# schema has one), so the raw rows match what the writer stores on either version.
_COLUMNS = ", ".join(records.EncodedRecord._fields)
_PG_TYPES = {"lsn": "int8", "recorded_at": "timestamptz", "schema_version": "int4"}


def raw_sqlite(url: str, rows: list[records.EncodedRecord], batch: int) -> float:
    backends.Journal.open(url).close()  # the real schema, then the bare driver
    conn = sqlite3.connect(sa.make_url(url).database, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    ts = schema.sqlite_timestamp
    tuples = [(r[0], r[1], ts(r[2]), *r[3:]) for r in rows]
    sql = f"INSERT INTO journal_records ({_COLUMNS}) VALUES ({','.join('?' * len(records.EncodedRecord._fields))})"
    started = time.perf_counter()
    for i in range(0, len(tuples), batch):
        conn.execute("BEGIN")
        conn.executemany(sql, tuples[i : i + batch])
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return len(rows) / elapsed


def raw_postgres(url: str, rows: list[records.EncodedRecord], batch: int) -> float:
    import psycopg

    backends.Journal.open(url).close()
    parsed = sa.make_url(url)
    conninfo = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo) as conn:
        started = time.perf_counter()
        for i in range(0, len(rows), batch):
            with conn.cursor() as cur, cur.copy(f"COPY journal_records ({_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types([_PG_TYPES.get(name, "text") for name in records.EncodedRecord._fields])
                for row in rows[i : i + batch]:
                    copy.write_row(row)
            conn.commit()
        elapsed = time.perf_counter() - started
    return len(rows) / elapsed


def through_writer(url: str, recs: list[records.JournalRecord], batch: int, *, caller_encodes: bool,
                   in_process: bool = False, history: str = "inline") -> float:
    journal = backends.Journal.open(url, history=history)
    with tempfile.TemporaryDirectory() as tmp:
        w: Any
        if in_process:
            w = process.ProcessJournalWriter(settings.Store(url, history=history), settings.Spool(Path(tmp) / "spool"),
                                             batching=settings.Batching(max_batch=batch, buffer_size=len(recs)),
                                             registry=CollectorRegistry())
        else:
            w = writer.JournalWriter(journal, settings.Spool(Path(tmp) / "spool"),
                                     batching=settings.Batching(max_batch=batch, buffer_size=len(recs)),
                                     instruments=settings.Instruments(registry=CollectorRegistry())).start()
        try:
            append, encode = w.append, records.encode
            if in_process:
                # Start-up, not throughput: the child checks the schema before its first write
                # (importing Alembic, ~0.3 s of CPU once). A first record, flushed, pays it untimed.
                append(records.JournalRecord("f" * 32, 1, T0, "incarnation", {"version": "bench",
                                                                       "config_hash": "warm-up"}))
                assert w.flush(60), "writer did not store its first record"
            started = time.perf_counter()
            if caller_encodes:
                for r in recs:
                    append(encode(r))
            else:
                for r in recs:
                    append(r)
            assert w.flush(600), "writer did not flush"
            elapsed = time.perf_counter() - started
            stats = w.stats()
            assert stats.written == len(recs) + in_process and stats.spilled == 0, stats
        finally:
            w.close()
            journal.close()
    return len(recs) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=50_000, help="records per measurement at batch >= 100")
    parser.add_argument("--postgres", default=os.environ.get("KRUNTIMES_BENCH_POSTGRES_URL", DEFAULT_POSTGRES))
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--workload", choices=("cycles", "cluster"), default="cycles")
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    parser.add_argument("--history", choices=("inline", "follow"), default="inline",
                        help="the writers' history tables: in each batch (inline) or left to the indexer (follow)")
    args = parser.parse_args()
    make = make_records
    if args.workload == "cluster":
        from bench.history_workload import journal_records

        make = journal_records

    backends_to_run: list[tuple[str, Callable[[], Any], Callable[..., float], int]] = [
        ("sqlite", fresh_sqlite, raw_sqlite, 5_000)
    ]
    if not args.no_postgres:
        backends_to_run.append(("postgresql", lambda: fresh_postgres(args.postgres), raw_postgres, 2_000))

    sample = [records.encode(r).payload.encode() for r in make(1000)]
    print(f"{args.workload} records: {sum(map(len, sample)) // len(sample)} bytes of canonical JSON on average;"
          f" history {args.history}; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    header = (f"{'backend':<11}{'batch':>6}{'records':>9}{'raw rows/s':>12}{'writer/s':>11}{'ratio':>7}"
              f"{'caller-enc/s':>14}{'ratio':>7}{'process/s':>11}{'ratio':>7}")
    print(header)
    print("-" * len(header))
    for name, fresh, raw, n_single in backends_to_run:
        for batch in map(int, args.batches.split(",")):
            n = n_single if batch == 1 else args.records
            recs = make(n)
            rows = [records.encode(r) for r in recs]
            with fresh() as url:
                raw_rate = raw(url, rows, batch)
            with fresh() as url:
                writer_rate = through_writer(url, recs, batch, caller_encodes=False, history=args.history)
            with fresh() as url:
                caller_rate = through_writer(url, recs, batch, caller_encodes=True, history=args.history)
            with fresh() as url:
                process_rate = through_writer(url, recs, batch, caller_encodes=False, in_process=True,
                                              history=args.history)
            print(
                f"{name:<11}{batch:>6}{n:>9}{raw_rate:>12,.0f}{writer_rate:>11,.0f}{writer_rate / raw_rate:>7.0%}"
                f"{caller_rate:>14,.0f}{caller_rate / raw_rate:>7.0%}{process_rate:>11,.0f}{process_rate / raw_rate:>7.0%}"
            )


if __name__ == "__main__":
    main()
