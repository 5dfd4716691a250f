"""The API emulator enforces deploy/'s admission policies as the real server does (SPEC §3.6, §4.1, §4.2).

Mirrors tests/realkube/test_identities.py and tests/realkube/test_runtimed_attacks.py
on the emulator: runtimed with a token bound to its pod (``emulator.identity``), the
Runtime controller with its ServiceAccount's, each write judged by the deployed CEL
(``tests.emulator.admission``) and refused with the real server's answer: 422 Invalid
for runtimed's and the controller's policies (their validations give no reason), 403
Forbidden for the scheduler's fence. And with those identities runtimed and the
controller do their normal work: a Run claimed, run and ended, the heartbeat renewed,
a Run whose pod is gone ended RuntimePodLost.
"""

from __future__ import annotations

import json
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import pytest
from kubernetes import client
from kubernetes.client import ApiClient, ApiException

from kruntimes.api import models
from kruntimes.controller.runner import ControllerRunner
from kruntimes.runtimed.agent import Agent, Settings
from kruntimes.scheduler import status as st
from tests.emulator import admission
from tests.emulator.server import Emulator
from tests.integration.cluster import Cluster, wait_for
from tests.realkube.test_identities import heartbeat, write_status
from tests.realkube.test_runtimed_attacks import ATTACKS

NOW = datetime(2026, 12, 5, tzinfo=timezone.utc)
G, V = models.GROUP, models.VERSION
RUNTIMED, CONTROLLER = "kruntimes-runtimed", "kruntimes-controller"
RUN_STATUS = "kruntimes-runtimed-run-status"


def refusal(call: Callable[[], Any], code: int = 422) -> str:
    """The emulator's message for ``call``, which must be refused with ``code``."""
    with pytest.raises(ApiException) as refused:
        call()
    assert refused.value.status == code, refused.value
    return str(refused.value.body)


def as_runtimed(emulator: Emulator, team: Cluster, pod: dict[str, Any] | None) -> ApiClient:
    """A client with a ``kruntimes-runtimed`` token of the team's namespace, bound to ``pod`` unless None."""
    bound = (pod["name"], pod["uid"]) if pod is not None else None
    return emulator.api_client(emulator.identity(admission.service_account(team.namespace, RUNTIMED, bound)))


def assign(team: Cluster, run: str, pod: dict[str, Any], phase: str = "Scheduled") -> None:
    """The scheduler's part, played by the admin: ``run`` assigned to ``pod``, then in ``phase``."""
    current = team.run(run)
    status = {**st.scheduled_status(None, pod["name"], pod["uid"], NOW, 0), "phase": phase}
    team.custom.replace_namespaced_custom_object_status(G, V, team.namespace, "runs", run,
                                                        {**current, "status": status})


def test_runtimed_writes_its_own_runs_and_heartbeat_and_the_emulator_refuses_the_rest(
        emulator: Emulator, cluster_api: Cluster) -> None:
    team = cluster_api
    mine, other = team.add_pod("python-0"), team.add_pod("python-1")
    for run, pod in (("a", mine), ("b", other), ("c", mine)):
        team.add_run(run)
        assign(team, run, pod)
    runtimed = as_runtimed(emulator, team, mine)
    write_status(runtimed, team, "a", lambda s: {**s, "phase": "Running"})
    heartbeat(runtimed, team, "python-0")
    assert "assigned to its own pod only" in refusal(
        lambda: write_status(runtimed, team, "b", lambda s: {**s, "phase": "Running"}))
    assert "keeps a Run's assignment" in refusal(lambda: write_status(
        runtimed, team, "c", lambda s: {**s, "assignment": {**s["assignment"], "podName": "python-1",
                                                             "podUID": other["uid"]}}))
    assert "its own pod only" in refusal(lambda: heartbeat(runtimed, team, "python-1"))
    assert "no annotation of its pod but" in refusal(
        lambda: heartbeat(runtimed, team, "python-0", **{models.CAPACITY_ANNOTATION: '{"runs":"99"}'}))
    assert team.run("a")["status"]["phase"] == "Running"
    assert team.run("b")["status"]["phase"] == "Scheduled"
    assert team.run("c")["status"]["assignment"]["podName"] == "python-0"
    pods = {p.metadata.name: p.metadata.annotations for p in team.core.list_namespaced_pod(team.namespace).items}
    assert models.CAPACITY_ANNOTATION not in pods["python-0"]
    assert pods["python-1"][models.HEARTBEAT_ANNOTATION] != "2026-12-05T00:00:00Z"


def test_a_runtimed_writes_its_pod_s_inventory_only_where_the_controller_made_it_the_publisher(
        emulator: Emulator, cluster_api: Cluster) -> None:
    # SPEC §7.1: with publisher Controller the inventory is the controller's; runtimed's patch is refused.
    team = cluster_api
    pod = team.add_pod("python-0")
    runtimed = as_runtimed(emulator, team, pod)
    inventory = '{"devices":[{"name":"gpu-0"}],"driver":"gpu.example.com"}'
    assert "and kruntimes.io/devices where its Runtime's devices publisher is Runtimed" in refusal(
        lambda: heartbeat(runtimed, team, "python-0", **{"kruntimes.io/devices": inventory}))
    assert "kruntimes.io/devices" not in (team.core.read_namespaced_pod("python-0", team.namespace)
                                          .metadata.annotations or {})


def test_a_runtimed_token_not_bound_to_a_pod_writes_nothing(emulator: Emulator, cluster_api: Cluster) -> None:
    pod = cluster_api.add_pod("python-0")
    cluster_api.add_run("a")
    assign(cluster_api, "a", pod)
    unbound = as_runtimed(emulator, cluster_api, None)
    assert "bound service-account token" in refusal(
        lambda: write_status(unbound, cluster_api, "a", lambda s: {**s, "phase": "Running"}))


@pytest.mark.parametrize("why,phase,status,message", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_each_status_attack_with_runtimeds_token_is_refused_by_the_emulator(
        emulator: Emulator, cluster_api: Cluster, why: str, phase: str, status: dict[str, Any],
        message: str) -> None:
    pod = cluster_api.add_pod("python-0")
    cluster_api.add_run("r")
    assign(cluster_api, "r", pod, phase)
    runtimed = as_runtimed(emulator, cluster_api, pod)
    body = refusal(lambda: write_status(runtimed, cluster_api, "r", lambda s: {**s, **status}))
    assert f"ValidatingAdmissionPolicy '{RUN_STATUS}' with binding '{RUN_STATUS}' denied request: {message}" in body
    assert cluster_api.run("r")["status"]["phase"] == phase


def test_the_writes_runtimed_makes_itself_pass_claim_then_end(emulator: Emulator, cluster_api: Cluster) -> None:
    pod = cluster_api.add_pod("python-0")
    cluster_api.add_run("claimed")
    assign(cluster_api, "claimed", pod)
    runtimed = as_runtimed(emulator, cluster_api, pod)
    write_status(runtimed, cluster_api, "claimed", lambda s: {**s, "phase": "Running"})
    write_status(runtimed, cluster_api, "claimed", lambda s: {**s, "phase": "Succeeded"})
    assert cluster_api.run("claimed")["status"]["phase"] == "Succeeded"


def test_the_controller_ends_a_run_but_the_emulator_refuses_it_placing_one(
        emulator: Emulator, cluster_api: Cluster) -> None:
    pod = cluster_api.add_pod("python-0")
    cluster_api.add_run("pending")
    cluster_api.add_run("lost")
    assign(cluster_api, "lost", pod)
    controller = emulator.api_client(emulator.identity(admission.service_account("kruntimes-system", CONTROLLER)))
    write_status(controller, cluster_api, "lost", lambda s: st.terminal_status(s, "Failed", "RuntimePodLost",
                                                                               "the pod is gone", NOW))
    assert "kruntimes-controller-run-status" in refusal(lambda: write_status(
        controller, cluster_api, "pending", lambda s: st.scheduled_status(None, "python-0", pod["uid"], NOW, 0)))
    assert cluster_api.run("lost")["status"]["phase"] == "Failed"
    assert "assignment" not in (cluster_api.run("pending").get("status") or {})


def test_the_fence_answers_403_forbidden(emulator: Emulator, cluster_api: Cluster) -> None:
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "kruntimes-scheduler"},
             "spec": {"holderIdentity": "scheduler-b", "leaseTransitions": 2}}
    client.CoordinationV1Api(emulator.api_client()).create_namespaced_lease(cluster_api.namespace, lease)
    pod = cluster_api.add_pod("python-0")
    cluster_api.add_run("a")
    body = refusal(lambda: write_status(emulator.api_client(), cluster_api, "a", lambda s: st.scheduled_status(
        None, "python-0", pod["uid"], NOW, 1)), code=403)
    assert "ValidatingAdmissionPolicy 'kruntimes-scheduler-fence'" in body and json.loads(body)["reason"] == "Forbidden"


def test_runtimed_and_the_controller_do_their_work_with_their_own_identities(
        emulator: Emulator, cluster_api: Cluster, tmp_path: Path) -> None:
    ns = cluster_api.namespace
    pod = cluster_api.add_pod("python-0", runs=1)
    cluster_api.add_run("a", mode={"task": {"args": [sys.executable, "-c", "pass"]}})
    assign(cluster_api, "a", pod)
    runtimed_api = as_runtimed(emulator, cluster_api, pod)
    agent = Agent(runtimed_api, Settings(pod_name="python-0", pod_namespace=ns, pod_uid=pod["uid"],
                                         work_dir=tmp_path / "work", heartbeat_period=0.2, settings_namespace=ns))
    thread = threading.Thread(target=agent.run, name="runtimed-test", daemon=True)
    thread.start()
    try:
        wait_for(lambda: (cluster_api.run("a").get("status") or {}).get("phase") == "Succeeded", timeout=60,
                 what="a claimed, run and ended by runtimed")
        renewed = cluster_api.core.read_namespaced_pod("python-0", ns).metadata.annotations
        wait_for(lambda: cluster_api.core.read_namespaced_pod("python-0", ns).metadata.annotations[
            models.HEARTBEAT_ANNOTATION] != renewed[models.HEARTBEAT_ANNOTATION], timeout=30, what="a heartbeat")
    finally:
        agent.stop()
        thread.join(10)
    # The controller, with its own identity, ends a Run whose pod is gone.
    runtime = {"apiVersion": f"{G}/{V}", "kind": "Runtime", "metadata": {"name": "python"},
               "spec": {"replicas": 0, "template": {"spec": {"containers": [{"name": "runtime", "image": "x"}]}},
                        "capacity": {"resources": {"runs": "1"}}}}
    cluster_api.custom.create_namespaced_custom_object(G, V, ns, "runtimes", runtime)
    cluster_api.add_run("lost")
    assign(cluster_api, "lost", pod, "Running")
    cluster_api.core.delete_namespaced_pod("python-0", ns, grace_period_seconds=0)
    controller_api = emulator.api_client(emulator.identity(admission.service_account("kruntimes-system", CONTROLLER)))
    runner = ControllerRunner(controller_api, ns, resync_period=0.2).start(sync_timeout=60)
    try:
        wait_for(lambda: (cluster_api.run("lost").get("status") or {}).get("phase") == "Failed", timeout=60,
                 what="lost ended RuntimePodLost")
    finally:
        runner.stop()
    assert any(c.get("reason") == "RuntimePodLost" for c in cluster_api.run("lost")["status"]["conditions"])
