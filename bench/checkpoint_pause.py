"""How long a checkpoint holds the cache lock: every worker waits that long (not a test).

A cache of N pods and M active Runs journals through the process writer (SQLite in a
temporary directory); one change after another is recorded under the cache lock, as
the scheduler's workers and informers do, and one of them is a checkpoint of the
whole cache. Printed: the longest any one change held the lock (the checkpoint's),
next to what copying the state sorted (`ClusterCache.state()`) and pickling it would
cost if they happened there, and how long the writer took to make it all durable.

    python bench/checkpoint_pause.py [--pods 1000] [--runs 99000] [--changes 200]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.builders, when run as a script

from prometheus_client import CollectorRegistry  # noqa: E402

from kruntimes.journal.write import settings, wire  # noqa: E402
from kruntimes.journal.store.backends import Journal  # noqa: E402
from kruntimes.journal.write.process import ProcessJournalWriter  # noqa: E402
from kruntimes.journal.write.recorder import JournalRecorder  # noqa: E402
from kruntimes.scheduler.cache import ClusterCache  # noqa: E402
from tests import builders  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=99_000)
    parser.add_argument("--changes", type=int, default=200)
    args = parser.parse_args()
    cache = ClusterCache()
    capacity = -(-args.runs // args.pods)
    for i in range(args.pods):
        cache.upsert_pod(builders.pod(f"p{i:05d}", capacity={"runs": capacity}), now=builders.NOW, event="ADDED")
    for i in range(args.runs):
        cache.upsert_run(builders.active(f"r{i:06d}", on=f"p{i % args.pods:05d}"), event="ADDED")
    started = time.perf_counter()
    state = cache.state()
    sorted_copy = time.perf_counter() - started
    started = time.perf_counter()
    wire.dumps([("incarnation", 1, 0, "checkpoint", state, "summary", 5)])
    pickling = time.perf_counter() - started
    del state

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/journal.db"
        Journal.open(url).close()
        writer = ProcessJournalWriter(settings.Store(url), settings.Spool(f"{tmp}/journal.spool"),
                                      registry=CollectorRegistry())
        recorder = JournalRecorder(writer, start_lsn=writer.last_lsn() or 0)
        recorder.state_source = cache
        cache.recorder = recorder
        worst = 0.0
        for k in range(args.changes):
            started = time.perf_counter()
            with cache.lock:
                if k == args.changes // 10:
                    recorder.checkpoint()
                else:
                    cache.record("bind", {"namespace": "ns", "run_uid": f"u{k}", "result": "ok"})
            worst = max(worst, time.perf_counter() - started)
        started = time.perf_counter()
        assert writer.flush(600), "the writer did not settle every record"
        durable = time.perf_counter() - started
        writer.close()
    print(f"cache: {args.pods:,} pods, {args.runs:,} Runs ({cache.state_size():,} objects)")
    print(f"  a sorted copy of the state (ClusterCache.state):  {sorted_copy * 1e3:8.1f} ms")
    print(f"  pickling that state:                              {pickling * 1e3:8.1f} ms")
    print(f"  longest cache-lock hold of {args.changes} changes, one a checkpoint: {worst * 1e3:6.1f} ms")
    print(f"  then until every record was durable:              {durable:8.1f} s")


if __name__ == "__main__":
    main()
