"""The server-side fence for stale terms (SPEC §3.6, amended 2026-12-04; issue 24 item 5).

Found by probing: a bind sent in an old leadership term that lands after the new
leader placed another Run on the same pod over-commits at assignment. Every
assignment now carries its writer's term, and the scheduler-fence admission policy
(deploy/base/scheduler-fence-policy.yaml, enforced by the emulator) refuses one whose
term is not the scheduler Lease's current `leaseTransitions`. The late write is a
conflict to the old leader, never a second Run on a full pod.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import Callable

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from kruntimes.api import ingest
from kruntimes.cluster import errors
from kruntimes.cluster.binder.kube import KubernetesBinder
from kruntimes.cluster.runner import ClusterScheduler
from kruntimes.scheduler import status as st
from tests.emulator import faults, manifests
from tests.emulator.server import Emulator
from tests.integration.cluster import Cluster, wait_for

LEASE = "kruntimes-scheduler"
NOW = datetime(2026, 12, 4, 12, tzinfo=timezone.utc)


def assignment(cluster_api: Cluster, name: str) -> dict | None:
    return (cluster_api.run(name).get("status") or {}).get("assignment")


def test_a_bind_from_an_old_term_that_lands_after_the_new_leader_filled_the_pod_is_refused(
        emulator: Emulator, kube_api: ApiClient, cluster_api: Cluster) -> None:
    emulator.bind_fence(cluster_api.namespace, LEASE)
    leases = client.CoordinationV1Api(kube_api)
    body = manifests.lease(LEASE, "scheduler-a")
    body["spec"]["leaseTransitions"] = 1
    leases.create_namespaced_lease(cluster_api.namespace, body)
    pod = cluster_api.add_pod("python-0", runs=1)
    for name in ("a", "b"):
        cluster_api.add_run(name)
    old_leader, new_leader = KubernetesBinder(kube_api), KubernetesBinder(kube_api)
    pod_uid = pod["uid"]

    # Term 1: scheduler-a binds a to the pod; its write is held on the way.
    emulator.delay(3.0, faults.status_write("a"))
    late: list[BaseException | None] = []
    sender = threading.Thread(target=lambda: late.append(_send(old_leader, cluster_api, "a", pod_uid, term=1)))
    sender.start()
    wait_for(lambda: emulator.faults.fired["delay"] == 1, what="a's bind held by the network")
    # Term 2: scheduler-b takes the lease and binds b to the same (1-slot) pod.
    leases.patch_namespaced_lease(LEASE, cluster_api.namespace,
                                  {"spec": {"holderIdentity": "scheduler-b", "leaseTransitions": 2}})
    assert _send(new_leader, cluster_api, "b", pod_uid, term=2) is None
    # Then term 1's write lands, and the server refuses it.
    sender.join()
    assert isinstance(late[0], errors.BindConflict) and "earlier leadership term" in str(late[0])
    assert "kruntimes-scheduler-fence" in str(late[0])
    assert assignment(cluster_api, "a") is None
    assert assignment(cluster_api, "b") == {"podName": "python-0", "podUID": pod_uid, "term": 2}


def _send(binder: KubernetesBinder, cluster_api: Cluster, name: str, pod_uid: str, term: int) -> BaseException | None:
    run = ingest.run_info(cluster_api.run(name))
    try:
        binder.update_status(run, st.scheduled_status(None, "python-0", pod_uid, NOW, term))
    except Exception as exc:  # noqa: BLE001 - the outcome is what the test looks at
        return exc
    return None


@pytest.mark.parametrize("written, allowed", [
    ({"phase": "Running", "assignment": {"podName": "python-0", "podUID": "{uid}", "term": 1}}, True),
    ({"phase": "Scheduled", "assignment": {"podName": "python-0", "podUID": "{uid}", "term": 2}}, True),
    ({"phase": "Scheduled", "assignment": {"podName": "python-0", "podUID": "{uid}", "term": 3}}, False),
    ({"phase": "Scheduled", "assignment": {"podName": "python-0", "podUID": "{uid}"}}, False),
    ({"phase": "Pending"}, True),
], ids=["keeping the old term's assignment (runtimed) passes", "the current term's assignment passes",
        "another term's assignment is refused", "an assignment without a term is refused",
        "a status without an assignment passes"])
def test_the_emulator_judges_status_writes_by_the_lease_term(
        emulator: Emulator, kube_api: ApiClient, cluster_api: Cluster, written: dict, allowed: bool) -> None:
    emulator.bind_fence(cluster_api.namespace, LEASE)
    body = manifests.lease(LEASE, "scheduler-a")
    body["spec"]["leaseTransitions"] = 1
    leases = client.CoordinationV1Api(kube_api)
    leases.create_namespaced_lease(cluster_api.namespace, body)
    uid = cluster_api.add_pod("python-0", runs=1)["uid"]
    cluster_api.add_run("a")
    assert _send(KubernetesBinder(kube_api), cluster_api, "a", uid, term=1) is None  # written in term 1
    leases.patch_namespaced_lease(LEASE, cluster_api.namespace, {"spec": {"leaseTransitions": 2}})
    run = ingest.run_info(cluster_api.run("a"))
    status = {k: (dict(v, podUID=uid) if k == "assignment" else v) for k, v in written.items()}
    try:
        KubernetesBinder(kube_api).update_status(run, status)
        outcome = True
    except errors.BindConflict:
        outcome = False
    assert outcome is allowed


def test_a_leading_scheduler_binds_in_its_lease_term_and_passes_the_fence(
        emulator: Emulator, cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    emulator.bind_fence(cluster_api.namespace, LEASE)
    cluster_api.add_pod("python-0", runs=2)
    cluster_api.add_run("a")
    start_scheduler()
    wait_for(lambda: cluster_api.placements() == {"a": "python-0"}, what="a placed")
    lease = client.CoordinationV1Api(cluster_api.core.api_client).read_namespaced_lease(LEASE, cluster_api.namespace)
    assert assignment(cluster_api, "a")["term"] == (lease.spec.lease_transitions or 0)
