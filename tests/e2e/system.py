"""The whole system on one namespace, for the end-to-end tests: controller, scheduler, kubelet's part, runtimed.

`System` starts the Runtime controller and the scheduler (in process, through the
real client), plays kubelet for the pods the controller creates (Ready condition,
one runtimed each: in-process `Agent` threads, or `kruntimes runtimed` processes
where a test kills one), and watches what the API shows: the most Running Runs any
pod held against its capacity, read from the pod's own annotations as runtimed
reads them.
"""

from __future__ import annotations

import signal
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
from kruntimes.runtimed.reading import pod_capacity
from tests.integration.cluster import Cluster, wait_for
from tests.integration.processes import ROOT
from tests.integration.test_controller_runner import create_runtime, patch_runtime, pods

PY = sys.executable
HEARTBEAT = 0.2


def task(seconds: float = 0.0, code: int = 0) -> dict[str, Any]:
    return {"task": {"args": [PY, "-c", f"import sys, time; time.sleep({seconds}); sys.exit({code})"]}}


def function() -> dict[str, Any]:
    return {"function": {"args": [PY, "-c", "import time; time.sleep(600)"]}}


class System:
    def __init__(self, c: Cluster, api: ApiClient, kubeconfig: Callable[[], str],
                 start_scheduler: Callable[..., Any], work: Path) -> None:
        self.c, self.api, self._kubeconfig, self._start_scheduler, self.work = c, api, kubeconfig, start_scheduler, work
        self.controller: ControllerRunner | None = None
        self.agents: dict[str, tuple[Agent, threading.Thread]] = {}
        self.processes: dict[str, subprocess.Popen[str]] = {}
        self.ready: set[str] = set()  # UIDs of the pods the kubelet has started
        self.most_over_capacity = 0  # the largest (Running Runs - runs capacity) seen on any pod

    # -- bringing it up --------------------------------------------------------------
    def start(self, replicas: int, capacity: dict[str, str], *, runtimed: bool = True) -> list[Any]:
        """A Runtime, the controller and the scheduler; every pod Ready, with its runtimed unless not wanted."""
        create_runtime(self.c, replicas, capacity)
        self.controller = ControllerRunner(self.api, self.c.namespace, resync_period=0.5).start()
        self._start_scheduler()
        return self.bring_up(replicas, runtimed=runtimed)

    def bring_up(self, count: int, *, runtimed: bool = True) -> list[Any]:
        """Wait for `count` live pods; those new to the kubelet become Ready and (by default) get a runtimed."""
        live = wait_for(lambda: (ps := pods(self.c)) and len(ps) == count and ps, timeout=30,
                        what=f"{count} runtime pods")
        for pod in live:
            if pod.metadata.uid not in self.ready:
                self.ready.add(pod.metadata.uid)
                self.c.set_ready(pod.metadata.name, True)
                if runtimed:
                    self.start_agent(pod)
        return list(live)

    def start_agent(self, pod: Any) -> Agent:
        agent = Agent(self.api, Settings(pod_name=pod.metadata.name, pod_namespace=self.c.namespace,
                                         pod_uid=pod.metadata.uid, work_dir=self.work / pod.metadata.name,
                                         heartbeat_period=HEARTBEAT))
        thread = threading.Thread(target=agent.run, name=f"runtimed-{pod.metadata.name}", daemon=True)
        thread.start()
        self.agents[pod.metadata.uid] = (agent, thread)
        return agent

    def stop_agent(self, pod: Any) -> None:
        agent, thread = self.agents.pop(pod.metadata.uid)
        agent.stop()
        thread.join(15)

    def start_process(self, pod: Any) -> subprocess.Popen[str]:
        """`kruntimes runtimed` as a process for `pod` (a test can SIGKILL it: no goodbye)."""
        process = subprocess.Popen(
            [PY, "-m", "kruntimes.cli.main", "runtimed", "--kubeconfig", self._kubeconfig(),
             "--pod-name", pod.metadata.name, "--pod-namespace", self.c.namespace, "--pod-uid", pod.metadata.uid,
             "--work-dir", str(self.work / pod.metadata.name), "--heartbeat-period", str(HEARTBEAT)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        self.processes[pod.metadata.uid] = process
        return process

    def release(self, name: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "kruntimes.cli.main", "release", f"{self.c.namespace}/{name}",
                               "--kubeconfig", self._kubeconfig()], capture_output=True, text=True, cwd=ROOT,
                              timeout=60)

    def set_capacity(self, capacity: dict[str, str]) -> None:
        patch_runtime(self.c, {"capacity": {"resources": capacity}})

    # -- observing ---------------------------------------------------------------------
    def phases(self) -> dict[str, str]:
        """Every Run's phase, noting on the way how far any pod's Running Runs went over its capacity."""
        runs = self.c.runs().values()
        running = Counter(r["status"]["assignment"]["podUID"] for r in runs
                          if (r.get("status") or {}).get("phase") == "Running")
        for pod in self.c.core.list_namespaced_pod(self.c.namespace).items:
            capacity = dict(pod_capacity(self.api.sanitize_for_serialization(pod)).amounts).get("runs", 0)
            self.most_over_capacity = max(self.most_over_capacity, running.get(pod.metadata.uid, 0) - capacity)
        return {r["metadata"]["name"]: (r.get("status") or {}).get("phase", "") for r in runs}

    def wait_phases(self, wanted: dict[str, str], timeout: float = 60) -> dict[str, str]:
        return dict(wait_for(lambda: (p := self.phases()) and all(p.get(n) == w for n, w in wanted.items()) and p,
                             timeout=timeout, what=f"phases {wanted}"))

    def completed(self, name: str) -> dict[str, Any]:
        return dict(next(c for c in self.c.run(name)["status"]["conditions"] if c["type"] == "Completed"))

    # -- tearing down ------------------------------------------------------------------
    def stop(self) -> None:
        for agent, _ in self.agents.values():
            agent.stop()
        for _, thread in self.agents.values():
            thread.join(15)
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.communicate(timeout=30)
        if self.controller is not None:
            self.controller.stop()


@pytest.fixture
def system(cluster_api: Cluster, kube_api: ApiClient, start_scheduler: Callable[..., Any],
           request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[System]:
    s = System(cluster_api, kube_api, lambda: str(request.getfixturevalue("kubeconfig")), start_scheduler,
               tmp_path / "work")
    try:
        yield s
    finally:
        s.stop()
