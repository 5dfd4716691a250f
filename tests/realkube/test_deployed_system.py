"""The whole system on the real API server, each component with only what ``deploy/`` grants it (issue 24 item 4).

The Runtime controller and the scheduler run with tokens of their ServiceAccounts in
``kruntimes-system`` (each electing itself on its own Lease there, as deployed), every
runtimed with a token of ``kruntimes-runtimed`` bound to its own pod; the test plays
kubelet (Ready conditions) with the admin credential, and nothing else. The RBAC,
runtimed's and the controller's policies and the scheduler's term fence (its Lease is
the one the scheduler takes here) all judge every write. A Runtime's pods are made,
Runs are placed in the scheduler's term, claimed, executed and ended.
"""

from __future__ import annotations

import functools
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
from kubernetes import client

from kruntimes.api import models
from kruntimes.cli import kube_args
from kruntimes.cluster.runner import ClusterScheduler
from kruntimes.cluster.settings import LeaseSettings
from kruntimes.controller.runner import ControllerRunner
from kruntimes.runtimed.agent import Agent, Settings
from tests.integration import cluster
from tests.integration.cluster import Cluster, wait_for
from tests.integration.test_controller_runner import TEMPLATE, pods
from tests.realkube import identities
from tests.realkube.controlplane import ControlPlane

SYSTEM = identities.SYSTEM_NAMESPACE


def lease(name: str, identity: str) -> LeaseSettings:
    return LeaseSettings(name=name, namespace=SYSTEM, identity=identity, duration=cluster.LEASE_DURATION,
                         renew_deadline=cluster.RENEW_DEADLINE, retry_period=cluster.RETRY_PERIOD)


def task(code: int) -> dict[str, Any]:
    return {"task": {"args": [sys.executable, "-c", f"import sys; sys.exit({code})"]}}


@pytest.fixture
def leases(deployed: ControlPlane) -> Iterator[None]:
    """The deployed Leases are the components' to create; deleted afterwards, so other tests start without them."""
    yield
    with identities.admin(deployed) as api:
        for name in ("kruntimes-scheduler", "kruntimes-controller"):
            try:
                client.CoordinationV1Api(api).delete_namespaced_lease(name, SYSTEM)
            except client.ApiException as exc:
                assert exc.status == 404, exc


def test_a_runtime_gets_its_pods_and_its_runs_are_placed_run_and_ended_with_deployed_rbac_only(
        deployed: ControlPlane, team: Cluster, leases: None, tmp_path: Path) -> None:
    template = {**TEMPLATE, "spec": {**TEMPLATE["spec"], "serviceAccountName": identities.RUNTIMED}}
    team.custom.create_namespaced_custom_object(models.GROUP, models.VERSION, team.namespace, "runtimes", {
        "apiVersion": f"{models.GROUP}/{models.VERSION}", "kind": "Runtime", "metadata": {"name": "python"},
        "spec": {"replicas": 2, "template": template, "capacity": {"resources": {"runs": "1"}}}})
    agents: list[tuple[Agent, threading.Thread]] = []
    scheduler_config = identities.kubeconfig(deployed, tmp_path / "scheduler.kubeconfig",
                                             identities.token(deployed, *identities.SCHEDULER))
    controller_api = identities.component(deployed, tmp_path, "controller", *identities.CONTROLLER)
    scheduler_api = identities.client(scheduler_config)
    controller = ControllerRunner(controller_api, team.namespace, resync_period=0.5,
                                  lease=lease("kruntimes-controller", "controller-test")).start()
    scheduler: ClusterScheduler | None = None
    try:
        # The controller (its own token) makes the pods; the test plays kubelet.
        runtime_pods = wait_for(lambda: (ps := pods(team)) and len(ps) == 2 and ps, timeout=60,
                                what="two runtime pods")
        for pod in runtime_pods:
            assert pod.spec.service_account_name == identities.RUNTIMED
            team.set_ready(pod.metadata.name, True)
            api = identities.component(deployed, tmp_path, pod.metadata.name, team.namespace, identities.RUNTIMED,
                                       pod=pod)
            agent = Agent(api, Settings(pod_name=pod.metadata.name, pod_namespace=team.namespace,
                                        pod_uid=pod.metadata.uid, work_dir=tmp_path / pod.metadata.name,
                                        heartbeat_period=0.2))
            thread = threading.Thread(target=agent.run, name=f"runtimed-{pod.metadata.name}", daemon=True)
            thread.start()
            agents.append((agent, thread))
        scheduler = ClusterScheduler(scheduler_api, cluster.settings(team.namespace, lease=lease(
            "kruntimes-scheduler", "scheduler-test")),
            configuration_source=functools.partial(kube_args.load_configuration, str(scheduler_config), None))
        scheduler.start()
        for name, code in (("ok-1", 0), ("ok-2", 0), ("ok-3", 0), ("fails", 3)):
            team.add_run(name, mode=task(code))
        wanted = {"ok-1": "Succeeded", "ok-2": "Succeeded", "ok-3": "Succeeded", "fails": "Failed"}
        wait_for(lambda: team.phases() == wanted, timeout=90, what=f"phases {wanted}")
    finally:
        for agent, _ in agents:
            agent.stop()
        for _, thread in agents:
            thread.join(15)
        if scheduler is not None:
            scheduler.stop()
        controller.stop()
        controller_api.close()
    term = client.CoordinationV1Api(team.core.api_client).read_namespaced_lease("kruntimes-scheduler", SYSTEM)
    runs = team.runs().values()
    assert {r["status"]["assignment"]["term"] for r in runs} == {term.spec.lease_transitions or 0}
    assert {r["status"]["assignment"]["podUID"] for r in runs} <= {p.metadata.uid for p in runtime_pods}
    heartbeats = [(p.metadata.annotations or {}).get(models.HEARTBEAT_ANNOTATION) for p in pods(team)]
    assert all(heartbeats), heartbeats  # each runtimed renewed its own pod's
    # Each component's Events went through its RBAC and (runtimed's) its policy: none refused.
    assert [a.events.failed for a, _ in agents] == [0] * len(agents) and controller.events.failed == 0
    told = client.EventsV1Api(team.core.api_client).list_namespaced_event(team.namespace).items
    by_run: dict[str, list[str]] = {}
    for e in sorted(told, key=lambda e: e.event_time):
        if e.regarding.kind == "Run" and e.reporting_controller == "kruntimes.io/runtimed":
            by_run.setdefault(e.regarding.name, []).append(e.reason)
            assert e.reporting_instance == team.run(e.regarding.name)["status"]["assignment"]["podName"]
    assert by_run == {"ok-1": ["Admitted", "Started", "Completed"], "ok-2": ["Admitted", "Started", "Completed"],
                      "ok-3": ["Admitted", "Started", "Completed"], "fails": ["Admitted", "Started", "Failed"]}
    created = [e for e in told if e.regarding.kind == "Runtime" and e.reason == "SuccessfulCreate"]
    assert len(created) == 2 and {e.reporting_controller for e in created} == {"kruntimes.io/runtime-controller"}
