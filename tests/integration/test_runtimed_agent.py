"""runtimed's Kubernetes adapter with the live scheduler, through the real client (SPEC §4.1).

A first proof that the agent sketch works over the wire: the scheduler places Runs
on one Runtime Pod, one runtimed admits them against the pod's capacity, executes
them as real processes and ends them, so the Runs the pod could not hold at first
are placed and run in turn. Holds on the emulator and on a real cluster alike.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any, Callable

from kubernetes.client import ApiClient

from kruntimes.api import models
from kruntimes.runtimed.agent import Agent, Settings
from tests.integration import cluster

PY = sys.executable


def start_agent(api: ApiClient, namespace: str, pod: dict[str, Any], work: Path) -> tuple[Agent, threading.Thread]:
    agent = Agent(api, Settings(pod_name=pod["name"], pod_namespace=namespace, pod_uid=pod["uid"], work_dir=work,
                                heartbeat_period=0.2))
    thread = threading.Thread(target=agent.run, name="runtimed-test", daemon=True)
    thread.start()
    return agent, thread


def test_runs_placed_on_a_pod_are_admitted_executed_and_end_so_the_rest_get_placed(
        cluster_api: cluster.Cluster, kube_api: ApiClient, kube_namespace: str,
        start_scheduler: Callable[..., Any], tmp_path: Path) -> None:
    pod = cluster_api.add_pod("p1", runs=2)
    initial = cluster_api.core.read_namespaced_pod("p1", kube_namespace).metadata.annotations[
        models.HEARTBEAT_ANNOTATION]
    names = [f"r{i}" for i in range(5)]
    for name in names:
        cluster_api.add_run(name, mode={"task": {"args": [PY, "-c", "import time; time.sleep(0.2)"]}})
    start_scheduler()
    agent, thread = start_agent(kube_api, kube_namespace, pod, tmp_path / "work")
    most_running = 0

    def all_succeeded() -> bool:
        nonlocal most_running
        phases = list(cluster_api.phases().values())
        most_running = max(most_running, phases.count("Running"))
        return all(p == "Succeeded" for p in phases)

    try:
        cluster.wait_for(all_succeeded, timeout=60, what="every Run Succeeded")
        assert most_running <= 2
        heartbeat = cluster_api.core.read_namespaced_pod("p1", kube_namespace).metadata.annotations[
            models.HEARTBEAT_ANNOTATION]
        assert heartbeat != initial and heartbeat.endswith("Z")  # renewed by runtimed (RFC 3339, UTC)
        assert agent.lifecycle.guard.usage() == {}
    finally:
        agent.stop()
        thread.join(10)
