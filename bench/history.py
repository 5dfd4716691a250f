"""Placement history at production scale: every documented question, timed on 1M- and 10M-record journals.

Builds a journal of a busy cluster (issue 15) on SQLite and PostgreSQL and times every
SQL query of docs/journal.md and every ``kruntimes.journal.history`` function the
``kruntimes history`` commands call. Targets: each answer in <= 100 ms at 1M records
and <= 300 ms at 10M; the point questions (one Run, one pod at a time T) flat in the
journal's length.

**Workload.** One namespace, 5 runtimes of 100 Runtime Pods each. Runs arrive about
twice a second (so 1M records are ~16 hours, 10M about a week), each with the records
the scheduler writes for it: ADDED, a cycle with 5 recorded candidates and its
rejections, reserve, bind, the Run's Scheduled, Running and Succeeded observations, the
drop of its assumption, its deletion. 15% of Runs first wait (1-20 Pending cycles over
up to an hour, for insufficient capacity), 2% lose their first bind to a 409 (a conflict
cycle, a release, then a new cycle that may choose another pod), 0.5% of binds are
ambiguous. Pods renew their heartbeat every few minutes. Payloads have exactly the
shape the scheduler's records have (docs/journal.md, "Payloads by kind").

**How it is built.** Records are generated in LSN order (in a second process, so the
building process does only what the writer does) and stored with
``Journal.append_batch`` in batches of 20,000 with their payload dicts: the writer's own
path, which derives the history tables in the same transaction. PostgreSQL builds commit
without waiting for the WAL flush (``synchronous_commit=off``). Journals are kept in
``--dir`` (SQLite) or a PostgreSQL schema per size (``bench_history_<size>`` in the
``--postgres`` database) and reused by later runs (``--rebuild`` to start over); a build
that stopped part way resumes at its last stored record (the workload is deterministic).
``--build-only`` builds and times nothing; ``--time-only`` builds nothing and times what
is there, a journal whose build stopped early labelled with the records it holds. A
journal built by an older kruntimes is migrated to the newest revision first, and the
upgrade is timed (a backfill at that size).

**Method.** Each question runs once to warm the cache, then ``--repeat`` times; the
table shows the median wall time, then the median CPU time of this process (SQLite's
work is in it; PostgreSQL's server is not), and how many rows each question answered.
Parameters are drawn from the middle of the journal (a Run that waited, a pod, T = the
journal's midpoint, one-hour windows (six hours of pod-hours); the decisions of a window take 5 minutes: a busy
hour has ~8,000 cycles to list).

    python bench/history.py [--sizes 1000000,10000000] [--backends sqlite,postgresql] [--repeat 5]
                            [--dir DIR] [--postgres URL] [--build-only | --time-only] [--rebuild]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.history_workload import EPOCH, NS, workload  # noqa: E402
from kruntimes.journal import records  # noqa: E402
from kruntimes.journal.history import derive  # noqa: E402
from kruntimes.journal.history import cycles as history_cycles  # noqa: E402
from kruntimes.journal.history import pods as history_pods  # noqa: E402
from kruntimes.journal.history import runs as history_runs  # noqa: E402
from kruntimes.journal.history import waits as history_waits  # noqa: E402
from kruntimes.journal.store import backends, engines, migrate, schema  # noqa: E402

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DOC = ROOT / "docs" / "journal.md"
BATCH = 20_000


def _produce(n_records: int, start: int, batch: int, out: Any) -> None:
    """(rows, payloads) batches of the workload's records ``start``.. ``n_records``, encoded, into ``out``."""
    rows: list[records.EncodedRecord] = []
    built: list[dict[str, Any]] = []
    encode = records.encode_fields
    for lsn, (at, kind, payload) in enumerate(workload(n_records), start=1):
        if lsn < start:
            continue
        rows.append(encode(EPOCH, lsn, at, kind, payload, exact=True))
        built.append(payload)
        if len(rows) == batch:
            out.put((rows, built))
            rows, built = [], []
    if rows:
        out.put((rows, built))
    out.put(None)


def build(url: str, n_records: int, *, start: int = 1, batch: int = BATCH) -> float:
    """Store the workload's records ``start``..``n_records`` through ``append_batch``; seconds taken.

    The records are generated and encoded in a second process (the cluster they come
    from is not what is measured), so the building process does what the writer does:
    ``append_batch`` with the payload dicts, which derives the history tables.
    """
    journal = backends.Journal.open(url)
    started = time.perf_counter()
    context = multiprocessing.get_context("fork")
    batches = context.Queue(maxsize=4)
    producer = context.Process(target=_produce, args=(n_records, start, batch, batches), daemon=True)
    producer.start()
    try:
        done, reported = start - 1, start - 1
        while (item := batches.get()) is not None:
            rows, built = item
            journal.append_batch(rows, payloads=built)
            done += len(rows)
            if done - reported >= 500_000:
                reported = done
                seconds = time.perf_counter() - started
                print(f"  {done:,} records ({seconds:.0f} s, {(done - start + 1) / seconds:,.0f} records/s)",
                      file=sys.stderr, flush=True)
    finally:
        producer.kill()
        journal.close()
    return time.perf_counter() - started


# -- the questions ------------------------------------------------------------------------------------------


def doc_queries() -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for block in re.findall(r"```sql\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S):
        header = re.match(r"-- query: ([a-z0-9-]+)\n(?:-- dialect: (sqlite|postgresql)\n)?", block)
        assert header, block
        found.setdefault(header.group(1), {})[header.group(2) or "any"] = block
    return found


POINT = {"placement-of-run", "why-placed", "pod-at-time", "pod-held-at-time", "history.run_history",
         "history.pod_history(at)", "history.pod_held"}


def parameters(journal: backends.Journal) -> dict[str, Any]:
    """A Run that waited and was placed, one of its pods, the journal's midpoint and windows around it."""
    with journal.engine.connect() as conn:
        low, high = conn.execute(sa.select(sa.func.min(derive.cycles.c.decided_at),
                                           sa.func.max(derive.cycles.c.decided_at))).one()
        middle = low + (high - low) / 2
        w = derive.waits
        run, pod = conn.execute(sa.select(w.c.run, w.c.pod).where(w.c.outcome == "scheduled",
                                                                   w.c.ended_at >= middle)
                                .order_by(w.c.ended_at).limit(1)).one()
    return {"namespace": NS, "run": run, "pod": pod, "at": middle, "since": middle - timedelta(hours=1),
            "until": middle, "end": high}


def questions(journal: backends.Journal, p: dict[str, Any]) -> list[tuple[str, Callable[[], Any]]]:
    """(name, answer it) for every documented query and every history function a command calls."""
    engine = journal.engine
    asked: list[tuple[str, Callable[[], Any]]] = []
    for query_id, variants in doc_queries().items():
        sql = variants.get(engine.dialect.name) or variants["any"]
        stmt = sa.text(sql)
        names = set(re.findall(r"(?<!:):([a-z_]+)", sql))
        values = {k: v for k, v in p.items() if k in names}
        if query_id == "pending-insufficient-capacity" or query_id == "bind-conflict-rate":
            values["since"] = p["end"] - timedelta(hours=1)
        if query_id == "decisions-in-window":
            values["since"] = p["until"] - timedelta(minutes=5)
        if query_id == "placements-per-pod-hour":  # six hours of pod-hours up to the middle
            values = {"since_hour": derive.hour_of(p["until"] - timedelta(hours=6)),
                      "until_hour": derive.hour_of(p["until"])}
        stmt = stmt.bindparams(*[sa.bindparam(k, type_=schema.UtcDateTime())
                                 for k, v in values.items() if isinstance(v, datetime)])

        def run(stmt: Any = stmt, values: dict[str, Any] = values) -> int:
            with engine.connect() as conn:
                return len(conn.execute(stmt, values).fetchall())

        asked.append((query_id, run))
    ns, at = p["namespace"], p["at"]
    asked += [
        ("history.run_history", lambda: history_runs.run_history(journal, ns, p["run"])),
        ("history.pod_history(at)", lambda: history_pods.pod_history(journal, ns, p["pod"], at=at, limit=20)),
        ("history.pod_held", lambda: history_pods.pod_held(journal, ns, p["pod"], at)),
        ("history.cycles", lambda: history_cycles.cycles(journal, since=p["since"], until=p["until"])),
        ("history.decisions (5 min)",
         lambda: history_cycles.decisions(journal, since=at - timedelta(minutes=5), until=at)),
        ("history.pending_by_reason", lambda: history_cycles.pending_by_reason(journal)),
        ("history.longest_waits", lambda: history_waits.longest_waits(journal)),
        ("history.churn", lambda: history_cycles.churn(journal, since=p["since"], until=p["until"])),
        ("history.conflicts", lambda: history_cycles.conflicts(journal, since=p["since"], until=p["until"])),
        ("history.examples", lambda: history_cycles.examples(journal)),
    ]
    return asked


def time_questions(url: str, repeat: int) -> dict[str, tuple[float, float, int]]:
    """Per question: median wall and CPU milliseconds (this process's CPU: on PostgreSQL the
    server's work is not in it), and how many rows it answered."""
    journal = backends.Journal.open(url, create=False)
    try:
        p = parameters(journal)
        timings: dict[str, tuple[float, float, int]] = {}
        for name, ask in questions(journal, p):
            answer = ask()
            rows = answer if isinstance(answer, int) else len(answer)
            walls, cpus = [], []
            for _ in range(repeat):
                started, cpu = time.perf_counter(), time.process_time()
                ask()
                walls.append(time.perf_counter() - started)
                cpus.append(time.process_time() - cpu)
            timings[name] = (statistics.median(walls) * 1000, statistics.median(cpus) * 1000, rows)
        return timings
    finally:
        journal.close()


def upgrade(url: str) -> float | None:
    """Migrate the journal at ``url`` to the newest revision (a backfill, at this size); seconds, or None."""
    engine = engines.create_engine(url)
    try:
        if migrate.current_revision(engine) == migrate.head_revision():
            return None
        started = time.perf_counter()
        migrate.upgrade(engine)
        if engine.dialect.name == "postgresql":
            with engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT").execute(sa.text("ANALYZE history_placements"))
        return time.perf_counter() - started
    finally:
        engine.dispose()


# -- journals to keep -----------------------------------------------------------------------------------------


def journal_url(backend: str, size: int, directory: Path, postgres: str) -> str:
    if backend == "sqlite":
        return f"sqlite:///{directory}/history-{size}.db"
    return engines.parse_url(postgres).update_query_dict(
        {"options": f"-csearch_path=bench_history_{size}"}).render_as_string(hide_password=False)


def stored(url: str) -> int:
    """How many of the workload's records the journal at ``url`` holds (0 if it has none yet)."""
    engine = engines.create_engine(url)
    try:
        with engine.connect() as conn:
            if not sa.inspect(conn).has_table("journal_records"):
                return 0
            return int(conn.execute(sa.select(sa.func.max(schema.journal_records.c.lsn))).scalar() or 0)
    finally:
        engine.dispose()


def ensure(backend: str, size: int, directory: Path, postgres: str, rebuild: bool,
           batch: int = BATCH) -> tuple[str, float | None, int]:
    """The journal of ``size`` records on ``backend``: built, or finished if a build stopped
    part way (the workload is deterministic), unless it is already there.
    Returns its URL, the seconds a build took (None: none was needed) and the records built."""
    url = journal_url(backend, size, directory, postgres)
    if backend == "sqlite":
        path = directory / f"history-{size}.db"
        if rebuild:
            for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
                stale.unlink(missing_ok=True)
    else:
        admin = sa.create_engine(engines.parse_url(postgres))
        try:
            with admin.begin() as conn:
                if rebuild:
                    conn.execute(sa.text(f"DROP SCHEMA IF EXISTS bench_history_{size} CASCADE"))
                conn.execute(sa.text(f"CREATE SCHEMA IF NOT EXISTS bench_history_{size}"))
        finally:
            admin.dispose()
    have = stored(url)
    if have >= size:
        return url, None, 0
    if have:
        print(f"{backend} {size:,}: {have:,} records stored, building the rest", file=sys.stderr)
    seconds = build(_for_building(url), size, start=have + 1, batch=batch)
    if backend == "postgresql":
        engine = engines.create_engine(url)
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(sa.text("ANALYZE"))
        engine.dispose()
    return url, seconds, size - have


def _for_building(url: str) -> str:
    """PostgreSQL: commit without waiting for the WAL flush while building (what is timed is reading)."""
    parsed = engines.parse_url(url)
    if parsed.get_backend_name() != "postgresql":
        return url
    options = str(parsed.query.get("options", ""))
    return parsed.update_query_dict({"options": f"{options} -csynchronous_commit=off".strip()}
                                    ).render_as_string(hide_password=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,10000000", help="journal lengths in records")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"), help="where SQLite journals are kept")
    parser.add_argument("--postgres", default=os.environ.get("KRUNTIMES_BENCH_POSTGRES_URL", DEFAULT_POSTGRES))
    parser.add_argument("--rebuild", action="store_true", help="build the journals again")
    parser.add_argument("--build-only", action="store_true", help="build (or finish) the journals, time nothing")
    parser.add_argument("--time-only", action="store_true",
                        help="build nothing: time the journals as they are (one whose build stopped early is "
                             "labelled with the records it holds)")
    parser.add_argument("--batch", type=int, default=BATCH, help="records per append_batch while building")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    chosen = args.backends.split(",")
    results: dict[tuple[str, int], dict[str, tuple[float, float, int]]] = {}
    for backend in chosen:
        for size in sizes:
            if args.time_only:
                url = journal_url(backend, size, Path(args.dir), args.postgres)
                held = stored(url)
                if not held:
                    print(f"{backend} {size:,}: no journal, skipped", file=sys.stderr)
                    continue
            else:
                url, seconds, built = ensure(backend, size, Path(args.dir), args.postgres, args.rebuild, args.batch)
                held = size
                if seconds is not None:
                    print(f"built {backend} {built:,} records in {seconds:.0f} s ({built / seconds:,.0f} records/s)",
                          file=sys.stderr, flush=True)
            if args.build_only:
                continue
            took = upgrade(url)
            if took is not None:
                print(f"upgraded {backend} {held:,} records to {migrate.head_revision()} in {took:.1f} s",
                      file=sys.stderr, flush=True)
            results[(backend, held)] = time_questions(url, args.repeat)
    if results:
        report(results)


def report(results: dict[tuple[str, int], dict[str, tuple[float, float, int]]]) -> None:
    columns = list(results)
    names = list(next(iter(results.values())))
    width = max(max(len(n) for n in names) + 2, 44)
    print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    for title, field in (("wall ms, median", 0), ("CPU ms of this process, median", 1)):
        header = f"{'question (' + title + ')':<{width}}" + "".join(
            f"{b[:6]} {s / 1e6:.3g}M".rjust(14) for b, s in columns) + "    rows"
        print(header)
        print("-" * len(header))
        for name in names:
            marker = " *" if name in POINT else ""
            rows = "/".join(f"{results[c][name][2]:,}" for c in columns)
            print(f"{name + marker:<{width}}" + "".join(f"{results[c][name][field]:14.1f}" for c in columns)
                  + f"    {rows}")
        print()
    worst = {c: max(results[c].items(), key=lambda item: item[1][0]) for c in columns}
    print("slowest (wall): " + ", ".join(f"{b} {s / 1e6:.3g}M {worst[(b, s)][0]} {worst[(b, s)][1][0]:.1f} ms"
                                         for b, s in columns))
    print("* point questions (one Run, one pod at a time T); rows: per column, in the same order")


if __name__ == "__main__":
    main()
