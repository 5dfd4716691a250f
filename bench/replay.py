"""Replay benchmarks (issue 4; not a test): one cycle vs journal length, and `verify` throughput.

1. **One cycle vs journal length.** SQLite journals of 10k, 100k and 1M records
   (checkpoints as the live recorder takes them by default: at least every 5,000
   records and 2 records per cached object) of a synthetic-but-valid
   history; for sampled cycles - uniformly, plus the ones farthest from their
   checkpoint - the time `replay.verify` takes for that one cycle with an open
   journal: find the cycle, its incarnation and checkpoint, restore, apply every
   record up to the snapshot, plan, compare. Target < 200 ms, flat in length.
2. **verify throughput on a 1,000-pod history.** One Runtime of 1,000 pods, so
   every cycle evaluates all of them; `replay.verify` over every cycle. Target
   >= 500 cycles/s.

The histories are written by the real `ClusterCache` + `JournalRecorder` (real
cycles planned by the real `Planner`, real reserves, hand-offs, checkpoints),
driven directly instead of through the MemoryApi and workers, and bulk-inserted:
Runs arrive, are planned, reserved, bound, observed Scheduled (the assumption is
handed off), later finish and are deleted; pods renew their heartbeats.

    python bench/replay.py                       # 10k, 100k, 1M records (1M takes a few minutes)
    python bench/replay.py --sizes 10000,100000 --samples 20
    python bench/replay.py --quick               # tiny, for smoke runs
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from collections import deque
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa

if __name__ == "__main__" and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    # Run as a script, bench/ is sys.path[0] and this very file would shadow the `replay` package.
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from kruntimes.journal import records
from kruntimes.journal.store import schema  # noqa: E402
from kruntimes.journal.store.backends import Journal  # noqa: E402
from kruntimes.journal.write.recorder import DEFAULT_CHECKPOINT_EVERY, DEFAULT_CHECKPOINT_SIZE_RATIO, JournalRecorder  # noqa: E402
from kruntimes.scheduler import outcome as out  # noqa: E402
from kruntimes.scheduler.cache import ClusterCache  # noqa: E402
from kruntimes.scheduler.config import SchedulerConfig  # noqa: E402
from kruntimes.scheduler.planner import Planner  # noqa: E402
from kruntimes.scheduler.projection import PodInfo, RunInfo  # noqa: E402
from replay import source, verify  # noqa: E402

T0 = datetime(2026, 6, 1, 8, 0, tzinfo=timezone.utc)
NS = "bench"


class BulkSink:
    """The recorder's sink: encode, then insert in large batches (what the writer does, minus the thread)."""

    def __init__(self, journal: Journal, batch: int = 20_000) -> None:
        self.journal = journal
        self.batch = batch
        self.rows: list[records.EncodedRecord] = []

    def append(self, record: records.JournalRecord) -> None:
        self.rows.append(records.encode(record))
        if len(self.rows) >= self.batch:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            self.journal.append_batch(self.rows)
            self.rows = []


def generate(url: str, *, target: int, runtimes: int, pods_per_runtime: int, capacity: int,
             checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
             checkpoint_size_ratio: int = DEFAULT_CHECKPOINT_SIZE_RATIO, seed: int = 1) -> dict[str, Any]:
    """Write a history of about `target` records; return its shape."""
    rng = random.Random(seed)
    journal = Journal.open(url)
    sink = BulkSink(journal)
    clock = [T0]
    recorder = JournalRecorder(sink, start_lsn=journal.last_lsn() or 0, checkpoint_every=checkpoint_every,
                               checkpoint_size_ratio=checkpoint_size_ratio, clock=lambda: clock[0])
    config = SchedulerConfig()
    recorder.start(config, top_candidates=5)
    cache = ClusterCache(config, recorder)
    recorder.state_source = cache
    planner = Planner(config)
    pods = [PodInfo(namespace=NS, name=f"rt{r}-{i:04d}", uid=f"pod-{r}-{i}", runtime=f"rt{r}", resource_version="1",
                    ready=True, heartbeat=T0, capacity=(("runs", capacity),))
            for r in range(runtimes) for i in range(pods_per_runtime)]
    for p in pods:
        cache.upsert_pod(p, now=T0, event="ADDED")
    steady = int(len(pods) * capacity * 0.6)
    active: deque[RunInfo] = deque()
    cycles = i = 0
    while recorder.lsn < target:
        i += 1
        clock[0] += timedelta(milliseconds=10)
        now = clock[0]
        run = RunInfo(namespace=NS, name=f"run-{i:07d}", uid=f"run-uid-{i}", runtime=f"rt{rng.randrange(runtimes)}",
                      resource_version="1", labels=(("team", rng.choice(("red", "blue"))),), requests=(("runs", 1),))
        cache.upsert_run(run, event="ADDED")
        with cache.lock:  # the live cycle: snapshot, plan and reserve in one hold of the lock
            outcome = planner.plan(cache.snapshot(run, now))
            reserved = outcome.status == out.SCHEDULED and cache.reserve(run, outcome.chosen or "")
        result = "scheduled" if reserved else outcome.status
        cache.record("cycle", {"outcome": outcome, "result": result, "duration": 0.0005, "top": 5})
        cycles += 1
        if reserved:
            cache.record("bind", {"namespace": NS, "run_uid": run.uid, "result": "ok"})
            bound = replace(run, resource_version="2", phase="Scheduled", pod_name=outcome.chosen,
                            pod_uid=outcome.chosen_uid)
            cache.upsert_run(bound)  # observed: the assumption is handed off
            active.append(bound)
        while len(active) > steady:
            done = active.popleft()
            cache.upsert_run(replace(done, resource_version="3", phase="Succeeded"))
            cache.delete_run(NS, done.name)
        p = pods[i % len(pods)]  # runtimed heartbeats: every pod every len(pods) * 10 ms
        pods[i % len(pods)] = p = replace(p, heartbeat=now, resource_version=str(int(p.resource_version) + 1))
        cache.upsert_pod(p, now=now)
    sink.flush()
    journal.close()
    return {"records": recorder.lsn, "cycles": cycles, "pods": len(pods), "active": len(active)}


def _cycles_with_distance(journal: Journal) -> list[tuple[int, int]]:
    """(cycle LSN, records to apply from its checkpoint) for every cycle."""
    t = schema.journal_records
    with journal.engine.connect() as conn:
        checkpoints = [r[0] for r in conn.execute(sa.select(t.c.lsn).where(t.c.kind == "checkpoint")
                                                  .order_by(t.c.lsn))]
    import bisect

    found = []
    for ref in verify.engine.select(journal, source.Selection()):
        k = bisect.bisect_right(checkpoints, ref.snapshot_lsn)
        start = checkpoints[k - 1] if k else 1
        found.append((ref.lsn, ref.lsn - start))
    return found


def one_cycle(url: str, samples: int, seed: int = 2) -> dict[str, Any]:
    journal = Journal.open(url, create=False)
    try:
        cycles = _cycles_with_distance(journal)
        rng = random.Random(seed)
        worst = sorted(cycles, key=lambda c: -c[1])[: max(1, samples // 4)]
        picked = rng.sample(cycles, min(samples, len(cycles))) + worst
        verify.verify(journal, source.Selection(lsns=(picked[0][0],)))  # warm: imports, connection pool
        times = []
        for lsn, _distance in picked:
            started = time.perf_counter()
            report = verify.verify(journal, source.Selection(lsns=(lsn,)))
            times.append(time.perf_counter() - started)
            assert report.ok, f"cycle {lsn} did not replay identically"
        worst_times = times[-len(worst):]
        return {"median_ms": statistics.median(times) * 1000, "p95_ms": _p95(times) * 1000,
                "max_ms": max(times) * 1000, "worst_ms": statistics.median(worst_times) * 1000,
                "max_distance": worst[0][1], "samples": len(times)}
    finally:
        journal.close()


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


def _cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (the verify pool's workers)."""
    mine, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime


def throughput(url: str, workers: int = 1) -> dict[str, Any]:
    journal = Journal.open(url, create=False)
    try:
        cpu, mine = _cpu_seconds(), time.process_time()
        report = verify.verify(journal, workers=workers)
        cpu, mine = _cpu_seconds() - cpu, time.process_time() - mine
        assert report.ok
        walks = report.walk_cpu.values()
        # On idle cores the wall time is about the caller's own CPU time (reading, splitting, merging; with one
        # worker it includes the walks) plus the busiest worker's: a model, for a machine too busy to show it.
        idle = mine + (max(walks) if report.workers > 1 else 0.0)
        return {"cycles": report.replayed, "seconds": report.seconds, "rate": report.rate, "cpu": cpu,
                "idle_rate": report.replayed / idle if idle > 0 else 0.0,
                "checkpoints": report.stats.checkpoints_compared, "workers": report.workers}
    finally:
        journal.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000", help="journal lengths in records")
    parser.add_argument("--samples", type=int, default=40, help="cycles timed per journal (plus the worst quarter)")
    parser.add_argument("--verify-cycles", type=int, default=3000, help="cycles in the 1,000-pod history")
    parser.add_argument("--dir", help="where to write the journals (default: a temporary directory)")
    parser.add_argument("--checkpoint-every", type=int, default=DEFAULT_CHECKPOINT_EVERY,
                        help="the recorder's fewest records between checkpoints")
    parser.add_argument("--checkpoint-size-ratio", type=int, default=DEFAULT_CHECKPOINT_SIZE_RATIO,
                        help="and at least this many records per object in the cache")
    parser.add_argument("--skip-verify", action="store_true", help="only the one-cycle table")
    parser.add_argument("--only-verify", action="store_true", help="only the verify throughput table")
    parser.add_argument("--workers", default="1,2",
                        help="verify with these process counts, side by side (1 replays in-process)")
    parser.add_argument("--repeat", type=int, default=2, help="rounds of the verify comparison, interleaved")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for smoke runs")
    args = parser.parse_args(argv)
    sizes = [2000, 5000] if args.quick else [int(s.replace("_", "")) for s in args.sizes.split(",")]
    samples = 4 if args.quick else args.samples
    verify_cycles = 100 if args.quick else args.verify_cycles
    checkpoint_every = 1000 if args.quick else args.checkpoint_every
    pods = 100 if args.quick else 1000
    where = Path(args.dir or tempfile.mkdtemp(prefix="kruntimes-replay-bench-"))
    print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]}; journals in {where}")

    runtimes = 5 if args.quick else 50
    ratio = args.checkpoint_size_ratio
    if not args.only_verify:
        _one_cycle_table(args, sizes, samples, checkpoint_every, ratio, runtimes, where)
    if args.skip_verify:
        return 0
    print(f"\n2. verify throughput on a {pods:,}-pod history (one Runtime: every cycle evaluates every pod); "
          "CPU is this process and its workers")
    url = f"sqlite:///{where}/verify-{pods}-{checkpoint_every}-{ratio}.db"
    shape = generate(url, target=verify_cycles * 9, runtimes=1, pods_per_runtime=pods, capacity=8,
                     checkpoint_every=checkpoint_every, checkpoint_size_ratio=ratio)
    counts = [int(w) for w in args.workers.split(",")]
    print(f"the machine now: a pure CPU loop in 2 processes runs {_parallel_capacity():.2f}x as fast as in 1 "
          "(2.0 on two idle cores; less means other load takes the second core)")
    header = (f"{'round':>5} {'workers':>7} {'cycles':>7} {'wall s':>7} {'cycles/s':>9} {'CPU s':>7} "
              f"{'cycles/s on idle cores (model)':>31} {'load':>5}")
    print(f"{shape['records']:,} records")
    print(header)
    print("-" * len(header))
    rates: dict[int, list[float]] = {w: [] for w in counts}
    idle: dict[int, list[float]] = {w: [] for w in counts}
    for round_ in range(1, args.repeat + 1):
        for w in counts:
            t = throughput(url, w)
            rates[w].append(t["rate"])
            idle[w].append(t["idle_rate"])
            print(f"{round_:>5} {t['workers']:>7} {t['cycles']:>7,} {t['seconds']:>7.2f} {t['rate']:>9,.0f} "
                  f"{t['cpu']:>7.2f} {t['idle_rate']:>31,.0f} {os.getloadavg()[0]:>5.1f}", flush=True)
    for w in counts[1:]:
        print(f"{w} workers vs {counts[0]}: {statistics.median(rates[w]) / statistics.median(rates[counts[0]]):.2f}x "
              f"measured, {statistics.median(idle[w]) / statistics.median(idle[counts[0]]):.2f}x modelled for idle "
              f"cores (medians of {args.repeat} rounds; target >= 1.8x on 2 cores)")
    print(f"target >= 500 cycles/s with {counts[0]} worker")
    return 0


def _spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


def _parallel_capacity(n: int = 5_000_000) -> float:
    """How much faster two processes spinning are than one, now: how much of a second core is free."""
    import multiprocessing

    started = time.perf_counter()
    _spin(n), _spin(n)
    alone = time.perf_counter() - started
    started = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pool.map(_spin, [n, n])
    return alone / (time.perf_counter() - started)


def _one_cycle_table(args: argparse.Namespace, sizes: list[int], samples: int, checkpoint_every: int, ratio: int,
                     runtimes: int, where: Path) -> None:
    print(f"\n1. Replay one cycle vs journal length (SQLite; checkpoints at least every {checkpoint_every:,} "
          f"records and {ratio} per cached object; {runtimes} Runtimes x 20 pods)")
    header = (f"{'records':>10} {'cycles':>8} {'generate s':>10} {'median ms':>10} {'p95 ms':>8} {'max ms':>8} "
              f"{'farthest ms':>11} {'records applied (farthest)':>27}")
    print(header)
    print("-" * len(header))
    for size in sizes:
        url = f"sqlite:///{where}/history-{size}-{checkpoint_every}-{ratio}.db"
        started = time.perf_counter()
        shape = generate(url, target=size, runtimes=runtimes, pods_per_runtime=20, capacity=4,
                         checkpoint_every=checkpoint_every, checkpoint_size_ratio=ratio)
        generated = time.perf_counter() - started
        r = one_cycle(url, samples)
        print(f"{shape['records']:>10,} {shape['cycles']:>8,} {generated:>10.1f} {r['median_ms']:>10.1f} "
              f"{r['p95_ms']:>8.1f} {r['max_ms']:>8.1f} {r['worst_ms']:>11.1f} {r['max_distance']:>27,}", flush=True)
    print("target: < 200 ms for any cycle, flat in journal length (a cycle applies at most one checkpoint "
          "interval of records)")


if __name__ == "__main__":
    sys.exit(main())
