"""Concurrent workers never break required anti-affinity or cohort co-location.

Regression: with planning and reserving in two lock holds, two workers could each
choose the same empty pod for two anti-affine Runs, and the capacity-only re-check
at reserve let both through.
"""

import time
from collections import Counter
from datetime import datetime, timezone

from kruntimes.memory.api import MemoryApi
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.loop import Scheduler
from kruntimes.scheduler.projection import Affinity, PodInfo, RunInfo, Selector, Term

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
WEB = Term(Selector(match_labels=(("app", "web"),)))


def _settle(s: Scheduler, api: MemoryApi, deadline: float = 20.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if s.queue.idle() and api.idle():
            return
        time.sleep(0.02)
    raise AssertionError("scheduler did not settle")


def test_eight_workers_never_place_two_anti_affine_runs_on_one_pod() -> None:
    cache = ClusterCache()
    api = MemoryApi(delay=(0.0, 0.0005), conflict_rate=0.02, seed=3)
    s = Scheduler(cache, api, clock=lambda: NOW)
    api.watchers.append(s.on_run)
    try:
        for i in range(80):
            s.on_pod(PodInfo("ns", f"p{i:02d}", f"u{i}", "rt", ready=True, heartbeat=NOW, capacity=(("runs", 9),)))
        s.start(8)
        for j in range(120):
            api.create(RunInfo("ns", f"web-{j:02d}", f"w{j}", "rt", labels=(("app", "web"),),
                               affinity=Affinity(required_anti=(WEB,))))
        _settle(s, api)
    finally:
        s.stop()
        api.close()
    placed = Counter(r.pod_name for r in api.runs() if r.phase == "Scheduled")
    assert max(placed.values()) == 1
    assert sum(placed.values()) == 80
