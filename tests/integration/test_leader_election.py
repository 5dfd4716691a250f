"""Leader election (SPEC §3.6): one planner; the standby writes nothing; failover with an empty assumed cache.

The first three tests hold on a real cluster too; the last one injects faults.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import pytest
from kubernetes import client

from kruntimes.cluster import errors
from kruntimes.cluster.leader import LeaderElector
from kruntimes.cluster.runner import ClusterScheduler
from kruntimes.cluster.settings import LeaseSettings
from kruntimes.journal.store.backends import Journal
from kruntimes.scheduler.projection import RunInfo
from kruntimes.scheduler.writes import ReadDone, WriteDone
from tests.emulator.server import Emulator
from tests.integration.cluster import LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD, Cluster, wait_for
from tests.integration.test_informers import block_reads
from tests.journal import factories

WAKEUPS = "kruntimes_scheduler_pending_run_wakeups_total"


def pending_gauge(scheduler: ClusterScheduler) -> dict[str, float | None]:
    return {state: scheduler.registry.get_sample_value("kruntimes_scheduler_pending_runs", {"state": state})
            for state in ("queued", "unschedulable")}


def leader_records(url: str) -> list[dict[str, Any]]:
    journal = Journal.open(url)
    try:
        return [dict(r.payload, lsn=r.lsn, incarnation=r.incarnation)
                for r in factories.in_epoch_order(journal, kinds={"leader"})]
    finally:
        journal.close()


def lease_holder(cluster: Cluster) -> str | None:
    lease = client.CoordinationV1Api(cluster.core.api_client).read_namespaced_lease("kruntimes-scheduler",
                                                                                   cluster.namespace)
    return lease.spec.holder_identity


def lease_time(value: datetime | str) -> datetime:
    """A Lease MicroTime, as the client model (datetime) or the elector (string) holds it."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(value.replace("Z", "+00:00"))


def overcommitted(cluster: Cluster, capacity: dict[str, int]) -> dict[str, int]:
    """Pods holding more active Runs than their `runs` capacity."""
    load: dict[str, int] = {}
    for pod in cluster.placements().values():
        load[pod] = load.get(pod, 0) + 1
    return {pod: n for pod, n in load.items() if n > capacity[pod]}


def test_two_schedulers_elect_one_leader_and_the_standby_writes_nothing(
        cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    for i in range(2):
        cluster_api.add_pod(f"python-{i}", runs=2)
    a, b = start_scheduler(identity="a"), start_scheduler(identity="b")
    leader = wait_for(lambda: a if a.leading else b if b.leading else None, what="a leader")
    standby = b if leader is a else a
    names = [f"r{i}" for i in range(6)]
    for name in names:
        cluster_api.add_run(name)
    wait_for(lambda: len(cluster_api.placements()) == 4 and all(
        cluster_api.pending_message(n) for n in names if n not in cluster_api.placements()), what="4 placed, 2 Pending")
    cluster_api.finish(next(iter(cluster_api.placements())))  # a capacity release: wakes a Run, on the leader only
    wait_for(lambda: len(cluster_api.placements()) == 4 and len(cluster_api.phases()) == 6, what="one more placed")
    assert lease_holder(cluster_api) == leader.identity
    assert not standby.leading and standby.elector is not None and standby.elector.terms == 0
    # The standby consumed no keys and wrote nothing ...
    assert (standby.binder.writes, standby.binder.conflicts, standby.binder.failures, standby.binder.refused) == \
        (0, 0, 0, 0)
    assert standby.scheduler.results == {} and len(standby.scheduler.queue) == 0
    assert standby.registry.get_sample_value(WAKEUPS, {"source": "capacity_released"}) in (None, 0.0)
    assert standby.registry.get_sample_value("kruntimes_scheduler_leader") == 0.0
    assert leader.registry.get_sample_value("kruntimes_scheduler_leader") == 1.0
    # The Pending gauge too moves on the leader only: summing schedulers counts each Run once.
    wait_for(lambda: pending_gauge(leader) == {"queued": 0.0, "unschedulable": 1.0}, what="the leader's parked Run")
    assert pending_gauge(standby) == {"queued": 0.0, "unschedulable": 0.0}
    # ... but its cache is warm: every Run at the version the API holds.
    versions = {n: r["metadata"]["resourceVersion"] for n, r in cluster_api.runs().items()}
    wait_for(lambda: {r.name: r.resource_version for r in standby.cache.runs()} == versions,
             what="the standby's cache equal to the API")
    assert not standby.cache.assumed


def test_a_leader_that_stops_releases_the_lease_and_the_standby_takes_over_at_once_on_one_journal(
        cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler], tmp_path: Path) -> None:
    # A lease long enough that a's graceful stop (no renewals while it ends its term) cannot
    # outlast it even on a loaded machine: whatever b takes over within it was released.
    lease = {"lease_duration": 10, "renew_deadline": RENEW_DEADLINE, "retry_period": RETRY_PERIOD}
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    cluster_api.add_pod("python-0", runs=4)
    a = start_scheduler(identity="a", journal_url=url, journal_spool=str(tmp_path / "a.spool"), **lease)
    wait_for(lambda: a.leading, what="a leading")
    b = start_scheduler(identity="b", journal_url=url, journal_spool=str(tmp_path / "b.spool"), **lease)
    cluster_api.add_run("first")
    wait_for(lambda: cluster_api.placements() == {"first": "python-0"}, what="first placed by a")
    assert b.wait_synced(30)
    stopped = time.monotonic()
    a.stop()
    assert b.elector is not None
    wait_for(lambda: b.elector.terms == 1, timeout=30, what="b holding the lease")
    # a renewed last at most a renew deadline before `stopped`; taken over by expiry, b
    # would hold the lease a lease duration after that at the earliest.
    assert time.monotonic() - stopped < lease["lease_duration"] - RENEW_DEADLINE  # released, not expired
    wait_for(lambda: b.leading, timeout=30, what="b's term started (relist, journal child)")
    assert lease_holder(cluster_api) == "b"
    cluster_api.add_run("second")
    wait_for(lambda: cluster_api.placements() == {"first": "python-0", "second": "python-0"},
             what="second placed by b")
    # The binder counts a write once the API's answer is back, which can be after the
    # placement is visible to this test.
    wait_for(lambda: b.binder.writes == 1, what="b's write counted")
    assert a.binder.writes == 1
    b.stop()
    assert b.binder.writes == 1
    # One journal, two incarnations one after the other, LSNs continuing across the handover.
    records = leader_records(url)
    assert [(r["event"], r["identity"]) for r in records] == [("acquired", "a"), ("lost", "a"),
                                                             ("acquired", "b"), ("lost", "b")]
    assert records[1]["reason"] == "shutdown" and records[0]["incarnation"] != records[2]["incarnation"]
    journal = Journal.open(url)
    try:
        lsns = [r.lsn for r in factories.in_epoch_order(journal)]
        kinds = [r.kind for r in factories.in_epoch_order(journal)]
        epochs = journal.epochs()
    finally:
        journal.close()
    assert lsns == list(range(1, len(lsns) + 1))
    starts = [i for i, kind in enumerate(kinds) if kind == "incarnation"]
    assert len(starts) == 2 and all(kinds[i + 1:i + 3] == ["checkpoint", "leader"] for i in starts)
    # Each term is an epoch (SPEC §5), closed by its end record right after `leader` {lost}.
    assert [kinds[i - 2:i] for i in starts[1:] + [len(kinds)]] == [["leader", "end"]] * 2
    assert [(e.end_lsn, e.end_reason) for e in epochs.values()] == [(starts[1], "shutdown"), (len(kinds), "shutdown")]


def test_a_killed_leader_is_replaced_after_its_lease_expires_and_nothing_is_overcommitted(
        cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    capacity = {f"python-{i}": 2 for i in range(3)}
    for name, runs in capacity.items():
        cluster_api.add_pod(name, runs=runs)
    a = start_scheduler(identity="a", bind_concurrency=8)
    wait_for(lambda: a.leading, what="a leading")
    b = start_scheduler(identity="b", bind_concurrency=8)
    assert b.wait_synced(30)
    for i in range(4):
        cluster_api.add_run(f"early-{i}")
    wait_for(lambda: len(cluster_api.placements()) == 4, what="4 placed by a")
    wait_for(lambda: a.binder.writes == 4, what="a's answers back from its binder")
    a.kill()  # no release, no goodbye: the lease still names a
    assert a.elector is not None and a.elector._lease is not None
    renewed = lease_time(a.elector._lease["spec"]["renewTime"])  # a's last renewal, as the API took it
    for i in range(4):
        cluster_api.add_run(f"late-{i}")
    assert b.elector is not None
    wait_for(lambda: b.elector.terms == 1, timeout=30, what="b holding the lease")
    lease = client.CoordinationV1Api(cluster_api.core.api_client).read_namespaced_lease("kruntimes-scheduler",
                                                                                       cluster_api.namespace)
    assert lease.spec.holder_identity == "b"
    # b waited for the lease to expire: a lease duration after it saw a's last renewal,
    # which it cannot have seen before a wrote it. Both times are the writers' own clock
    # readings in the Lease, so neither a's kill nor b's term start is counted.
    took_over = lease_time(lease.spec.acquire_time) - renewed
    assert timedelta(seconds=LEASE_DURATION) <= took_over <= timedelta(seconds=LEASE_DURATION + 2)
    wait_for(lambda: b.leading, timeout=30, what="b's term started (relist, journal child)")
    assert lease_holder(cluster_api) == "b"
    wait_for(lambda: len(cluster_api.placements()) == 6 and all(
        cluster_api.pending_message(f"late-{i}") for i in range(4) if f"late-{i}" not in cluster_api.placements()),
        what="6 placed, 2 Pending")
    assert overcommitted(cluster_api, capacity) == {}
    wait_for(lambda: b.binder.writes == 2 + 2, what="b's writes counted")  # two placements, two Pending messages
    assert a.binder.writes == 4


class BlindBind:
    """Wraps the scheduler's sender: just before its first bind, the scheduler's watches go
    blind, so the assumption for that Run stays unconfirmed."""

    def __init__(self, inner: Any, emulator: Emulator, blind: threading.Event) -> None:
        self.inner, self.emulator, self.blind = inner, emulator, blind
        self.done = False

    def write(self, run: RunInfo, status: dict[str, Any], deadline: float, done: WriteDone) -> None:
        if status.get("phase") == "Scheduled" and not self.done:
            self.done = True
            self.blind.set()
            self.emulator.drop_watches(abrupt=True)
        self.inner.write(run, status, deadline, done)

    def read(self, run: RunInfo, done: ReadDone) -> None:
        self.inner.read(run, done)

    def wait_for_room(self, timeout: float) -> bool:
        return self.inner.wait_for_room(timeout)


def test_a_leader_that_cannot_renew_stops_within_the_renew_deadline_and_a_new_term_starts_empty(
        emulator: Emulator, cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler],
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    cluster_api.add_pod("python-0", runs=2)
    a = start_scheduler(identity="a", journal_url=url, journal_spool=str(tmp_path / "a.spool"))
    wait_for(lambda: a.leading, what="a leading")
    blind = block_reads(emulator)
    a.scheduler.sender = BlindBind(a.scheduler.sender, emulator, blind)
    cluster_api.add_run("r0")
    wait_for(lambda: blind.is_set() and len(a.cache.assumed) == 1, what="r0 bound, its bind unobserved")
    lease_blocked = threading.Event()
    emulator.fail_next(10_000, code=503, when=lambda method, path: lease_blocked.is_set() and "/leases" in path)
    lease_blocked.set()
    blocked_at = time.monotonic()
    wait_for(lambda: not a.leading, timeout=RENEW_DEADLINE + 2, what="a stepping down")
    # The lease was last renewed before the block, so the workers stopped within the renew deadline
    # (plus the time to join them), long before another candidate could take the lease over.
    assert time.monotonic() - blocked_at < RENEW_DEADLINE + 0.5 < LEASE_DURATION
    assert not a.elector.is_leader() and not a.cache.assumed
    r0 = a.cache.run((cluster_api.namespace, "r0"))
    assert r0 is not None and r0.phase == "Pending"  # still blind: the bind is not observed
    with pytest.raises(errors.NotLeader):  # the fence: a deposed leader writes nothing
        a.binder.update_status(r0, {"phase": "Pending"})
    lease_blocked.clear()
    blind.clear()
    wait_for(lambda: a.leading, timeout=30, what="a leading again")  # its own lease: no expiry wait, a new writer
    # The new term relisted: r0 counts as bound (actual usage), not as an assumption.
    assert a.cache.usage(cluster_api.namespace, "python-0") == {"runs": 1} and not a.cache.assumed
    cluster_api.add_run("r1")
    cluster_api.add_run("r2")
    wait_for(lambda: len(cluster_api.placements()) == 2 and (cluster_api.pending_message("r1")
                                                             or cluster_api.pending_message("r2")),
             what="one more placed, one Pending")
    a.stop()
    records = leader_records(url)
    assert [r["event"] for r in records] == ["acquired", "lost", "acquired", "lost"]
    assert "renew deadline" in records[1]["reason"] and records[1]["assumptions_dropped"] == 1
    assert records[3]["reason"] == "shutdown"


def test_a_leader_whose_term_cannot_start_gives_the_lease_up_to_one_that_can(
        cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler], tmp_path: Path) -> None:
    cluster_api.add_pod("python-0")
    # A database that is away does not stop a term (its records wait in the spool); a spool
    # that cannot be opened does: records would have nowhere durable to go.
    (tmp_path / "a-file").write_text("")
    a = start_scheduler(identity="a", journal_url=f"sqlite:///{tmp_path / 'journal.db'}",
                        journal_spool=str(tmp_path / "a-file" / "a.spool"))
    wait_for(lambda: a.elector is not None and a.elector.terms >= 1, what="a winning the lease once")
    b = start_scheduler(identity="b")
    wait_for(lambda: b.leading, timeout=LEASE_DURATION, what="b leading")  # a released it: no expiry wait
    cluster_api.add_run("r")
    wait_for(lambda: cluster_api.placements() == {"r": "python-0"}, what="r placed by b")
    assert not a.leading and a.binder.writes == 0 and lease_holder(cluster_api) == "b"


def test_a_candidate_times_a_lease_version_from_when_its_read_returned_not_from_when_it_was_sent(
        emulator: Emulator, kube_namespace: str) -> None:
    # A slow read that started before the holder renewed still returns the renewal. Timed
    # from the read's start, the candidate would judge the lease expired up to one read's
    # duration before the holder's protection ends, and two schedulers would lead.
    api = emulator.api_client()
    leases = client.CoordinationV1Api(api)
    leases.create_namespaced_lease(kube_namespace, {"metadata": {"name": "l"}, "spec": {
        "holderIdentity": "a", "leaseDurationSeconds": 10}})
    now = [0.0]
    candidate = LeaderElector(api, LeaseSettings(name="l", namespace=kube_namespace, identity="b", duration=10,
                                                 renew_deadline=6.0, retry_period=1.0),
                              on_started=lambda lease: None, on_stopped=lambda reason: None, clock=lambda: now[0])
    read_arrived, renewed = threading.Event(), threading.Event()

    def renew_while_the_read_is_held() -> None:
        read_arrived.wait(10)
        lease = leases.read_namespaced_lease("l", kube_namespace)
        lease.spec.renew_time = datetime.now(timezone.utc)
        leases.replace_namespaced_lease("l", kube_namespace, lease)  # a new version
        now[0] = 5.0  # the read has taken 5 s (on the candidate's clock) by the time it returns
        renewed.set()

    def lease_read(method: str, path: str) -> bool:
        if method == "GET" and path.endswith("/leases/l") and not read_arrived.is_set():
            read_arrived.set()
            return True
        return False

    emulator.delay(1.0, lease_read)
    renewer = threading.Thread(target=renew_while_the_read_is_held)
    renewer.start()
    assert not candidate._try_acquire_or_renew(1.5)  # held by a, first seen now
    renewer.join()
    assert renewed.is_set()
    now[0] = 10.5  # 10 s after the read was sent, 5.5 s after the renewal was seen
    assert not candidate._try_acquire_or_renew(1.0), "took a lease its holder renewed 5.5 s ago"
    now[0] = 15.5
    assert candidate._try_acquire_or_renew(1.0)
