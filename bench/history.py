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

**How it is built.** Records are generated in LSN order and stored with
``Journal.append_batch`` in batches of 5,000 with their payload dicts: the writer's own
path, which derives the history tables in the same transaction. Journals are kept in
``--dir`` (SQLite) or a PostgreSQL schema per size and reused by later runs
(``--rebuild`` to start over).

**Method.** Each question runs once to warm the cache, then ``--repeat`` times; the
table shows the median. Parameters are drawn from the middle of the journal (a Run that
waited, a pod, T = the journal's midpoint, one-hour windows; the decisions of a window
take 5 minutes: a busy hour has ~8,000 cycles to list).

    python bench/history.py [--sizes 1000000,10000000] [--backends sqlite,postgresql] [--repeat 5]
"""

from __future__ import annotations

import argparse
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
from kruntimes.journal import backends, derived, history, records, schema  # noqa: E402

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DOC = ROOT / "docs" / "journal.md"
BATCH = 5_000


def build(url: str, n_records: int) -> float:
    """Store the workload's first ``n_records`` records through ``append_batch``; seconds taken."""
    journal = backends.Journal.open(url)
    started = time.perf_counter()
    try:
        rows: list[records.EncodedRecord] = []
        built: list[dict[str, Any]] = []
        encode = records.encode_fields
        for lsn, (at, kind, payload) in enumerate(workload(n_records), start=1):
            rows.append(encode(EPOCH, lsn, at, kind, payload, exact=True))
            built.append(payload)
            if len(rows) == BATCH:
                journal.append_batch(rows, payloads=built)
                rows, built = [], []
                if lsn % 200_000 == 0:
                    print(f"  {lsn:,} records ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
        if rows:
            journal.append_batch(rows, payloads=built)
    finally:
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
        low, high = conn.execute(sa.select(sa.func.min(derived.cycles.c.decided_at),
                                           sa.func.max(derived.cycles.c.decided_at))).one()
        middle = low + (high - low) / 2
        w = derived.waits
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
        stmt = stmt.bindparams(*[sa.bindparam(k, type_=schema.UtcDateTime())
                                 for k, v in values.items() if isinstance(v, datetime)])

        def run(stmt: Any = stmt, values: dict[str, Any] = values) -> int:
            with engine.connect() as conn:
                return len(conn.execute(stmt, values).fetchall())

        asked.append((query_id, run))
    ns, at = p["namespace"], p["at"]
    asked += [
        ("history.run_history", lambda: history.run_history(journal, ns, p["run"])),
        ("history.pod_history(at)", lambda: history.pod_history(journal, ns, p["pod"], at=at, limit=20)),
        ("history.pod_held", lambda: history.pod_held(journal, ns, p["pod"], at)),
        ("history.cycles", lambda: history.cycles(journal, since=p["since"], until=p["until"])),
        ("history.decisions (5 min)", lambda: history.decisions(journal, since=at - timedelta(minutes=5), until=at)),
        ("history.pending_by_reason", lambda: history.pending_by_reason(journal)),
        ("history.longest_waits", lambda: history.longest_waits(journal)),
        ("history.churn", lambda: history.churn(journal, since=p["since"], until=p["until"])),
        ("history.conflicts", lambda: history.conflicts(journal, since=p["since"], until=p["until"])),
        ("history.examples", lambda: history.examples(journal)),
    ]
    return asked


def time_questions(url: str, repeat: int) -> dict[str, float]:
    journal = backends.Journal.open(url, create=False)
    try:
        p = parameters(journal)
        timings: dict[str, float] = {}
        for name, ask in questions(journal, p):
            ask()
            samples = []
            for _ in range(repeat):
                started = time.perf_counter()
                ask()
                samples.append(time.perf_counter() - started)
            timings[name] = statistics.median(samples) * 1000
        return timings
    finally:
        journal.close()


# -- journals to keep -----------------------------------------------------------------------------------------


def journal_url(backend: str, size: int, directory: Path, postgres: str) -> str:
    if backend == "sqlite":
        return f"sqlite:///{directory}/history-{size}.db"
    return backends.parse_url(postgres).update_query_dict(
        {"options": f"-csearch_path=bench_history_{size}"}).render_as_string(hide_password=False)


def ensure(backend: str, size: int, directory: Path, postgres: str, rebuild: bool) -> tuple[str, float | None]:
    """The journal of ``size`` records on ``backend``, built unless it is already there."""
    url = journal_url(backend, size, directory, postgres)
    if backend == "sqlite":
        path = directory / f"history-{size}.db"
        if rebuild and path.exists():
            path.unlink()
        exists = path.exists()
    else:
        admin = sa.create_engine(backends.parse_url(postgres))
        try:
            with admin.begin() as conn:
                if rebuild:
                    conn.execute(sa.text(f"DROP SCHEMA IF EXISTS bench_history_{size} CASCADE"))
                exists = conn.execute(sa.text("SELECT 1 FROM information_schema.tables WHERE table_schema = :s "
                                              "AND table_name = 'history_cycles'"), {"s": f"bench_history_{size}"}
                                      ).first() is not None
                conn.execute(sa.text(f"CREATE SCHEMA IF NOT EXISTS bench_history_{size}"))
        finally:
            admin.dispose()
    if exists:
        return url, None
    seconds = build(url, size)
    if backend == "postgresql":
        engine = backends.create_engine(url)
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(sa.text("ANALYZE"))
        engine.dispose()
    return url, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,10000000", help="journal lengths in records")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"), help="where SQLite journals are kept")
    parser.add_argument("--postgres", default=os.environ.get("KRUNTIMES_BENCH_POSTGRES_URL", DEFAULT_POSTGRES))
    parser.add_argument("--rebuild", action="store_true", help="build the journals again")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    chosen = args.backends.split(",")
    results: dict[tuple[str, int], dict[str, float]] = {}
    for backend in chosen:
        for size in sizes:
            url, seconds = ensure(backend, size, Path(args.dir), args.postgres, args.rebuild)
            if seconds is not None:
                print(f"built {backend} {size:,} records in {seconds:.0f} s ({size / seconds:,.0f} records/s)",
                      file=sys.stderr)
            results[(backend, size)] = time_questions(url, args.repeat)
    columns = [(b, s) for b in chosen for s in sizes]
    names = list(next(iter(results.values())))
    width = max(len(n) for n in names) + 2
    header = f"{'question (ms, median)':<{width}}" + "".join(f"{b[:6]} {s / 1e6:g}M".rjust(12) for b, s in columns)
    print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print(header)
    print("-" * len(header))
    for name in names:
        marker = " *" if name in POINT else ""
        print(f"{name + marker:<{width}}" + "".join(f"{results[c][name]:12.1f}" for c in columns))
    worst = {c: max(results[c].values()) for c in columns}
    print("slowest: " + ", ".join(f"{b} {s / 1e6:g}M {worst[(b, s)]:.1f} ms" for b, s in columns))
    print("* point questions (one Run, one pod at a time T)")


if __name__ == "__main__":
    main()
