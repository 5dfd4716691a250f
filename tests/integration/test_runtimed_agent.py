"""runtimed's Kubernetes adapter through the real client (SPEC §4.1, seed 000).

With the live scheduler, Runs placed on one Runtime Pod are admitted against its
capacity, executed as real processes and ended, so the Runs the pod could not hold
at first are placed and run in turn. Without it (Runs bound straight to the pod, as
a scheduler that ignored capacity would), capacity lowered under running Runs evicts
nothing and admits nothing until it fits; and a runtimed killed mid-run and started
again ends the Run it lost and admits the one waiting. Holds on the emulator and on
a real cluster alike.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from kubernetes.client import ApiClient

from kruntimes.api import models
from kruntimes.runtimed.agent import Agent, Settings
from kruntimes.scheduler import status as st
from tests.emulator.faults import status_write
from tests.emulator.server import Emulator
from tests.integration import cluster
from tests.integration.processes import ROOT, kubeconfig, run_scheduler  # noqa: F401 - fixtures, found by name

PY = sys.executable


def start_agent(api: ApiClient, namespace: str, pod: dict[str, Any], work: Path) -> tuple[Agent, threading.Thread]:
    agent = Agent(api, Settings(pod_name=pod["name"], pod_namespace=namespace, pod_uid=pod["uid"], work_dir=work,
                                heartbeat_period=0.2, settings_namespace=namespace, settings_period=0.2))
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
        # Freed just after the end is written (and its kept copy removed): the API may show it first.
        cluster.wait_for(lambda: agent.lifecycle.guard.usage() == {}, timeout=10, what="every slot freed")
    finally:
        agent.stop()
        thread.join(10)


def assign(c: cluster.Cluster, name: str, pod: dict[str, Any], **spec: Any) -> None:
    """A Run bound straight to `pod`, as a scheduler that ignored capacity (or an old one) would."""
    c.add_run(name, **spec)
    current = c.run(name)
    current["status"] = st.scheduled_status(None, pod["name"], pod["uid"], datetime.now(timezone.utc))
    c.custom.replace_namespaced_custom_object_status(models.GROUP, models.VERSION, c.namespace, "runs", name,
                                                     current)


def sleeper(seconds: float) -> dict[str, Any]:
    return {"task": {"args": [PY, "-c", f"import time; time.sleep({seconds})"]}}


def test_capacity_lowered_under_running_runs_evicts_nothing_and_admits_nothing_until_it_fits(
        cluster_api: cluster.Cluster, kube_api: ApiClient, kube_namespace: str, tmp_path: Path) -> None:
    pod = cluster_api.add_pod("p1", runs=2)
    agent, thread = start_agent(kube_api, kube_namespace, pod, tmp_path / "work")
    try:
        assign(cluster_api, "a", pod, mode=sleeper(1.5))
        assign(cluster_api, "b", pod, mode=sleeper(1.5))
        cluster.wait_for(lambda: list(cluster_api.phases().values()) == ["Running", "Running"], timeout=20)
        cluster_api.set_capacity("p1", 1)
        cluster.wait_for(lambda: agent.lifecycle.guard.capacity().amounts == (("runs", 1),), timeout=10)
        assign(cluster_api, "c", pod, mode=sleeper(0.1))
        seen: set[tuple[str, str]] = set()

        def c_done() -> bool:
            phases = cluster_api.phases()
            seen.add((phases["c"], "".join(sorted(p[0] for n, p in phases.items() if n != "c"))))
            return phases["c"] == "Succeeded"

        cluster.wait_for(c_done, timeout=30, what="c Succeeded")
        # c never ran beside a or b: while either was Running, c was still Scheduled.
        assert all(c_phase == "Scheduled" for c_phase, others in seen if "R" in others)
        assert {cluster_api.phases()[n] for n in ("a", "b")} == {"Succeeded"}
    finally:
        agent.stop()
        thread.join(10)


def test_runtimed_killed_mid_run_restarts_ends_the_lost_run_and_admits_the_waiting_one(
        cluster_api: cluster.Cluster, kubeconfig: str, tmp_path: Path) -> None:  # noqa: F811
    pod = cluster_api.add_pod("p1", runs=1)
    assign(cluster_api, "long", pod, mode=sleeper(3))

    def runtimed() -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "kruntimes.cli.main", "runtimed", "--kubeconfig", kubeconfig,
                                 "--pod-name", "p1", "--pod-namespace", cluster_api.namespace, "--pod-uid",
                                 pod["uid"], "--work-dir", str(tmp_path / "work"), "--heartbeat-period", "0.2"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)

    first = runtimed()
    cluster.wait_for(lambda: cluster_api.phases()["long"] == "Running", timeout=20, what="long Running")
    assign(cluster_api, "next", pod, mode=sleeper(0.1))
    first.kill()  # no goodbye: its execution of "long" is lost with it
    first.communicate(timeout=10)
    assert cluster_api.phases() == {"long": "Running", "next": "Scheduled"}
    second = runtimed()
    try:
        cluster.wait_for(lambda: cluster_api.phases() == {"long": "Failed", "next": "Succeeded"}, timeout=30,
                         what="long lost, next run")
        completed = next(c for c in cluster_api.run("long")["status"]["conditions"] if c["type"] == "Completed")
        assert completed["reason"] == "ExecutionLost"
    finally:
        second.send_signal(signal.SIGTERM)
        second.communicate(timeout=30)
    assert second.returncode == 0


def test_a_runtimed_killed_outright_has_its_successor_stop_what_it_left_running_before_admitting_more(
        cluster_api: cluster.Cluster, kubeconfig: str, tmp_path: Path) -> None:  # noqa: F811
    pod = cluster_api.add_pod("p1", runs=1)
    pid_file = tmp_path / "long.pid"
    assign(cluster_api, "long", pod, mode={"task": {"args": [
        PY, "-c", f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"]}})

    def runtimed() -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "kruntimes.cli.main", "runtimed", "--kubeconfig", kubeconfig,
                                 "--pod-name", "p1", "--pod-namespace", cluster_api.namespace, "--pod-uid",
                                 pod["uid"], "--work-dir", str(tmp_path / "work"), "--heartbeat-period", "0.2"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)

    first = runtimed()
    cluster.wait_for(lambda: pid_file.exists() and pid_file.read_text() != "", timeout=20, what="long started")
    pid = int(pid_file.read_text())
    first.kill()  # SIGKILL: runtimed alone; the Run's process lives on in its own process group
    first.communicate(timeout=10)
    assert _alive(pid)
    # "next" fails if it ever runs beside the process "long" left: the pod holds one Run.
    assign(cluster_api, "next", pod, mode={"task": {"args": [
        PY, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); from tests.integration.test_runtimed_agent "
                  f"import _alive; raise SystemExit(3 if _alive({pid}) else 0)"]}})
    second = runtimed()
    try:
        cluster.wait_for(lambda: cluster_api.phases() == {"long": "Failed", "next": "Succeeded"}, timeout=40,
                         what="long stopped and lost, then next run alone")
        completed = next(c for c in cluster_api.run("long")["status"]["conditions"] if c["type"] == "Completed")
        assert completed["reason"] == "ExecutionLost" and "was stopped" in completed["message"]
        assert not _alive(pid)
    finally:
        second.send_signal(signal.SIGTERM)
        second.communicate(timeout=30)
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """A live process (a zombie waiting for its reaper is not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_pod_deleted_under_a_running_run_stops_it_and_the_run_ends_runtime_pod_lost(
        cluster_api: cluster.Cluster, kube_api: ApiClient, kube_namespace: str, tmp_path: Path) -> None:
    pod = cluster_api.add_pod("p1", runs=1)
    agent, thread = start_agent(kube_api, kube_namespace, pod, tmp_path / "work")
    try:
        assign(cluster_api, "long", pod, mode=sleeper(60))
        cluster.wait_for(lambda: cluster_api.phases()["long"] == "Running", timeout=20, what="long Running")
        cluster_api.core.delete_namespaced_pod("p1", kube_namespace, grace_period_seconds=0)
        cluster.wait_for(lambda: cluster_api.phases()["long"] == "Failed", timeout=30, what="long Failed")
        completed = next(c for c in cluster_api.run("long")["status"]["conditions"] if c["type"] == "Completed")
        assert completed["reason"] == "RuntimePodLost"
        thread.join(20)
        assert not thread.is_alive()  # runtimed stopped with its pod
    finally:
        agent.stop()
        thread.join(10)


def test_the_scheduler_and_runtimed_read_one_default_runs_capacity_so_what_one_places_the_other_admits(
        cluster_api: cluster.Cluster, kube_api: ApiClient, kube_namespace: str, run_scheduler: Callable[..., Any],
        tmp_path: Path) -> None:
    # SPEC §2.3 (amended 2026-12-04): one cluster setting, not a flag of each component.
    cluster_api.core.create_namespaced_config_map(kube_namespace, {
        "metadata": {"name": "kruntimes-settings"}, "data": {"defaultRunsCapacity": "2"}})
    pod = cluster_api.add_pod("p1", runs=None)  # declares no runs: the cluster's default applies
    for name in ("f1", "f2", "f3"):
        cluster_api.add_run(name, mode={"function": {}})  # held until released
    run_scheduler("--namespace", kube_namespace, "--leader-elect-resource-namespace", kube_namespace,
                  "--settings-namespace", kube_namespace)
    agent, thread = start_agent(kube_api, kube_namespace, pod, tmp_path / "work")
    try:
        cluster.wait_for(lambda: sorted(cluster_api.phases().values()) == ["Pending", "Running", "Running"],
                         timeout=60, what="two function Runs running on the pod, the third Pending")
        assert agent.lifecycle.guard.capacity().amounts == (("runs", 2),)
    finally:
        agent.stop()
        thread.join(10)


def test_claims_and_ends_the_api_refuses_for_a_while_are_read_back_retried_and_the_run_runs_once(
        emulator: Emulator, cluster_api: cluster.Cluster, kube_api: ApiClient, kube_namespace: str,
        tmp_path: Path) -> None:
    # Through the real client and binder: 500s and a 429 with Retry-After (issue 23 items 3 and 4).
    pod = cluster_api.add_pod("p1", runs=1)
    gate = tmp_path / "gate"
    assign(cluster_api, "a", pod, mode={"task": {"args": [
        PY, "-c", f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.02)"]}})
    writes, reads = status_write("a"), (lambda method, path: method == "GET" and path.endswith("/runs/a"))
    before = emulator.hits_of(writes)
    emulator.answer(500, writes, count=2)
    emulator.throttle(writes, count=1, retry_after=1)
    agent, thread = start_agent(kube_api, kube_namespace, pod, tmp_path / "work")
    try:
        cluster.wait_for(lambda: cluster_api.phases()["a"] == "Running", timeout=30, what="a claimed")
        assert emulator.hits_of(writes) - before == 4 and emulator.hits_of(reads) == 3  # each refusal read back
        emulator.answer(503, writes, count=2)
        gate.touch()
        cluster.wait_for(lambda: cluster_api.phases()["a"] == "Succeeded", timeout=30, what="a's end written")
        assert emulator.hits_of(writes) - before == 7  # 3 refused claims, the claim, 2 refused ends, the end
        cluster.wait_for(lambda: agent.lifecycle.guard.usage() == {}, timeout=10, what="a's room freed")
    finally:
        agent.stop()
        thread.join(10)


def test_runtimed_follows_a_change_of_the_cluster_default_runs_capacity_and_admits_the_waiting_run(
        cluster_api: cluster.Cluster, kube_api: ApiClient, kube_namespace: str, tmp_path: Path) -> None:
    pod = cluster_api.add_pod("p1", runs=None)  # declares no runs: the cluster's default applies
    agent, thread = start_agent(kube_api, kube_namespace, pod, tmp_path / "work")
    try:
        assign(cluster_api, "f1", pod, mode={"function": {}})
        assign(cluster_api, "f2", pod, mode={"function": {}})
        cluster.wait_for(lambda: sorted(cluster_api.phases().values()) == ["Running", "Scheduled"], timeout=20,
                         what="one Run admitted under the built-in default of 1")
        cluster_api.core.create_namespaced_config_map(kube_namespace, {
            "metadata": {"name": "kruntimes-settings"}, "data": {"defaultRunsCapacity": "2"}})
        cluster.wait_for(lambda: sorted(cluster_api.phases().values()) == ["Running", "Running"], timeout=20,
                         what="the waiting Run admitted under the new default")
    finally:
        agent.stop()
        thread.join(10)
