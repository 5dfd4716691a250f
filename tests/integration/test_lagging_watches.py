"""The scheduler when its watches lag behind the API, as they may on a real server.

A watch learns of a write only after it committed, through a watch cache per resource
("API Concepts", efficient detection of changes), so the scheduler may read its own
binds, or other writers' changes, late. The emulator's ``lag``/``hold`` make that
happen on cue. Needs the emulator.
"""

from __future__ import annotations

import time
from typing import Callable

from kruntimes.cluster.runner import ClusterScheduler
from tests.emulator.server import Emulator
from tests.integration.cluster import Cluster, wait_for


def test_binds_the_scheduler_sees_late_never_overcommit_a_pod(
        emulator: Emulator, cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    emulator.lag("runs", 0.5)
    cluster_api.add_pod("python-0", runs=2)
    start_scheduler()
    for index in range(5):
        cluster_api.add_run(f"r{index}")
    wait_for(lambda: len(cluster_api.placements()) == 2, what="two Runs placed")
    deadline = time.monotonic() + 1.5  # three lags: long enough for a wrong third bind to land
    while time.monotonic() < deadline:
        assert cluster_api.overcommit() == 0
        time.sleep(0.05)
    assert len(cluster_api.placements()) == 2


def test_capacity_freed_while_run_events_are_held_is_used_once_they_arrive(
        emulator: Emulator, cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    cluster_api.add_pod("python-0", runs=1)
    start_scheduler()
    cluster_api.add_run("first")
    wait_for(lambda: cluster_api.placements() == {"first": "python-0"}, what="the first Run placed")
    cluster_api.add_run("second")
    wait_for(lambda: cluster_api.pending_message("second"), what="the second Run Pending")
    emulator.hold("runs")
    cluster_api.finish("first")
    time.sleep(0.5)
    assert cluster_api.placements() == {}  # the scheduler cannot know yet: nothing placed on a guess
    emulator.release("runs")
    wait_for(lambda: cluster_api.placements() == {"second": "python-0"}, what="the second Run placed")
