"""Runtime Pods that are terminating: deleted, but still there for their grace period.

A pod bound to a node is not removed by DELETE: the API server sets its
``deletionTimestamp`` and the grace period (30 s by default), and the pod stays until
the kubelet has stopped it ("Pod Lifecycle", termination of Pods). The scheduler must
place nothing more on such a pod (a terminating Runtime Pod is not available), and
runtimed, stopped by the kubelet's SIGTERM while its pod is terminating, must end its
Runs `RuntimePodLost` (docs/runtimed.md), not `RuntimedStopped`: the pod is leaving,
though still there. Holds on the emulator and on a real cluster alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from kubernetes.client import ApiClient

from kruntimes.cluster.runner import ClusterScheduler
from tests.integration import cluster
from tests.integration.test_runtimed_agent import assign, sleeper, start_agent

NODE = "kruntimes-test-node"


def test_nothing_more_is_placed_on_a_terminating_runtime_pod(
        cluster_api: cluster.Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    cluster_api.add_pod("python-0", runs=5, node=NODE)
    start_scheduler()
    cluster_api.add_run("before")
    cluster.wait_for(lambda: cluster_api.placements() == {"before": "python-0"}, what="the first Run placed")
    cluster_api.core.delete_namespaced_pod("python-0", cluster_api.namespace)  # the default grace period
    assert cluster_api.core.read_namespaced_pod("python-0", cluster_api.namespace).metadata.deletion_timestamp
    cluster_api.add_run("after")
    message = cluster.wait_for(lambda: cluster_api.pending_message("after"), what="the second Run Pending")
    assert "terminating" in message
    cluster_api.add_pod("python-1", runs=5, node=NODE)
    cluster.wait_for(lambda: cluster_api.placements().get("after") == "python-1", what="the Run placed elsewhere")


def test_runtimed_stopped_while_its_pod_terminates_ends_its_runs_runtime_pod_lost(
        cluster_api: cluster.Cluster, kube_api: ApiClient, kube_namespace: str, tmp_path: Path) -> None:
    pod = cluster_api.add_pod("p1", runs=1, node=NODE)
    agent, thread = start_agent(kube_api, kube_namespace, pod, tmp_path / "work")
    try:
        assign(cluster_api, "long", pod, mode=sleeper(60))
        cluster.wait_for(lambda: cluster_api.phases()["long"] == "Running", timeout=20, what="long Running")
        cluster_api.core.delete_namespaced_pod("p1", kube_namespace)  # 30 s of grace: the pod stays
        agent.stop()  # what the kubelet's SIGTERM does; there is no kubelet here
        cluster.wait_for(lambda: cluster_api.phases()["long"] == "Failed", timeout=20, what="long Failed")
        completed = next(c for c in cluster_api.run("long")["status"]["conditions"] if c["type"] == "Completed")
        assert completed["reason"] == "RuntimePodLost"
        assert cluster_api.core.read_namespaced_pod("p1", kube_namespace).metadata.deletion_timestamp
    finally:
        agent.stop()
        thread.join(10)
