"""What the history tables cost the journal's write path, side by side (issue 15; not a test).

The same busy-cluster records (bench/history_workload.py) are stored with
``Journal.append_batch`` and their payload dicts, as the writer stores them, into fresh
journals on SQLite and PostgreSQL, alternately by a ``follow`` journal (records only,
as before the history tables existed) and an ``inline`` one (each batch's history rows
in its transaction), ``--repeat`` times each at batch sizes 100 and 1,000; the table
shows medians. Encoding (canonical JSON and hash, the writer's other work) is timed
once and added to both, so the ratio is the writer's throughput ratio. "index" is what
``Journal.index`` (``kruntimes journal index``) then takes per record to derive the
follow journal's rows, in chunks of 2,000: the same rows, written after the fact.

Wall time on a shared machine moves by half from run to run, so the table also shows
CPU time: the writer's own (process time) plus, for PostgreSQL on this machine, the
server backend's that served its connection (read from /proc). CPU does not wait for
other people's processes; the two ratios agreeing is the sign a figure is not noise.

    python bench/history_write.py [--records 10000] [--repeat 3] [--batches 100,1000]
                                  [--postgres URL | --no-postgres]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import proc_cpu  # noqa: E402
from bench.history_workload import journal_records  # noqa: E402
from bench.journal_append import DEFAULT_POSTGRES, fresh_postgres  # noqa: E402
from kruntimes.journal import records
from kruntimes.journal.store import backends  # noqa: E402


@contextmanager
def fresh_sqlite() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        yield f"sqlite:///{tmp}/journal.db"


class Cost(NamedTuple):
    """One store's cost per record: wall time, the writer's CPU, the database server's CPU (seconds)."""

    wall: float
    cpu: float
    server: float


def _server_cpu(journal: backends.Journal) -> float:
    """CPU seconds the PostgreSQL backend of the journal's write connection has used (0 for SQLite).

    Read from /proc, so only for a server on this machine; elsewhere 0.
    """
    conn = journal._append_conn  # noqa: SLF001 - the bench looks at the writer's own connection
    if conn is None or journal.backend != "postgresql":
        return 0.0
    return _pid_cpu(conn.connection.driver_connection.info.backend_pid)


def _pid_cpu(pid: int | None) -> float:
    """CPU seconds a local process has used (a PostgreSQL backend serving one connection); 0 if unknown."""
    if pid is None:
        return 0.0
    try:
        return proc_cpu.cpu_of(pid)
    except OSError:
        return 0.0


def store(url: str, rows: list[records.EncodedRecord], payloads: list[Any], batch: int,
          history: str) -> tuple[Cost, Cost | None]:
    """Append ``rows`` in batches; CPU is counted from the second batch on (the first opens the connection).

    For a ``follow`` journal, also what indexing its rows afterwards costs per record.
    """
    journal = backends.Journal.open(url, history=history)
    try:
        started = time.perf_counter()
        journal.append_batch(rows[:batch], payloads=payloads[:batch])
        cpu0, server0 = time.process_time(), _server_cpu(journal)
        for i in range(batch, len(rows), batch):
            journal.append_batch(rows[i : i + batch], payloads=payloads[i : i + batch])
        wall = time.perf_counter() - started
        rest = max(1, len(rows) - batch)
        stored = Cost(wall / len(rows), (time.process_time() - cpu0) / rest, (_server_cpu(journal) - server0) / rest)
        if history != "follow":
            return stored, None
        return stored, index(journal, len(rows))
    finally:
        journal.close()


def index(journal: backends.Journal, n: int) -> Cost:
    """``Journal.index`` over everything a follow journal stored, per record (its own connection's server CPU)."""
    with journal.engine.connect() as conn:
        pid = conn.connection.driver_connection.info.backend_pid if journal.backend == "postgresql" else None
    started, cpu0, server0 = time.perf_counter(), time.process_time(), _pid_cpu(pid)
    assert journal.index(chunk_size=2_000) == n
    return Cost((time.perf_counter() - started) / n, (time.process_time() - cpu0) / n, (_pid_cpu(pid) - server0) / n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--postgres", default=os.environ.get("KRUNTIMES_BENCH_POSTGRES_URL", DEFAULT_POSTGRES))
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batches", default="100,1000", help="batch sizes, comma-separated")
    args = parser.parse_args()
    recs = journal_records(args.records)
    started = time.perf_counter()
    rows = [records.encode(r, exact=r.kind in ("mutation", "cycle", "reserve", "checkpoint")) for r in recs]
    encode = (time.perf_counter() - started) / len(rows)
    payloads = [r.payload for r in recs]
    fresh: list[tuple[str, Callable[[], Any]]] = [("sqlite", fresh_sqlite)]
    if not args.no_postgres:
        fresh.append(("postgresql", lambda: fresh_postgres(args.postgres)))
    print(f"{len(rows):,} records; encoding {encode * 1e6:.1f} µs a record; {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}")
    header = (f"{'backend':<11}{'batch':>6}{'follow µs/rec':>15}{'inline':>8}{'ratio':>7}"
              f"{'CPU follow':>12}{'inline':>8}{'ratio':>7}{'index µs/rec':>14}{'CPU':>6}{'index rec/s':>13}")
    print(header)
    print("-" * len(header))
    for name, make in fresh:
        for batch in [int(b) for b in args.batches.split(",")]:
            costs: dict[str, list[Cost]] = {"follow": [], "inline": []}
            indexing: list[Cost] = []
            for _ in range(args.repeat):
                for history in ("follow", "inline"):
                    with make() as url:
                        stored, indexed = store(url, rows, payloads, batch, history)
                        costs[history].append(stored)
                        if indexed is not None:
                            indexing.append(indexed)
            off, on, ix = (Cost(*(statistics.median(c[k] for c in found) for k in range(3)))
                           for found in (costs["follow"], costs["inline"], indexing))
            # The writer's throughput ratio: encoding (done once, outside) is its other work.
            cpu_off, cpu_on = encode + off.cpu + off.server, encode + on.cpu + on.server
            print(f"{name:<11}{batch:>6}{off.wall * 1e6:>15.1f}{on.wall * 1e6:>8.1f}"
                  f"{(encode + off.wall) / (encode + on.wall):>7.0%}"
                  f"{cpu_off * 1e6:>12.1f}{cpu_on * 1e6:>8.1f}{cpu_off / cpu_on:>7.0%}"
                  f"{ix.wall * 1e6:>14.1f}{(ix.cpu + ix.server) * 1e6:>6.0f}{1 / ix.wall:>13,.0f}")


if __name__ == "__main__":
    main()
