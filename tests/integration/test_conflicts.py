"""Conflicts on bind (SPEC §3.2 step 6): a 409 releases the assumption and re-plans on the newer Run."""

from __future__ import annotations

from typing import Any, Callable

from kubernetes.client import ApiClient

from kruntimes.cluster.runner import ClusterScheduler
from kruntimes.scheduler.projection import RunInfo
from kruntimes.scheduler.writes import ReadDone, WriteDone
from tests.emulator.server import Emulator
from tests.integration.cluster import Cluster, wait_for

CONFLICTS = "kruntimes_scheduler_reservation_conflicts_total"
RESULTS = "kruntimes_scheduler_schedule_results_total"


def sample(scheduler: ClusterScheduler, name: str, **labels: str) -> float:
    return scheduler.registry.get_sample_value(name, labels) or 0.0


class ConcurrentWriter:
    """Wraps the scheduler's sender: before the first write of a Run, someone else updates that Run."""

    def __init__(self, inner: Any, cluster: Cluster) -> None:
        self.inner, self.cluster = inner, cluster
        self.touched: set[str] = set()

    def write(self, run: RunInfo, status: dict[str, Any], deadline: float, done: WriteDone) -> None:
        if run.name not in self.touched:
            self.touched.add(run.name)
            self.cluster.label_run(run.name, touched="yes")  # a newer resourceVersion than the one planned on
        self.inner.write(run, status, deadline, done)

    def read(self, run: RunInfo, done: ReadDone) -> None:
        self.inner.read(run, done)

    def wait_for_room(self, timeout: float) -> bool:
        return self.inner.wait_for_room(timeout)


def test_a_concurrent_write_to_the_run_makes_the_bind_conflict_and_the_run_is_placed_on_its_newer_version(
        cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    cluster_api.add_pod("python-0", runs=1)
    scheduler = start_scheduler()
    scheduler.scheduler.sender = ConcurrentWriter(scheduler.scheduler.sender, cluster_api)
    cluster_api.add_run("r")
    wait_for(lambda: cluster_api.placements() == {"r": "python-0"}, what="the Run placed")
    assert sample(scheduler, CONFLICTS, stage="bind") == 1
    wait_for(lambda: scheduler.binder.writes == 1, what="the write counted")  # counted after the API's answer
    assert scheduler.binder.conflicts == 1
    assert cluster_api.run("r")["metadata"]["labels"] == {"touched": "yes"}  # the other writer's change survived
    wait_for(lambda: not scheduler.cache.assumed, what="the assumption handed over to the observed Run")


def test_an_injected_409_on_the_status_write_is_a_bind_conflict_not_an_error(
        emulator: Emulator, cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    cluster_api.add_pod("python-0", runs=1)
    scheduler = start_scheduler()
    emulator.fail_next(1, code=409, when=lambda method, path: method == "PUT" and path.endswith("/status"))
    cluster_api.add_run("r")
    wait_for(lambda: cluster_api.placements() == {"r": "python-0"}, what="the Run placed after the conflict")
    # The status is visible before the cycle that wrote it ends: wait for its result.
    wait_for(lambda: sample(scheduler, RESULTS, result="scheduled") == 1, what="the placing cycle's end")
    assert sample(scheduler, CONFLICTS, stage="bind") == 1
    assert sample(scheduler, RESULTS, result="conflict") == 1 and sample(scheduler, RESULTS, result="error") == 0


def test_a_server_error_on_the_status_write_is_retried_with_backoff(
        emulator: Emulator, cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    cluster_api.add_pod("python-0", runs=1)
    scheduler = start_scheduler()
    emulator.fail_next(2, code=500, when=lambda method, path: method == "PUT" and path.endswith("/status"))
    cluster_api.add_run("r")
    wait_for(lambda: cluster_api.placements() == {"r": "python-0"}, what="the Run placed after two 500s")
    assert sample(scheduler, RESULTS, result="error") == 2 and scheduler.binder.failures == 2
    assert sample(scheduler, CONFLICTS, stage="bind") == 0


def test_two_runs_racing_for_the_last_slot_never_overcommit(
        cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler], kube_api: ApiClient) -> None:
    cluster_api.add_pod("python-0", runs=3)
    start_scheduler(bind_concurrency=8)
    names = [f"r{i}" for i in range(8)]
    for name in names:
        cluster_api.add_run(name)
    wait_for(lambda: len(cluster_api.placements()) == 3
             and sum(1 for n in names if cluster_api.pending_message(n)) == 5, what="3 placed, 5 Pending")
