"""Scheduling throughput with the journal on vs off, same workload, same run.

The demo's workload (5,200 Runs on 220 pods, conflicts, cohorts, invalid Runs) is
scheduled by the real Scheduler with one worker against the in-memory API: with the
journal off, and with it on per backend (SQLite WAL, PostgreSQL) and per writer
(``process``: the default, the writer in its own process; ``thread``: in this
process). Settings are interleaved and repeated; the table shows medians, and the ratio is the
median of each repeat's ratio to the journal-off run of the same repeat. Time ends
when every record is durable (the writer's flush returns inside the timed region:
each record is in the database or the spool); stopping the writer afterwards, which
takes the writer process 30-100 ms to exit, is not scheduling and is not timed.

Also printed: the scheduler thread's CPU time per cycle, and two rows that split
the journal's price in two:

- "own share": the journal on, but its records are pickled in chunks of 64 as the
  process writer's producer does and then thrown away - no writer process, no
  database. What the scheduling thread itself pays for the journal;
- "off, busy neighbour": journal off while an unrelated process churns memory on
  the other core. On a machine whose cores slow each other down, that row is the
  price of any work on the second core, journal or not.

The process applies the scheduler's garbage-collector settings (kruntimes.gctuning)
before measuring, as ``kruntimes scheduler`` does: the same for every row.

    python bench/journal_overhead.py [--postgres URL] [--repeat N] [--writers process,thread]
                                     [--history inline,follow]

``--history`` lists the journal's history modes to measure (default inline: the history
rows written with each batch; follow: records only, docs/journal.md "Inline or follow").
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable

import prometheus_client
import sqlalchemy as sa

from kruntimes import demo_workload, gctuning
from kruntimes.api import ingest
from kruntimes.journal.history import derive
from kruntimes.journal.write import intake, wire
from kruntimes.journal.store.backends import Journal
from kruntimes.journal.write.process import SEAL_AT
from kruntimes.journal.write.recorder import JournalRecorder
from kruntimes.journal.write.session import JournalSession
from kruntimes.memory.api import MemoryApi
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.loop import Scheduler
from kruntimes.scheduler.queue import WorkQueue

CHURN = """
import sys, time
end = time.monotonic() + float(sys.argv[1])
d = {}
while time.monotonic() < end:
    for j in range(10_000):
        d[(len(d), j)] = {"a": str(j), "b": [j, j + 1]}
    if len(d) > 300_000:
        d.clear()
"""


def prepare(recorder: object | None, *, every: int = 1) -> Scheduler:
    """The demo's pods in a fresh cache and every `every`-th Run of it queued, nothing scheduled."""
    config = SchedulerConfig(workers=1)
    cache = ClusterCache(config, recorder)  # type: ignore[arg-type]
    if recorder is not None:
        recorder.state_source = cache  # type: ignore[attr-defined]
    api = MemoryApi(conflict_rate=0.02, seed=7)
    scheduler = Scheduler(cache, api, clock=lambda: demo_workload.NOW, queue=WorkQueue(base_delay=1e-6, max_delay=1e-3))
    api.watchers.append(scheduler.on_run)
    workload = demo_workload.generate()
    for pod in workload.pods:
        info = ingest.pod_info(pod)
        assert info is not None
        scheduler.on_pod(info)
    for obj in workload.runs[::every]:
        api.create(ingest.run_info(obj))
    return scheduler


def drain(scheduler: Scheduler) -> tuple[int, float, float]:
    """Schedule everything queued on this thread; (cycles, seconds, this thread's CPU seconds)."""
    started, cpu = time.perf_counter(), time.thread_time()
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
    return sum(scheduler.results.values()), time.perf_counter() - started, time.thread_time() - cpu


def schedule(recorder: object | None, *, every: int = 1) -> tuple[int, float, float]:
    """Schedule the demo workload (every `every`-th Run of it) single-threaded.

    Returns (cycles, seconds, scheduler CPU seconds).
    """
    return drain(prepare(recorder, every=every))


def _empty(url: str) -> None:
    """Every record, epoch and history row gone: each run starts from an empty journal."""
    journal = Journal.open(url)
    with journal.engine.begin() as conn:
        for table in (*derive.TABLE_NAMES, "journal_records", "journal_incarnations", "journal_epochs"):
            conn.execute(sa.text(f"DELETE FROM {table}"))
    journal.close()


def with_journal(url: str, spool: str, writer: str, history: str) -> tuple[int, float, float, int, float]:
    """(cycles, seconds, scheduler CPU seconds, records, bytes per cycle record), ending with every record durable."""
    _empty(url)
    session = JournalSession(url, SchedulerConfig(workers=1), spool_path=spool, writer=writer, history=history,
                             registry=prometheus_client.CollectorRegistry())
    cycles, seconds, cpu = schedule(session.recorder)
    started = time.perf_counter()
    flushed = session.writer.flush(60.0)  # counted: the journal must end complete
    seconds += time.perf_counter() - started
    session.close()
    assert flushed, "the journal writer did not settle every record within 60 s"
    journal = Journal.open(url)
    with journal.engine.connect() as conn:
        size = conn.execute(sa.text("SELECT avg(length(payload)) FROM journal_records WHERE kind = 'cycle'")).scalar()
        total = conn.execute(sa.text("SELECT count(*) FROM journal_records")).scalar_one()
    journal.close()
    return cycles, seconds, cpu, int(total), float(size or 0)


class Discard:
    """A sink that does what the process writer's producer does with a record, then forgets it.

    With ``pickle=False`` it only buffers: the 64 records are dropped unpickled."""

    accepts_deferred = True

    def __init__(self, *, pickle: bool = True) -> None:
        self._in = intake.Intake(10 * SEAL_AT, "block", bound_unsettled=False, seal=self._seal, seal_at=SEAL_AT)
        self._pickle = pickle
        self.append = self._in.append

    def _seal(self) -> None:
        buffer = self._in.buffer
        if self._pickle:
            wire.dumps(list(map(tuple, buffer)))
        buffer.clear()


def own_share() -> tuple[int, float, float]:
    return schedule(JournalRecorder(Discard(), start_lsn=0))


def busy_neighbour(seconds: float) -> Callable[[], tuple[int, float, float]]:
    def run() -> tuple[int, float, float]:
        churn = subprocess.Popen([sys.executable, "-c", CHURN, str(seconds)])
        try:
            time.sleep(0.3)
            return schedule(None)
        finally:
            churn.kill()
            churn.wait()
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=os.environ.get(
        "KRUNTIMES_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--writers", default="process,thread", help="comma-separated: process, thread")
    parser.add_argument("--history", default="inline",
                        help="comma-separated: inline (history rows in each batch), follow (records only)")
    args = parser.parse_args()
    gctuning.tune()
    tmp = tempfile.mkdtemp(prefix="kruntimes-bench-")
    backends = [("sqlite", f"sqlite:///{tmp}/bench.db")]
    try:
        _empty(args.postgres)
        backends.append(("postgresql", args.postgres))
    except sa.exc.OperationalError as exc:
        print(f"postgresql unavailable, skipped: {exc.orig}")
    settings: list[tuple[str, Callable[[], tuple[int, ...]]]] = [("journal off", lambda: schedule(None))]
    modes = args.history.split(",")
    for writer in args.writers.split(","):
        for name, url in backends:
            for history in modes:
                label = f"{name}, {writer}" + (f", {history}" if len(modes) > 1 else "")
                settings.append((label, lambda url=url, name=name, writer=writer, history=history: with_journal(
                    url, f"{tmp}/{name}-{writer}-{history}.spool", writer, history)))
    settings.append(("own share", own_share))
    settings.append(("off, busy neighbour", busy_neighbour(30)))

    rates: dict[str, list[float]] = defaultdict(list)
    cpu: dict[str, list[float]] = defaultdict(list)
    extra: dict[str, tuple[int, float]] = {}
    for _ in range(args.repeat):  # interleaved, so drift in the machine hits every setting alike
        for label, run in settings:
            result = run()
            rates[label].append(result[0] / result[1])
            cpu[label].append(result[2] / result[0] * 1e6)
            if len(result) > 3:
                extra[label] = (int(result[3]), float(result[4]))
    # The ratio is the median over repeats of (this setting / journal off in the same
    # repeat): runs next to each other share the machine's mood, which on a shared
    # machine moves more between repeats than the journal moves the scheduler.
    off = rates["journal off"]
    print(f"{'setting':<29}{'cycles/s':>10}{'ratio':>7}{'sched CPU us/cycle':>20}{'records':>9}{'B/cycle rec':>12}")
    for label, _ in settings:
        ratio = statistics.median(r / o for r, o in zip(rates[label], off))
        records, size = extra.get(label, (0, 0.0))
        shown = f"{records:>9,}{size:>12,.0f}" if records else ""
        print(f"{label:<29}{statistics.median(rates[label]):>10,.0f}{ratio:>7.2f}"
              f"{statistics.median(cpu[label]):>20,.0f}{shown}")
    print(f"(medians of {args.repeat}; cycles/s per run: "
          + "; ".join(f"{label}: {min(r):,.0f}-{max(r):,.0f}" for label, r in rates.items()) + ")")


if __name__ == "__main__":
    main()
