"""Scheduling throughput with the journal on vs off, same workload, same run.

The demo's workload (5,200 Runs on 220 pods, conflicts, cohorts, invalid Runs) is
scheduled by the real Scheduler with one worker against the in-memory API, once
with the journal off and once per backend with it on (writer thread, batching,
SQLite WAL or PostgreSQL). Prints cycles/s, the ratio, records written and the
journal's bytes per cycle record.

    python bench/journal_overhead.py [--postgres URL] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import prometheus_client
import sqlalchemy as sa

from kruntimes import demo
from kruntimes.api import ingest
from kruntimes.journal.backends import Journal
from kruntimes.journal.recorder import JournalRecorder
from kruntimes.journal.writer import JournalWriter
from kruntimes.memory.api import MemoryApi
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.loop import Scheduler
from kruntimes.scheduler.queue import WorkQueue


def schedule(recorder: JournalRecorder | None) -> tuple[int, float]:
    """Schedule the demo workload single-threaded; returns (cycles, seconds)."""
    config = SchedulerConfig(workers=1)
    cache = ClusterCache(config, recorder)
    if recorder is not None:
        recorder.state_source = cache
    api = MemoryApi(conflict_rate=0.02, seed=7)
    scheduler = Scheduler(cache, api, clock=lambda: demo.NOW, queue=WorkQueue(base_delay=1e-6, max_delay=1e-3))
    api.watchers.append(scheduler.on_run)
    workload = demo.generate()
    for pod in workload.pods:
        info = ingest.pod_info(pod)
        assert info is not None
        scheduler.on_pod(info)
    for obj in workload.runs:
        api.create(ingest.run_info(obj))
    started = time.perf_counter()
    while True:
        key = scheduler.queue.get(timeout=0)
        if key is None:
            if scheduler.queue.idle():
                break
            continue
        try:
            scheduler.process(key)
        finally:
            scheduler.queue.done(key)
    return sum(scheduler.results.values()), time.perf_counter() - started


def with_journal(url: str, spool: str) -> tuple[int, float, int, float]:
    journal = Journal.open(url)
    with journal.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM journal_records"))
        conn.execute(sa.text("DELETE FROM journal_incarnations"))
    writer = JournalWriter(journal, spool_path=spool, registry=prometheus_client.CollectorRegistry()).start()
    recorder = JournalRecorder(writer, start_lsn=writer.last_lsn())
    recorder.start(SchedulerConfig(workers=1), top_candidates=5)
    cycles, seconds = schedule(recorder)
    started = time.perf_counter()
    writer.close()  # flush what is buffered: counted, the journal must end complete
    seconds += time.perf_counter() - started
    with journal.engine.connect() as conn:
        n, size = conn.execute(sa.text(
            "SELECT count(*), avg(length(payload)) FROM journal_records WHERE kind = 'cycle'")).one()
        total = conn.execute(sa.text("SELECT count(*) FROM journal_records")).scalar_one()
    journal.close()
    return cycles, seconds, total, float(size or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=os.environ.get(
        "KRUNTIMES_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="kruntimes-bench-")
    off = [schedule(None) for _ in range(args.repeat)]
    base = statistics.median(c / s for c, s in off)
    print(f"{'setting':<12} {'cycles/s':>10} {'ratio':>7} {'records':>9} {'bytes/cycle record':>19}")
    print(f"{'journal off':<12} {base:>10,.0f} {1:>7.2f}")
    for name, url in (("sqlite", f"sqlite:///{tmp}/bench.db"), ("postgresql", args.postgres)):
        try:
            runs = [with_journal(url, f"{tmp}/{name}.spool") for _ in range(args.repeat)]
        except sa.exc.OperationalError as exc:
            print(f"{name:<12} unavailable: {exc.orig}")
            continue
        rate = statistics.median(c / s for c, s, _, _ in runs)
        print(f"{name:<12} {rate:>10,.0f} {rate / base:>7.2f} {runs[-1][2]:>9,} {runs[-1][3]:>19,.0f}")


if __name__ == "__main__":
    main()
