"""Fault-safe binding (SPEC §3.2 step 6, amended 2026-12-01; §3.6): zero over-commit when writes misbehave.

Measured before: with a status write held past the client's timeout, urllib3 re-sent
it behind the scheduler's back, the scheduler released the assumption, and a copy
landed later: two active Runs on a one-slot pod in 3 of 3 trials. Each test here
puts a fault on the wire (the emulator's per-request faults), then counts from the
API the active Runs per pod against its capacity (`Cluster.overcommit`, which must be
0) and the requests the server saw against the ones kruntimes sent (equal: nothing
was re-sent behind its back).
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Callable

from kruntimes.cluster.runner import ClusterScheduler
from tests.emulator.faults import Match, lease_write, status_write
from tests.emulator.server import Emulator
from tests.integration.cluster import Cluster, wait_for

CONFLICTS = "kruntimes_scheduler_reservation_conflicts_total"
THROTTLED = "kruntimes_cluster_api_throttled_total"


class Sends:
    """The status writes kruntimes itself sends, per Run: those its binder processes handed to the client."""

    def __init__(self, scheduler: ClusterScheduler) -> None:
        self.binder = scheduler.binder

    @property
    def counts(self) -> Counter[str]:
        return self.binder.sent


def hits(emulator: Emulator, name: str) -> int:
    return emulator.hits_of(status_write(name))


def settled(sends: Sends, emulator: Emulator, *names: str) -> None:
    """Wait until the binders' reports of what they sent for ``names`` caught up with what the API saw.

    A binder process reports a send with its answer, over a pipe: the API can show the
    write (and the test move on) a moment before the scheduling process counts it.
    """
    wait_for(lambda: all(sends.counts[n] >= hits(emulator, n) for n in names), timeout=10,
             what=f"the binders' send counts of {names}")


def sample(scheduler: ClusterScheduler, name: str, **labels: str) -> float:
    return scheduler.registry.get_sample_value(name, labels) or 0.0


def placed_and_waiting(cluster_api: Cluster) -> tuple[str, str]:
    """With two Runs on a one-slot pod: (the placed one, the Pending one), once both are settled."""
    placed = wait_for(lambda: cluster_api.placements(), what="a Run placed")
    waiting = wait_for(lambda: [n for n in ("a", "b") if n not in placed and cluster_api.pending_message(n)],
                       what="the other Run Pending")
    return next(iter(placed)), waiting[0]


def test_a_status_write_held_past_the_client_timeout_keeps_its_slot_and_is_never_re_sent_blindly(
        emulator: Emulator, cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    # Two Runs wait, Pending with the same message, for the one slot. When it frees, the
    # first bind is held past the client's timeout and lands late. Releasing its slot on
    # the timeout would let the other Run bind, and the Run whose bind was held would
    # not write again (its Pending message is unchanged): two active Runs on one slot.
    cluster_api.add_pod("python-0", runs=1)
    scheduler = start_scheduler()
    sends = Sends(scheduler)
    cluster_api.add_run("first")
    wait_for(lambda: cluster_api.placements() == {"first": "python-0"}, what="first placed")
    cluster_api.add_run("a")
    cluster_api.add_run("b")
    wait_for(lambda: cluster_api.pending_message("a") and cluster_api.pending_message("b"), what="a and b Pending")
    waiting_writes = status_write()
    emulator.delay(3 * scheduler.binder.timeout, lambda m, p: waiting_writes(m, p) and "/runs/first/" not in p)
    cluster_api.finish("first")
    wait_for(lambda: emulator.faults.finished["delay"] == 1, what="the held write handled")
    wait_for(lambda: cluster_api.placements() and scheduler.scheduler.queue.idle(), what="a placed, all settled")
    assert cluster_api.overcommit() == 0
    placed, waiting = placed_and_waiting(cluster_api)
    assert cluster_api.placements() == {placed: "python-0"}
    settled(sends, emulator, "a", "b")
    assert (hits(emulator, "a"), hits(emulator, "b")) == (sends.counts["a"], sends.counts["b"])
    assert scheduler.binder.ambiguous >= 1
    assert cluster_api.pending_message(waiting) == "0/1 runtime pods available: 1 insufficient capacity (runs)"


def test_a_connection_dropped_after_the_write_applied_settles_as_placed_with_one_write(
        emulator: Emulator, cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    cluster_api.add_pod("python-0", runs=1)
    scheduler = start_scheduler()
    sends = Sends(scheduler)
    emulator.drop(status_write(), apply_first=True)
    cluster_api.add_run("a")
    cluster_api.add_run("b")
    placed, waiting = placed_and_waiting(cluster_api)
    wait_for(lambda: not scheduler.cache.assumed, what="the assumption handed over to the observed Run")
    assert cluster_api.overcommit() == 0
    settled(sends, emulator, placed, waiting)
    assert hits(emulator, placed) == sends.counts[placed] == 1  # it landed: nothing was sent again
    assert scheduler.binder.ambiguous == 1
    assert hits(emulator, waiting) == sends.counts[waiting]


def test_a_connection_dropped_before_the_write_applied_is_settled_by_a_read_and_one_deliberate_re_send(
        emulator: Emulator, cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    cluster_api.add_pod("python-0", runs=1)
    scheduler = start_scheduler()
    sends = Sends(scheduler)
    emulator.drop(status_write("a"))
    cluster_api.add_run("a")
    wait_for(lambda: cluster_api.placements() == {"a": "python-0"}, what="a placed")
    assert scheduler.binder.ambiguous == 1 and scheduler.binder.reads >= 1
    settled(sends, emulator, "a")
    assert hits(emulator, "a") == sends.counts["a"] == 2
    cluster_api.add_run("b")
    wait_for(lambda: cluster_api.pending_message("b"), what="b Pending")
    assert cluster_api.overcommit() == 0


def test_a_pod_replaced_between_plan_and_bind_is_a_bind_conflict_and_the_run_goes_to_the_new_pod(
        cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler], emulator: Emulator) -> None:
    old = cluster_api.add_pod("python-0", runs=1)
    scheduler = start_scheduler()
    cache, loop = scheduler.cache, scheduler.scheduler
    bind = loop._bind
    replaced: list[str] = []

    def replace_then_bind(cycle: Any, run: Any, planned: Any) -> None:
        # After the cycle planned and reserved (and let go of the cache lock), before the
        # bind checks the pod: replace it (same name, new UID) and let the informer deliver it.
        if not replaced:
            cluster_api.core.delete_namespaced_pod("python-0", cluster_api.namespace)
            replaced.append(cluster_api.add_pod("python-0", runs=1)["uid"])
            # Ready too: it is created, then marked Ready, and a cycle that saw it not yet
            # Ready would write the Run Pending before binding it.
            wait_for(lambda: (lambda pod: pod is not None and pod.uid == replaced[0] and pod.ready)(
                cache.pod((cluster_api.namespace, "python-0"))), what="the new pod, Ready, in the cache")
        bind(cycle, run, planned)

    loop._bind = replace_then_bind  # type: ignore[method-assign]
    cluster_api.add_run("r")
    wait_for(lambda: cluster_api.placements() == {"r": "python-0"}, what="r placed")
    assert cluster_api.run("r")["status"]["assignment"]["podUID"] == replaced[0] != old["uid"]
    assert sample(scheduler, CONFLICTS, stage="bind") == 1
    assert hits(emulator, "r") == 1  # nothing was ever written naming the deleted pod
    assert cluster_api.bound_to_missing_pods() == [] and cluster_api.overcommit() == 0


def test_a_write_still_in_flight_when_the_fence_closes_lands_before_another_scheduler_can_lead(
        emulator: Emulator, cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    # A margin of 5 s (write timeout 2.5 s) and a renew deadline of 1 s: a write held 2 s
    # outlives the fence of a leader whose renewals fail from the moment it is sent (closed
    # 1 s after at the latest), by a second, so that a busy test thread still sees the fence
    # close while the write is held; it lands before its client's timeout.
    lease = {"lease_duration": 6, "renew_deadline": 1.0, "retry_period": 0.1}
    cluster_api.add_pod("python-0", runs=1)
    a = start_scheduler(identity="a", **lease)
    wait_for(lambda: a.leading, what="a leading")
    b = start_scheduler(identity="b", **lease)
    renewals_fail = threading.Event()
    a_status_write = status_write("x")

    def the_write_arrives(method: str, path: str) -> bool:
        if a_status_write(method, path):
            renewals_fail.set()
            return True
        return False

    lease_puts: Match = lambda method, path: renewals_fail.is_set() and lease_write("PUT")(method, path)
    emulator.answer(500, lease_puts, count=200)
    emulator.delay(2.0, the_write_arrives)
    cluster_api.add_run("x")
    assert a.elector is not None
    wait_for(lambda: not a.elector.is_leader(), what="a's fence closed")
    assert emulator.faults.finished["delay"] == 0  # ... while its write was still held
    wait_for(lambda: not a.leading, what="a's term over, its cycle in flight finished")
    a.kill()  # a crash: a would otherwise take its own lease back, which is fine but not this test
    cluster_api.add_run("y")
    renewals_fail.clear()
    wait_for(lambda: b.leading, what="b leading", timeout=30)
    wait_for(lambda: cluster_api.pending_message("y"), what="y Pending under b")
    assert cluster_api.placements() == {"x": "python-0"}
    assert cluster_api.overcommit() == 0
    assert hits(emulator, "x") == 1 and emulator.faults.finished["delay"] == 1


def test_throttled_lease_renewals_are_backed_off_visibly_and_never_re_sent_by_the_client(
        emulator: Emulator, cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    cluster_api.add_pod("python-0", runs=1)
    scheduler = start_scheduler(lease_duration=6, renew_deadline=4.0, retry_period=0.2)
    wait_for(lambda: scheduler.leading, what="leading")
    assert scheduler.elector is not None
    emulator.throttle(lease_write("PUT"), count=2, retry_after=1)
    emulator.throttle(status_write("r"), retry_after=1)
    cluster_api.add_run("r")
    wait_for(lambda: emulator.faults.pending == 0, what="every 429 answered")
    wait_for(lambda: cluster_api.placements() == {"r": "python-0"}, what="r placed after its 429")
    wait_for(lambda: scheduler.throttling.counts["lease_write"] == 2, what="the 429s counted")
    assert sample(scheduler, THROTTLED, call="lease_write") == 2
    assert sample(scheduler, THROTTLED, call="status_write") == 1
    assert scheduler.leading and scheduler.elector.terms == 1  # backed off within the renew deadline
    # The elector's own backoff honoured Retry-After: no Lease write came sooner after a 429
    # (a lower bound only, which a slow machine cannot break).
    wait_for(lambda: emulator.faults.arrivals_of(lease_write("PUT"))[-1][1] is None, what="a renewal after the 429s")
    puts = emulator.faults.arrivals_of(lease_write("PUT"))
    throttled = [i for i, (_, kind) in enumerate(puts) if kind == "throttle"]
    assert len(throttled) == 2 and all(puts[i + 1][0] - puts[i][0] >= 1.0 for i in throttled)
    assert hits(emulator, "r") == 2 == scheduler.binder.writes + scheduler.binder.failures
    scheduler.stop()
    assert emulator.hits_of(lambda method, path: "/leases" in path) == scheduler.elector.requests
    assert cluster_api.overcommit() == 0
