"""The scheduler's default journal writer alone: records a second and CPU per record, per history mode (not a test).

``ProcessJournalWriter`` (the writer in a process of its own, what ``kruntimes
scheduler`` runs) is handed a busy cluster's records (bench/history_workload.py) and
flushed. A first batch is stored before the clock starts: a writer checks the schema
before its first write (importing Alembic, ~0.3 s of CPU once), which is start-up, not
throughput. The clock then runs from the next append to the flush. CPU is the child
process's over the same stretch (read from /proc) and this process's (the sender
thread that encodes, and the appends).

    python bench/journal_process.py [--history inline,follow] [--backends sqlite,postgresql]
                                    [--records 20000] [--repeat 3] [--postgres URL]

Modes alternate within each repeat. ``before`` runs the writer without the option, for
a checkout from before the history tables existed (copy this file and
bench/history_workload.py there and run it with ``--history before``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry  # noqa: E402

from bench import proc_cpu  # noqa: E402
from bench.history_workload import journal_records  # noqa: E402
from bench.journal_append import fresh_postgres  # noqa: E402
from kruntimes.journal.write import process, settings
from kruntimes.journal.store import backends  # noqa: E402

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@contextmanager
def fresh(backend: str, postgres: str) -> Iterator[str]:
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/journal.db"
    else:
        with fresh_postgres(postgres) as url:
            yield url


def run(url: str, recs: list[Any], history: str, batch: int) -> tuple[float, float, float]:
    """(records a second, child CPU µs a record, this process's CPU µs a record)."""
    options: dict[str, Any] = {} if history == "before" else {"history": history}
    backends.Journal.open(url, **options).close()  # migrated before the clock
    n = len(recs)
    with tempfile.TemporaryDirectory() as tmp:
        writer = process.ProcessJournalWriter(settings.Store(url, **options), settings.Spool(Path(tmp) / "spool"),
                                              batching=settings.Batching(max_batch=batch, buffer_size=n),
                                              registry=CollectorRegistry())
        child = writer.pid
        for record in recs[:batch]:  # the writer's start-up: its schema check, its first connection
            writer.append(record)
        assert writer.flush(60), "the writer did not store its first batch"
        started, child0, self0 = time.perf_counter(), proc_cpu.cpu_of(child), time.process_time()
        for record in recs[batch:]:
            writer.append(record)
        assert writer.flush(600), "the writer did not flush"
        seconds = time.perf_counter() - started
        child_cpu, self_cpu = proc_cpu.cpu_of(child) - child0, time.process_time() - self0
        stats = writer.stats()
        writer.close()
        assert stats.written == n and stats.spilled == 0, stats
    timed = n - batch
    return timed / seconds, child_cpu / timed * 1e6, self_cpu / timed * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--history", default="inline,follow", help="comma-separated: inline, follow, before")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres", default=os.environ.get("KRUNTIMES_BENCH_POSTGRES_URL", DEFAULT_POSTGRES))
    args = parser.parse_args()
    recs = journal_records(args.records)
    modes = args.history.split(",")
    print(f"{len(recs):,} busy-cluster records, batch {args.batch}; {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"{'backend':<11}{'history':<9}{'records/s (each run)':<30}{'median':>9}{'child CPU µs/rec':>18}"
          f"{'sender CPU':>12}")
    for backend in args.backends.split(","):
        found: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
        for _ in range(args.repeat):
            for mode in modes:
                with fresh(backend, args.postgres) as url:
                    found[mode].append(run(url, recs, mode, args.batch))
        for mode in modes:
            rates = [r[0] for r in found[mode]]
            each = " ".join(f"{r:,.0f}" for r in rates)
            print(f"{backend:<11}{mode:<9}{each:<30}{statistics.median(rates):>9,.0f}"
                  f"{statistics.median(r[1] for r in found[mode]):>18.1f}"
                  f"{statistics.median(r[2] for r in found[mode]):>12.1f}")


if __name__ == "__main__":
    main()
