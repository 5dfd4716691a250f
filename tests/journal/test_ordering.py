"""Ordering replay can trust: gap-free LSNs assigned at the moment of each change.

A live scheduler with four workers, a watch-delivery thread (the Run informer) and a
thread updating pods (the pod informer) journals into each backend; the database
must then hold exactly the records the recorder produced - each once, gap-free, in
LSN order - and every cycle must have seen exactly the records before its snapshot.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import datetime, timezone

from kruntimes.journal import records
from kruntimes.journal.store.backends import Journal
from kruntimes.journal.write.session import JournalSession
from kruntimes.memory.api import MemoryApi
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.loop import Scheduler
from kruntimes.scheduler.projection import PodInfo, RunInfo

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


class Tee:
    """Keeps an in-memory copy of every record on its way to the writer."""

    def __init__(self, writer) -> None:  # type: ignore[no-untyped-def]
        self.writer, self.copy, self.lock = writer, [], threading.Lock()

    def append(self, record: records.JournalRecord) -> bool:
        with self.lock:
            self.copy.append(record)
        return bool(self.writer.append(record))


def test_concurrent_workers_and_informers_journal_gap_free_in_change_order(journal_url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = SchedulerConfig(workers=4)
    session = JournalSession(journal_url, config, spool_path=str(tmp_path / "spool"), checkpoint_every=500)
    tee = Tee(session.writer)
    session.recorder.sink = tee
    cache = ClusterCache(config, session.recorder)
    session.attach(cache)
    api = MemoryApi(conflict_rate=0.05, delay=(0.0, 0.002), seed=11)
    scheduler = Scheduler(cache, api, clock=lambda: NOW)
    api.watchers.append(scheduler.on_run)
    pods = [PodInfo("ns", f"p{i:02d}", f"u{i}", "rt", ready=True, heartbeat=NOW, capacity=(("runs", 6),))
            for i in range(20)]
    for pod in pods:
        scheduler.on_pod(pod, event="ADDED")
    stop = threading.Event()

    def pod_informer() -> None:  # capacity changes racing with the workers
        n = 0
        while not stop.is_set():
            pod = pods[n % len(pods)]
            scheduler.on_pod(replace(pod, resource_version=str(n), capacity=(("runs", 5 + n % 3),)))
            n += 1
            time.sleep(0.001)

    informer = threading.Thread(target=pod_informer)
    scheduler.start(4)
    informer.start()
    try:
        for j in range(150):
            api.create(RunInfo("ns", f"r{j:03d}", f"ur{j}", "rt"))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (scheduler.queue.idle() and api.idle()):
            time.sleep(0.02)
    finally:
        stop.set()
        informer.join()
        scheduler.stop()
        api.close()
        session.close()

    produced = tee.copy
    lsns = [r.lsn for r in produced]
    assert lsns == list(range(lsns[0], lsns[0] + len(lsns))), "LSNs are not gap-free in production order"
    journal = Journal.open(journal_url)
    try:
        stored = list(journal.read_encoded())
    finally:
        journal.close()
    assert stored[0].kind == "incarnation" and stored[0].lsn == lsns[0] - 1
    stored = stored[1:]
    assert [r.lsn for r in stored] == lsns
    assert [(r.kind, r.payload) for r in stored] == [
        (r.kind, records.encode(r).payload) for r in produced]

    by_lsn = {r.lsn: r for r in produced}
    cycles = [r for r in produced if r.kind == "cycle"]
    assert len(cycles) >= 150 and {r.kind for r in produced} >= {"mutation", "reserve", "bind", "checkpoint"}
    for cycle in cycles:
        snapshot_lsn = cycle.payload["snapshot_lsn"]
        assert snapshot_lsn < cycle.lsn
        if cycle.payload["status"] == "scheduled" and cycle.payload["result"] != "conflict":
            # Planned and reserved in one hold of the cache lock: nothing came between.
            reserve = by_lsn[snapshot_lsn + 1]
            assert reserve.kind == "reserve"
            assert reserve.payload["assumption"]["run_uid"] == cycle.payload["run_uid"]
