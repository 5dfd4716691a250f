"""Each component with its own identity on the real API server (SPEC §4.1, §4.2; issue 24 item 4).

The scheduler and the Runtime controller use tokens of their deployed ServiceAccounts,
runtimed a token of ``kruntimes-runtimed`` bound to its own pod (TokenRequest), never
the admin credential, against the RBAC and admission policies of ``deploy/`` applied
with the dev overlay. The server refuses what the SPEC forbids: runtimed writing
another pod's Run, another pod's annotations, its own capacity, an assignment, a
Runtime; the controller placing a Run; the scheduler writing a pod. And with those
tokens the three do their normal work: a Runtime's pods made, a Run placed, run and
ended.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import pytest
from kubernetes import client
from kubernetes.client import ApiClient, ApiException

from kruntimes.api import models
from kruntimes.scheduler import status as st
from tests.integration.cluster import Cluster
from tests.integration.test_controller_runner import TEMPLATE
from tests.realkube import fixtures, identities
from tests.realkube.controlplane import ControlPlane

NOW = datetime(2026, 12, 5, tzinfo=timezone.utc)
G, V = models.GROUP, models.VERSION


def refusal(call: Callable[[], Any]) -> str:
    """The server's message for ``call``, which must be refused: by RBAC or a policy whose reason is
    Forbidden (403), or by a policy that gives no reason (422 Invalid, the API server's default)."""
    with pytest.raises(ApiException) as refused:
        call()
    assert refused.value.status in (403, 422), refused.value
    return str(refused.value.body)


def assign(team: Cluster, run: str, pod: Any, term: int = 0) -> dict[str, Any]:
    """The scheduler's part, played by the admin: ``run`` Scheduled on ``pod``."""
    current = team.run(run)
    status = st.scheduled_status(None, pod.metadata.name, pod.metadata.uid, NOW, term)
    return dict(team.custom.replace_namespaced_custom_object_status(G, V, team.namespace, "runs", run,
                                                                    {**current, "status": status}))


def write_status(api: ApiClient, team: Cluster, run: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    current = team.run(run)
    return client.CustomObjectsApi(api).replace_namespaced_custom_object_status(
        G, V, team.namespace, "runs", run, {**current, "status": change(dict(current.get("status") or {}))})


def heartbeat(api: ApiClient, team: Cluster, pod: str, **extra: str) -> Any:
    annotations = {models.HEARTBEAT_ANNOTATION: "2026-12-05T00:00:00Z", **extra}
    return client.CoreV1Api(api).patch_namespaced_pod(pod, team.namespace, {"metadata": {"annotations": annotations}})


def test_each_component_is_its_own_service_account_and_runtimed_carries_its_pod(
        deployed: ControlPlane, team: Cluster, tmp_path: Path) -> None:
    pod = fixtures.runtime_pod(team)
    for (namespace, account), pod_bound in ((identities.SCHEDULER, None), (identities.CONTROLLER, None),
                                            ((team.namespace, identities.RUNTIMED), pod)):
        with identities.component(deployed, tmp_path, account, namespace, account, pod=pod_bound) as api:
            user = identities.whoami(api)
        assert user["username"] == f"system:serviceaccount:{namespace}:{account}"
        assert "system:masters" not in user["groups"]
        if pod_bound is not None:
            assert user["extra"]["authentication.kubernetes.io/pod-name"] == [pod.metadata.name]
            assert user["extra"]["authentication.kubernetes.io/pod-uid"] == [pod.metadata.uid]


def test_runtimed_writes_its_own_runs_and_heartbeat_and_the_server_refuses_the_rest(
        deployed: ControlPlane, team: Cluster, tmp_path: Path) -> None:
    mine, other = fixtures.runtime_pod(team, "python-0"), fixtures.runtime_pod(team, "python-1")
    for run, pod in (("a", mine), ("b", other), ("c", mine)):
        team.add_run(run)
        assign(team, run, pod)
    with identities.component(deployed, tmp_path, "runtimed", team.namespace, identities.RUNTIMED,
                              pod=mine) as runtimed:
        # Its normal work: claim its Run, renew its heartbeat.
        write_status(runtimed, team, "a", lambda s: {**s, "phase": "Running"})
        heartbeat(runtimed, team, mine.metadata.name)
        # Another pod's Run.
        assert "assigned to its own pod only" in refusal(
            lambda: write_status(runtimed, team, "b", lambda s: {**s, "phase": "Running"}))
        # Its own Run moved elsewhere (the assignment is the scheduler's).
        assert "keeps a Run's assignment" in refusal(lambda: write_status(
            runtimed, team, "c", lambda s: {**s, "assignment": {**s["assignment"], "podName": "python-1",
                                                                 "podUID": other.metadata.uid}}))
        # Another pod's annotations, and its own capacity.
        assert "its own pod only" in refusal(lambda: heartbeat(runtimed, team, other.metadata.name))
        assert "no annotation of its pod but" in refusal(
            lambda: heartbeat(runtimed, team, mine.metadata.name, **{models.CAPACITY_ANNOTATION: '{"runs":"99"}'}))
        # A Runtime: RBAC grants runtimed nothing on Runtimes.
        custom = client.CustomObjectsApi(runtimed)
        runtime = {"apiVersion": f"{G}/{V}", "kind": "Runtime", "metadata": {"name": "mine"},
                   "spec": {"replicas": 1, "template": TEMPLATE, "capacity": {"resources": {"runs": "9"}}}}
        assert "cannot create resource \\\"runtimes\\\"" in refusal(
            lambda: custom.create_namespaced_custom_object(G, V, team.namespace, "runtimes", runtime))
    assert team.run("a")["status"]["phase"] == "Running"
    assert team.run("b")["status"]["phase"] == "Scheduled"
    assert team.run("c")["status"]["assignment"]["podName"] == "python-0"
    pods = {p.metadata.name: p.metadata.annotations for p in team.core.list_namespaced_pod(team.namespace).items}
    assert pods["python-0"][models.CAPACITY_ANNOTATION] == '{"runs":"1"}'
    assert models.HEARTBEAT_ANNOTATION not in pods["python-1"]


def test_runtimed_publishes_its_own_pod_s_inventory_only_where_its_runtime_makes_it_the_publisher(
        deployed: ControlPlane, team: Cluster, tmp_path: Path) -> None:
    # SPEC §7.1: publisher Runtimed, runtimed writes kruntimes.io/devices on its own pod; publisher
    # Controller, the inventory is the controller's and runtimed's write is refused.
    inventory = '{"devices":[{"name":"gpu-0"}],"driver":"gpu.example.com"}'
    publisher = fixtures.runtime_pod(team, "gpu-0", discover='{"argv":["/bin/gpus"],"driver":"gpu.example.com"}')
    projected = fixtures.runtime_pod(team, "gpu-1")
    with identities.component(deployed, tmp_path, "runtimed-0", team.namespace, identities.RUNTIMED,
                              pod=publisher) as runtimed:
        heartbeat(runtimed, team, "gpu-0", **{"kruntimes.io/devices": inventory})
        assert "its own pod only" in refusal(
            lambda: heartbeat(runtimed, team, "gpu-1", **{"kruntimes.io/devices": inventory}))
    with identities.component(deployed, tmp_path, "runtimed-1", team.namespace, identities.RUNTIMED,
                              pod=projected) as runtimed:
        assert "and kruntimes.io/devices where its Runtime's devices publisher is Runtimed" in refusal(
            lambda: heartbeat(runtimed, team, "gpu-1", **{"kruntimes.io/devices": inventory}))
    pods = {p.metadata.name: p.metadata.annotations for p in team.core.list_namespaced_pod(team.namespace).items}
    assert pods["gpu-0"]["kruntimes.io/devices"] == inventory and "kruntimes.io/devices" not in pods["gpu-1"]


def test_a_runtimed_token_not_bound_to_a_pod_writes_nothing(
        deployed: ControlPlane, team: Cluster, tmp_path: Path) -> None:
    pod = fixtures.runtime_pod(team)
    team.add_run("a")
    assign(team, "a", pod)
    with identities.component(deployed, tmp_path, "unbound", team.namespace, identities.RUNTIMED) as unbound:
        assert "bound service-account token" in refusal(
            lambda: write_status(unbound, team, "a", lambda s: {**s, "phase": "Running"}))


def test_the_controller_ends_a_run_but_the_server_refuses_it_placing_one(
        deployed: ControlPlane, team: Cluster, tmp_path: Path) -> None:
    pod = fixtures.runtime_pod(team)
    team.add_run("pending")
    team.add_run("lost")
    assign(team, "lost", pod)
    with identities.component(deployed, tmp_path, "controller", *identities.CONTROLLER) as controller:
        # Its normal work: a Run whose pod is gone ends Failed, assignment kept (RuntimePodLost).
        write_status(controller, team, "lost", lambda s: st.terminal_status(s, "Failed", "RuntimePodLost",
                                                                            "the pod is gone", NOW))
        # Placing a Run, even in the scheduler's current term, is the scheduler's alone.
        assert "kruntimes-controller-run-status" in refusal(lambda: write_status(
            controller, team, "pending", lambda s: st.scheduled_status(None, pod.metadata.name, pod.metadata.uid,
                                                                       NOW, 0)))
    assert team.run("lost")["status"]["phase"] == "Failed"
    assert "assignment" not in (team.run("pending").get("status") or {})


def test_the_scheduler_may_not_write_pods_or_runs(deployed: ControlPlane, team: Cluster, tmp_path: Path) -> None:
    pod = fixtures.runtime_pod(team)
    team.add_run("a")
    with identities.component(deployed, tmp_path, "scheduler", *identities.SCHEDULER) as scheduler:
        assert "cannot patch resource \\\"pods\\\"" in refusal(lambda: heartbeat(scheduler, team, pod.metadata.name))
        custom = client.CustomObjectsApi(scheduler)
        assert "cannot patch resource \\\"runs\\\"" in refusal(lambda: custom.patch_namespaced_custom_object(
            G, V, team.namespace, "runs", "a", {"metadata": {"labels": {"x": "y"}}}))
