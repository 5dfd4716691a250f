"""Runs created -> placed; Pending with the bounded message; woken by pod and capacity events (SPEC §3.1-§3.2)."""

from __future__ import annotations

from typing import Callable

from kruntimes.cluster.runner import ClusterScheduler
from tests.integration.cluster import Cluster, wait_for

WAKEUPS = "kruntimes_scheduler_pending_run_wakeups_total"
RESULTS = "kruntimes_scheduler_schedule_results_total"


def wakeups(scheduler: ClusterScheduler, source: str) -> float:
    return scheduler.registry.get_sample_value(WAKEUPS, {"source": source}) or 0.0


def parked(scheduler: ClusterScheduler, unschedulable: int) -> None:
    """Wait until `unschedulable` cycles have ENDED and nothing is queued: the Runs are parked.

    Not the Pending status: it is written before the cycle parks its Run, and an event
    observed in between wakes nothing (the Run is requeued, without a wake-up source).
    """
    wait_for(lambda: (scheduler.registry.get_sample_value(RESULTS, {"result": "unschedulable"}) or 0)
             >= unschedulable and scheduler.scheduler.queue.idle(), what=f"{unschedulable} Runs parked")


def test_runs_created_are_placed_on_runtime_pods_of_their_runtime(
        cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    pods = {p["name"]: p["uid"] for p in (cluster_api.add_pod("python-0", runs=2), cluster_api.add_pod("python-1", runs=2))}
    cluster_api.add_pod("go-0", runs=4, runtime="go")
    scheduler = start_scheduler()
    names = [f"r{i}" for i in range(4)]
    for name in names:
        cluster_api.add_run(name)
    wait_for(lambda: cluster_api.all_placed(names), what="every Run Scheduled")
    runs = cluster_api.runs()
    for name in names:
        assignment = runs[name]["status"]["assignment"]
        assert assignment["podUID"] == pods[assignment["podName"]]
        conditions = {c["type"]: c for c in runs[name]["status"]["conditions"]}
        assert (conditions["Scheduled"]["status"], conditions["Scheduled"]["reason"]) == ("True", "Scheduled")
    assert sorted(cluster_api.placements().values()) == ["python-0", "python-0", "python-1", "python-1"]
    assert scheduler.leading


def test_a_run_that_fits_nowhere_stays_pending_with_the_bounded_message(
        cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    cluster_api.add_pod("python-0", runs=0)
    cluster_api.add_pod("python-1", runs=1, ready=False)
    cluster_api.add_pod("python-2", runs=1, capacity={"example.com/gpu": "0"})
    start_scheduler()
    cluster_api.add_run("r", resources={"requests": {"example.com/gpu": "1"}})
    message = wait_for(lambda: cluster_api.pending_message("r"), what="a Pending message")
    assert message == ("0/3 runtime pods available: 1 insufficient capacity (example.com/gpu), "
                       "1 resource not offered (example.com/gpu), 1 runtime pod not ready; "
                       "no runtime pod could fit this Run even if idle: it waits until pods or their capacity change")
    status = cluster_api.run("r")["status"]
    assert status["phase"] == "Pending" and "assignment" not in status


def test_a_pending_run_is_woken_when_a_runtime_pod_becomes_ready(
        cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    cluster_api.add_pod("python-0", runs=1, ready=False)
    scheduler = start_scheduler()
    cluster_api.add_run("r")
    wait_for(lambda: cluster_api.pending_message("r"), what="a Pending message")
    parked(scheduler, 1)
    assert wakeups(scheduler, "runtime_pod") == 0
    cluster_api.set_ready("python-0", True)
    wait_for(lambda: cluster_api.placements() == {"r": "python-0"}, what="the Run placed after the pod got ready")
    assert wakeups(scheduler, "runtime_pod") == 1


def test_a_pending_run_is_woken_when_capacity_is_released(
        cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    cluster_api.add_pod("python-0", runs=1)
    scheduler = start_scheduler()
    cluster_api.add_run("first")
    wait_for(lambda: cluster_api.placements() == {"first": "python-0"}, what="the first Run placed")
    cluster_api.add_run("second")
    assert wait_for(lambda: cluster_api.pending_message("second"), what="the second Run Pending") == \
        "0/1 runtime pods available: 1 insufficient capacity (runs)"
    parked(scheduler, 1)
    cluster_api.finish("first")
    wait_for(lambda: cluster_api.placements() == {"second": "python-0"}, what="the second Run placed")
    assert wakeups(scheduler, "capacity_released") == 1
    assert cluster_api.phases() == {"first": "Succeeded", "second": "Scheduled"}


def test_a_capacity_increase_on_a_pod_wakes_its_pending_runs(
        cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    cluster_api.add_pod("python-0", runs=1)
    scheduler = start_scheduler()
    for name in ("a", "b", "c"):
        cluster_api.add_run(name)
    wait_for(lambda: len(cluster_api.placements()) == 1
             and all(cluster_api.pending_message(n) for n in ("a", "b", "c") if n not in cluster_api.placements()),
             what="one placed, the others Pending")
    parked(scheduler, 2)
    cluster_api.set_capacity("python-0", 3)
    wait_for(lambda: len(cluster_api.placements()) == 3, what="all three placed")
    assert wakeups(scheduler, "runtime_pod") == 2  # the two parked Runs, each once


def test_an_invalid_run_becomes_terminal_failed_with_a_message_naming_the_field(
        cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    cluster_api.add_pod("python-0", runs=4)
    scheduler = start_scheduler()
    cluster_api.add_run("fractional", resources={"requests": {"runs": "500m"}})
    wait_for(lambda: cluster_api.phases().get("fractional") == "Failed", what="the Run Failed")
    status = cluster_api.run("fractional")["status"]
    completed = {c["type"]: c for c in status["conditions"]}["Completed"]
    assert completed["reason"] == "InvalidConfiguration" and "spec.resources" in completed["message"]
    assert status["completionTime"] and "assignment" not in status
    # The server answers before the binder counts its write: wait for the count too.
    wait_for(lambda: scheduler.binder.writes == 1, what="the binder's one write counted")
    writes = scheduler.binder.writes
    cluster_api.label_run("fractional", seen="yes")  # a terminal Run is never planned or written again
    cluster_api.add_run("valid")
    wait_for(lambda: cluster_api.placements() == {"valid": "python-0"}, what="the valid Run placed")
    # Again the server answers before the count: wait for it, then make sure no write follows.
    wait_for(lambda: scheduler.binder.writes >= writes + 1, what="the valid Run's write counted")
    wait_for(lambda: scheduler.scheduler.queue.idle(), what="the queue idle")
    assert scheduler.binder.writes == writes + 1
