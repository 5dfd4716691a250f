"""The server-side fence for stale terms on the real API server (SPEC §3.6; issue 24 item 5).

tests/integration/test_term_fence.py shows the emulator refusing a bind from an old
leadership term; here the release's kube-apiserver runs the policy itself
(``deploy/base/scheduler-fence-policy.yaml`` and its binding, applied with the dev
overlay, the Lease ``kruntimes-system/kruntimes-scheduler`` as its param, and runtimed's
policies beside it). The late write is reproduced as it happens in the field: the old
leader's write, sent with the scheduler's own ServiceAccount token, is held in a proxy
on its way, the Lease changes hands, the new leader places another Run on the same
one-slot pod, then the held write lands. The server refuses it; runtimed's write that
keeps the new assignment passes. Each verdict of the emulator (`tests.emulator.admission.refusal`,
the policy's CEL as the emulator evaluates it) is compared with the real server's, case by case.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import pytest
from kubernetes import client

from kruntimes.api import ingest
from kruntimes.cluster import errors
from kruntimes.cluster.binder.kube import FENCE_POLICY, KubernetesBinder
from kruntimes.scheduler import status as st
from tests.emulator import admission
from tests.integration.cluster import Cluster, wait_for
from tests.realkube import fixtures, identities
from tests.realkube.controlplane import ControlPlane
from tests.realkube.holding_proxy import HoldingProxy

NOW = datetime(2026, 12, 5, tzinfo=timezone.utc)
LEASE_NAMESPACE, LEASE = identities.SCHEDULER  # the deployed binding's paramRef


@pytest.fixture
def lease(deployed: ControlPlane) -> Iterator[client.CoordinationV1Api]:
    """The scheduler's Lease in term 1, held by scheduler-a; deleted afterwards (no Lease: the fence allows all)."""
    with identities.admin(deployed) as api:
        leases = client.CoordinationV1Api(api)
        leases.create_namespaced_lease(LEASE_NAMESPACE, {"metadata": {"name": LEASE}, "spec": {
            "holderIdentity": "scheduler-a", "leaseDurationSeconds": 15, "leaseTransitions": 1}})
        try:
            yield leases
        finally:
            leases.delete_namespaced_lease(LEASE, LEASE_NAMESPACE)


def bind(binder: KubernetesBinder, team: Cluster, run: str, pod: Any, term: int | None) -> BaseException | None:
    """The scheduler's status write placing ``run`` on ``pod`` in ``term``; the error it met, if any."""
    info = ingest.run_info(team.run(run))
    try:
        binder.update_status(info, st.scheduled_status(None, pod.metadata.name, pod.metadata.uid, NOW, term))
    except Exception as exc:  # noqa: BLE001 - the outcome is what the test looks at
        return exc
    return None


def assignment(team: Cluster, run: str) -> dict[str, Any] | None:
    return (team.run(run).get("status") or {}).get("assignment")


def test_a_bind_held_on_its_way_from_an_old_term_is_refused_after_the_new_leader_filled_the_pod(
        deployed: ControlPlane, lease: client.CoordinationV1Api, team: Cluster, tmp_path: Path) -> None:
    pod = fixtures.runtime_pod(team)
    team.add_run("a")
    team.add_run("b")
    proxy = HoldingProxy(deployed.port).start()
    try:
        old_api = identities.component(deployed, tmp_path, "old-leader", *identities.SCHEDULER, server=proxy.server)
        new_api = identities.component(deployed, tmp_path, "new-leader", *identities.SCHEDULER)
        with old_api, new_api:
            old_leader, new_leader = KubernetesBinder(old_api), KubernetesBinder(new_api)
            # The old leader's connection is open (TLS included) before its write is held.
            client.CustomObjectsApi(old_api).get_namespaced_custom_object(
                "kruntimes.io", "v1alpha1", team.namespace, "runs", "a")
            # Term 1: scheduler-a binds a to the one-slot pod; the write is held on the way.
            proxy.hold()
            late: list[BaseException | None] = []
            sender = threading.Thread(target=lambda: late.append(bind(old_leader, team, "a", pod, term=1)))
            sender.start()
            assert proxy.wait_held(30), "the old leader's write never reached the proxy"
            # Term 2: scheduler-b takes the Lease and binds b to the same pod.
            lease.patch_namespaced_lease(LEASE, LEASE_NAMESPACE, {"spec": {
                "holderIdentity": "scheduler-b", "leaseTransitions": 2}})
            assert bind(new_leader, team, "b", pod, term=2) is None
            # Then term 1's write lands: the server refuses it, by the fence.
            proxy.release()
            sender.join(60)
    finally:
        proxy.stop()
    assert isinstance(late[0], errors.BindConflict), late
    assert "earlier leadership term" in str(late[0]) and f"'{FENCE_POLICY}'" in str(late[0])
    assert assignment(team, "a") is None
    assert assignment(team, "b") == {"podName": pod.metadata.name, "podUID": pod.metadata.uid, "term": 2}

    # runtimed (its own pod's bound token) claims b: a write that keeps the assignment passes.
    with identities.component(deployed, tmp_path, "runtimed", team.namespace, identities.RUNTIMED, pod=pod) as runtimed:
        current = team.run("b")
        status = {**current["status"], "phase": "Running"}
        client.CustomObjectsApi(runtimed).replace_namespaced_custom_object_status(
            "kruntimes.io", "v1alpha1", team.namespace, "runs", "b", {**current, "status": status})
    assert team.run("b")["status"]["phase"] == "Running"
    assert assignment(team, "b")["term"] == 2


# The emulator's table (tests/integration/test_term_fence.py) and more: the Run was placed
# in term 1, the Lease is now in term 2, and the scheduler writes this status.
WRITES = {
    "keeping the old term's assignment (runtimed's Running) passes":
        {"phase": "Running", "assignment": {"podName": "{pod}", "podUID": "{uid}", "term": 1}},
    "the current term's assignment passes":
        {"phase": "Scheduled", "assignment": {"podName": "{pod}", "podUID": "{uid}", "term": 2}},
    "another term's assignment is refused":
        {"phase": "Scheduled", "assignment": {"podName": "{pod}", "podUID": "{uid}", "term": 3}},
    "the old term re-sending its own assignment to another pod is refused":
        {"phase": "Scheduled", "assignment": {"podName": "other", "podUID": "{uid}-x", "term": 1}},
    "an assignment without a term is refused":
        {"phase": "Scheduled", "assignment": {"podName": "{pod}", "podUID": "{uid}"}},
    "a status without an assignment passes": {"phase": "Pending"},
}


@pytest.mark.parametrize("case", WRITES)
def test_the_real_server_and_the_emulator_judge_a_status_write_alike(
        deployed: ControlPlane, lease: client.CoordinationV1Api, team: Cluster, tmp_path: Path, case: str) -> None:
    pod = fixtures.runtime_pod(team)
    team.add_run("a")
    with identities.component(deployed, tmp_path, "scheduler", *identities.SCHEDULER) as scheduler:
        binder = KubernetesBinder(scheduler)
        assert bind(binder, team, "a", pod, term=1) is None
        lease.patch_namespaced_lease(LEASE, LEASE_NAMESPACE, {"spec": {"leaseTransitions": 2}})
        old = team.run("a")
        status = _filled(WRITES[case], pod)
        try:
            binder.update_status(ingest.run_info(old), status)
            refused = False
        except errors.BindConflict as exc:
            assert f"'{FENCE_POLICY}'" in str(exc)
            refused = True
    current = lease.read_namespaced_lease(LEASE, LEASE_NAMESPACE)
    params = {"spec": {"leaseTransitions": current.spec.lease_transitions}}
    emulator_refuses = admission.refusal({**old, "status": status}, old, params) is not None
    assert refused is emulator_refuses
    assert refused is case.endswith("refused")


def _filled(status: dict[str, Any], pod: Any) -> dict[str, Any]:
    if "assignment" not in status:
        return dict(status)
    filled = {k: v.replace("{pod}", pod.metadata.name).replace("{uid}", pod.metadata.uid) if isinstance(v, str) else v
              for k, v in status["assignment"].items()}
    return {**status, "assignment": filled}


def test_the_fence_lets_every_write_through_while_the_lease_does_not_exist(
        deployed: ControlPlane, team: Cluster, tmp_path: Path) -> None:
    pod = fixtures.runtime_pod(team)
    team.add_run("a")
    with identities.component(deployed, tmp_path, "scheduler", *identities.SCHEDULER) as scheduler:
        assert bind(KubernetesBinder(scheduler), team, "a", pod, term=7) is None
    wait_for(lambda: assignment(team, "a"), what="a placed")
