"""The whole loop on one namespace: controller, scheduler and one runtimed per pod (issue 13 item 8, first cut).

The test plays kubelet: it marks the controller's pods Ready and starts an in-process
runtimed for each. A Runtime becomes pods with capacity; Runs are placed, admitted,
executed as real processes and end Succeeded, freeing capacity for the Pending ones;
a function Run runs until `kruntimes release` releases it. Throughout, no pod ever
shows more Running Runs than its capacity.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from kubernetes.client import ApiClient

from kruntimes.controller.runner import ControllerRunner
from kruntimes.runtimed.agent import Agent, Settings
from tests.integration.cluster import Cluster, wait_for
from tests.integration.processes import ROOT, kubeconfig  # noqa: F401 - a fixture, found by name
from tests.integration.test_controller_runner import create_runtime, pods

PY = sys.executable


@pytest.fixture
def agents() -> Iterator[list[tuple[Agent, threading.Thread]]]:
    started: list[tuple[Agent, threading.Thread]] = []
    yield started
    for agent, _ in started:
        agent.stop()
    for _, thread in started:
        thread.join(15)


def test_runs_flow_from_a_runtime_to_succeeded_and_a_function_run_is_released(  # noqa: PLR0913
        cluster_api: Cluster, kube_api: ApiClient, kube_namespace: str, kubeconfig: str,  # noqa: F811
        start_scheduler: Callable[..., Any], agents: list[tuple[Agent, threading.Thread]], tmp_path: Path) -> None:
    create_runtime(cluster_api, 2, {"runs": "1"})
    controller = ControllerRunner(kube_api, kube_namespace, resync_period=0.5).start()
    try:
        for pod in wait_for(lambda: (ps := pods(cluster_api)) and len(ps) == 2 and ps, timeout=20, what="pods"):
            cluster_api.set_ready(pod.metadata.name, True)
            agent = Agent(kube_api, Settings(pod_name=pod.metadata.name, pod_namespace=kube_namespace,
                                             pod_uid=pod.metadata.uid, work_dir=tmp_path / pod.metadata.name,
                                             heartbeat_period=0.2))
            thread = threading.Thread(target=agent.run, name=f"runtimed-{pod.metadata.name}", daemon=True)
            thread.start()
            agents.append((agent, thread))
        cluster_api.add_run("fn", mode={"function": {"args": [PY, "-c", "import time; time.sleep(120)"]}})
        tasks = [f"task-{i}" for i in range(4)]
        for name in tasks:
            cluster_api.add_run(name, mode={"task": {"args": [PY, "-c", "import time; time.sleep(0.2)"]}})
        start_scheduler()

        most_per_pod = 0

        def sample() -> dict[str, str]:
            nonlocal most_per_pod
            runs = cluster_api.runs().values()
            running = Counter(r["status"]["assignment"]["podName"] for r in runs
                              if (r.get("status") or {}).get("phase") == "Running")
            most_per_pod = max([most_per_pod, *running.values()])
            return {r["metadata"]["name"]: (r.get("status") or {}).get("phase", "") for r in runs}

        wait_for(lambda: all(sample().get(t) == "Succeeded" for t in tasks) and sample()["fn"] == "Running",
                 timeout=60, what="every task Succeeded and the function Running")
        released = subprocess.run([sys.executable, "-m", "kruntimes.cli.main", "release", f"{kube_namespace}/fn",
                                   "--kubeconfig", kubeconfig], capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert released.returncode == 0, released.stderr
        wait_for(lambda: sample()["fn"] == "Succeeded", timeout=30, what="the function Run released")
        assert cluster_api.run("fn")["status"]["released"] is True
        assert most_per_pod <= 1
    finally:
        controller.stop()


def test_release_refuses_a_task_run_saying_why(cluster_api: Cluster, kube_namespace: str,
                                               kubeconfig: str) -> None:  # noqa: F811
    cluster_api.add_run("t", mode={"task": {"args": ["true"]}})
    result = subprocess.run([sys.executable, "-m", "kruntimes.cli.main", "release", f"{kube_namespace}/t",
                             "--kubeconfig", kubeconfig], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 1
    assert "is not a function Run" in result.stderr
