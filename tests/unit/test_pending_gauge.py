"""The Pending gauge (SPEC §3.8, issue 27): `kruntimes_scheduler_pending_runs{state}` is exact.

"Pending" means two things: a Run waiting for a cycle (queued, in backoff or in one) and
a Run parked after an unschedulable cycle. The gauge names them apart, with no other
label, and follows the cache's indexes through placement, parking, wake-ups, binds in
flight and deletion.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from kruntimes.scheduler import metrics, status as st
from tests.builders import NOW, Harness, pod, run

GAUGE = "kruntimes_scheduler_pending_runs"
UNFITTABLE = "kruntimes_scheduler_unfittable_runs"


def _gauge(h: Harness) -> dict[str, float]:
    return {state: h.sample(GAUGE, state=state) for state in metrics.PENDING_STATES}


def test_new_runs_are_queued_and_a_run_that_cannot_fit_is_counted_unschedulable() -> None:
    h = Harness()
    h.add_pods(pod("p", capacity={"runs": 1, "gpu": 2}))
    h.create(run("fits"), run("next"), run("too-big", requests={"gpu": 4}))
    assert _gauge(h) == {"queued": 3, "unschedulable": 0}
    assert h.sample(UNFITTABLE) == 0
    h.drain()
    assert h.phase("fits") == "Scheduled"
    assert _gauge(h) == {"queued": 0, "unschedulable": 2}
    assert h.sample(UNFITTABLE) == 1  # "too-big" asks 4 GPUs of 2-GPU pods; "next" waits for capacity


def test_a_run_no_pod_could_fit_stops_counting_as_unfittable_when_a_pod_that_fits_it_appears() -> None:
    h = Harness()
    h.add_pods(pod("p", capacity={"runs": 1, "gpu": 2}))
    h.create(run("too-big", requests={"gpu": 4}))
    h.drain()
    assert (_gauge(h), h.sample(UNFITTABLE)) == ({"queued": 0, "unschedulable": 1}, 1)
    h.add_pods(pod("big", capacity={"runs": 1, "gpu": 4}))
    assert (_gauge(h), h.sample(UNFITTABLE)) == ({"queued": 1, "unschedulable": 0}, 0)
    h.drain()
    assert h.placement("too-big") == "big"
    assert (_gauge(h), h.sample(UNFITTABLE)) == ({"queued": 0, "unschedulable": 0}, 0)


def test_a_wake_up_moves_a_parked_run_back_to_queued_and_placement_leaves_the_gauge() -> None:
    h = Harness()
    h.add_pods(pod("p", capacity={"runs": 1, "gpu": 2}))
    h.create(run("fits"), run("next"), run("too-big", requests={"gpu": 4}))
    h.drain()
    h.api.finish(("ns", "fits"), "Succeeded", NOW)  # released capacity wakes "next", not "too-big"
    assert _gauge(h) == {"queued": 1, "unschedulable": 1}
    h.drain()
    assert h.phase("next") == "Scheduled"
    assert _gauge(h) == {"queued": 0, "unschedulable": 1}
    h.scheduler.on_run_deleted("ns", "too-big")
    assert _gauge(h) == {"queued": 0, "unschedulable": 0}


def test_a_run_whose_bind_is_in_flight_waits_for_nothing() -> None:
    # Without informer delivery the cache still sees the bound Run Pending, but assumed on its pod.
    h = Harness(deliver=False)
    h.add_pods(pod("p"))
    h.create(run("a"), run("b"))
    h.sync()
    assert _gauge(h) == {"queued": 2, "unschedulable": 0}
    h.drain()
    assert len(h.cache.assumed) == 2
    assert _gauge(h) == {"queued": 0, "unschedulable": 0}
    h.sync()
    assert _gauge(h) == {"queued": 0, "unschedulable": 0}


def test_a_run_in_backoff_after_a_failed_bind_stays_queued() -> None:
    h = Harness()
    h.add_pods(pod("p"))

    class _Fails:
        def update_status(self, r, body) -> None:
            raise st.ApiError("the API server is unavailable")

    h.scheduler.binder = _Fails()
    h.create(run("a"))
    h.drain()
    assert h.queue.delayed_count() == 1
    assert _gauge(h) == {"queued": 1, "unschedulable": 0}


def test_the_gauge_carries_only_the_state_label_and_refuses_any_other_state() -> None:
    h = Harness()
    h.add_pods(pod("zq7-pod", ns="zq7-ns", runtime="zq7-rt", capacity={"runs": 1}))
    h.create(run("zq7-run", ns="zq7-ns", runtime="zq7-rt", requests={"runs": 2}))
    h.drain()
    lines = [line for line in generate_latest(h.metrics.registry).decode().splitlines()
             if line.startswith(GAUGE)]
    assert lines == [f'{GAUGE}{{state="queued"}} 0.0', f'{GAUGE}{{state="unschedulable"}} 1.0']
    assert f"{UNFITTABLE} 1.0" in generate_latest(h.metrics.registry).decode().splitlines()
    m = metrics.SchedulerMetrics(CollectorRegistry())
    m.count_pending(lambda: {"zq7-run": 1})
    with pytest.raises(metrics.UndeclaredLabelValue):
        generate_latest(m.registry)


def test_a_new_term_gives_every_pending_run_a_cycle_so_none_counts_as_parked_until_it_parks_again() -> None:
    h = Harness()
    h.add_pods(pod("p", capacity={"runs": 1}))
    h.create(run("too-big", requests={"runs": 2}))
    h.drain()
    assert (_gauge(h), h.sample(UNFITTABLE)) == ({"queued": 0, "unschedulable": 1}, 1)
    h.scheduler.enqueue_pending()  # what a leader does when its term begins
    assert (_gauge(h), h.sample(UNFITTABLE)) == ({"queued": 1, "unschedulable": 0}, 0)
    h.drain()
    assert (_gauge(h), h.sample(UNFITTABLE)) == ({"queued": 0, "unschedulable": 1}, 1)
