"""The full loop, end to end (issue 13 item 8): Runtime → pods → placed → admitted → executed → ended.

Each test starts the Runtime controller, the scheduler and one runtimed per pod
(`tests.e2e.system`) on a fresh namespace and drives the system only as a user or
the cluster would: create a Runtime and Runs, change the Runtime, delete a pod, kill
a runtimed, release a function Run. Throughout, no pod shows more Running Runs than
its capacity.

The single-component cases stay where they are: runtimed alone against capacity
lowered under Runs bound straight to its pod, and against a kill and restart, in
`tests/integration/test_runtimed_agent.py` (those inject what a faulty scheduler
would write); the controller alone in `tests/integration/test_controller_runner.py`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.e2e.system import System, function, task
from tests.integration.cluster import Cluster, wait_for
from tests.integration.processes import ROOT


def test_runs_flow_from_a_runtime_to_succeeded_and_released_capacity_places_the_pending_ones(
        system: System, cluster_api: Cluster) -> None:
    pods = system.start(2, {"runs": "1"})
    names = [f"task-{i}" for i in range(5)]
    for name in names:
        cluster_api.add_run(name, mode=task(0.3))
    # Two pods of one slot each: three Runs wait, Pending for lack of capacity, until others end.
    wait_for(lambda: sum(1 for n in names if (m := cluster_api.pending_message(n)) and "insufficient capacity" in m),
             timeout=30, what="a Run Pending for capacity")
    phases = system.wait_phases({n: "Succeeded" for n in names})
    assert set(phases.values()) == {"Succeeded"}
    assert system.most_over_capacity <= 0
    placed_on = {cluster_api.run(n)["status"]["assignment"]["podName"] for n in names}
    assert placed_on == {p.metadata.name for p in pods}  # both pods took turns
    for agent, _ in system.agents.values():
        wait_for(lambda a=agent: a.lifecycle.guard.usage() == {}, timeout=10, what="capacity released")


def test_capacity_lowered_under_running_runs_evicts_nothing_and_admits_the_next_run_only_when_it_fits(
        system: System, cluster_api: Cluster) -> None:
    [pod] = system.start(1, {"runs": "2"})
    cluster_api.add_run("a", mode=function())
    cluster_api.add_run("b", mode=function())
    system.wait_phases({"a": "Running", "b": "Running"})
    system.set_capacity({"runs": "1"})
    [agent] = [a for a, _ in system.agents.values()]
    wait_for(lambda: agent.lifecycle.guard.capacity().amounts == (("runs", 1),), timeout=20,
             what="runtimed reads the lowered capacity")
    cluster_api.add_run("c", mode=task(0.1))
    # The scheduler's answer for c (a status write from its binder process) may come a moment later.
    wait_for(lambda: system.phases().get("c") in ("Pending", "Scheduled"), timeout=30, what="c planned")
    assert system.wait_phases({"a": "Running", "b": "Running"})
    assert system.release("a").returncode == 0
    system.wait_phases({"a": "Succeeded"})
    wait_for(lambda: agent.lifecycle.guard.usage() == {"runs": 1}, timeout=20, what="a's capacity released")
    assert system.phases()["c"] in ("Pending", "Scheduled")  # b alone fills the lowered capacity
    assert system.release("b").returncode == 0
    system.wait_phases({"b": "Succeeded", "c": "Succeeded"})
    assert cluster_api.run("c")["status"]["assignment"]["podUID"] == pod.metadata.uid
    assert system.most_over_capacity <= 1  # a and b kept running over the lowered capacity; nothing joined them


def test_a_pod_deleted_under_a_running_run_ends_it_runtime_pod_lost_and_the_replacement_runs_the_next(
        system: System, cluster_api: Cluster) -> None:
    [pod] = system.start(1, {"runs": "1"})
    cluster_api.add_run("long", mode=task(60))
    system.wait_phases({"long": "Running"})
    cluster_api.core.delete_namespaced_pod(pod.metadata.name, cluster_api.namespace, grace_period_seconds=0)
    system.wait_phases({"long": "Failed"})
    assert system.completed("long")["reason"] == "RuntimePodLost"
    [replacement] = wait_for(lambda: (ps := [p for p in system.bring_up(1) if p.metadata.uid != pod.metadata.uid])
                             and ps, timeout=30, what="the replacement pod")
    cluster_api.add_run("next", mode=task(0.1))
    system.wait_phases({"next": "Succeeded"})
    assert cluster_api.run("next")["status"]["assignment"]["podUID"] == replacement.metadata.uid


def test_runtimed_killed_mid_run_restarts_from_the_api_ends_the_lost_run_once_and_leaks_no_capacity(
        system: System, cluster_api: Cluster, tmp_path: Path) -> None:
    [pod] = system.start(1, {"runs": "1"}, runtimed=False)
    marker = tmp_path / "started"
    counting = f"import time; open({str(marker)!r}, 'a').write('x'); time.sleep(3)"
    cluster_api.add_run("long", mode={"task": {"args": [sys.executable, "-c", counting]}})
    first = system.start_process(pod)
    system.wait_phases({"long": "Running"})
    cluster_api.add_run("next", mode=task(0.1))
    wait_for(lambda: system.phases()["next"] in ("Pending", "Scheduled"), timeout=20, what="next waiting")
    first.kill()  # no goodbye: its execution of "long" is lost with it
    first.communicate(timeout=10)
    second = system.start_process(pod)
    system.wait_phases({"long": "Failed", "next": "Succeeded"}, timeout=60)
    assert system.completed("long")["reason"] == "ExecutionLost"
    assert marker.read_text() == "x"  # executed once: the restarted runtimed did not start it again
    cluster_api.add_run("after", mode=task(0.1))
    system.wait_phases({"after": "Succeeded"})  # the lost Run's capacity came back
    assert system.most_over_capacity <= 0 and second.poll() is None


def test_a_function_run_runs_until_kruntimes_release_and_the_annotation_releases_another(
        system: System, cluster_api: Cluster) -> None:
    system.start(1, {"runs": "2"})
    cluster_api.add_run("fn", mode=function())
    cluster_api.add_run("fn2", mode=function())
    system.wait_phases({"fn": "Running", "fn2": "Running"})
    released = system.release("fn")
    assert released.returncode == 0, released.stderr
    system.wait_phases({"fn": "Succeeded", "fn2": "Running"})
    assert cluster_api.run("fn")["status"]["released"] is True
    cluster_api.custom.patch_namespaced_custom_object("kruntimes.io", "v1alpha1", cluster_api.namespace, "runs",
                                                      "fn2", {"metadata": {"annotations": {
                                                          "kruntimes.io/release": "true"}}})
    system.wait_phases({"fn2": "Succeeded"})


def test_release_refuses_a_task_run_saying_why(cluster_api: Cluster, kubeconfig: str) -> None:
    cluster_api.add_run("t", mode={"task": {"args": ["true"]}})
    result = subprocess.run([sys.executable, "-m", "kruntimes.cli.main", "release", f"{cluster_api.namespace}/t",
                             "--kubeconfig", kubeconfig], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 1
    assert "is not a function Run" in result.stderr
