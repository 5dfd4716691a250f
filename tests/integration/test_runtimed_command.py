"""`kruntimes runtimed` as a process: a Scheduled Run executes, its output reaches the pod log, SIGTERM exits 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path


from kruntimes.api import models
from kruntimes.scheduler import status as st
from tests.integration.cluster import Cluster, wait_for
from tests.integration.processes import ROOT, kubeconfig  # noqa: F401 - a fixture, found by name


def runtimed(kubeconfig: str, tmp_path: Path, *, server: Path | None = None,
             **identity: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KRUNTIMES_POD_")}
    if server is not None:
        env["KRUNTIMES_RUNTIME_SERVER"] = str(server)
    env.update({f"KRUNTIMES_POD_{k.upper()}": v for k, v in identity.items()})
    return subprocess.Popen([sys.executable, "-m", "kruntimes.cli.main", "runtimed", "--kubeconfig", kubeconfig,
                             "--work-dir", str(tmp_path / "work"), "--heartbeat-period", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def test_a_scheduled_run_executes_its_output_reaches_the_pod_log_and_sigterm_exits_zero(
        kubeconfig: str, cluster_api: Cluster, tmp_path: Path) -> None:
    pod = cluster_api.add_pod("p1", runs=1)
    cluster_api.add_run("hello", mode={"task": {"args": [sys.executable, "-c", "print('hello from a Run')"]}})
    current = cluster_api.run("hello")
    body = {**current, "status": st.scheduled_status(None, "p1", pod["uid"], datetime.now(timezone.utc))}
    cluster_api.custom.replace_namespaced_custom_object_status(models.GROUP, models.VERSION, cluster_api.namespace,
                                                               "runs", "hello", body)
    process = runtimed(kubeconfig, tmp_path, name="p1", namespace=cluster_api.namespace, uid=pod["uid"])
    try:
        wait_for(lambda: cluster_api.phases()["hello"] == "Succeeded", timeout=30, what="the Run Succeeded")
    finally:
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert f"{cluster_api.namespace}/hello: hello from a Run" in stdout.splitlines()
    assert all(json.loads(line)["level"] for line in stderr.splitlines())  # its own logs: JSON lines


def test_without_its_pod_identity_runtimed_says_what_is_missing_and_exits_2(tmp_path: Path) -> None:
    process = runtimed(str(tmp_path / "no-kubeconfig"), tmp_path)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 2
    assert "identity is missing (--pod-name, --pod-namespace, --pod-uid)" in stderr


def runtime_server(socket_path: Path, tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "kruntimes.cli.main", "runtime-server", "--socket",
                             str(socket_path), "--work-dir", str(tmp_path / "runs")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def test_split_in_two_processes_the_run_executes_in_the_runtime_server_and_survives_runtimed_being_killed(
        kubeconfig: str, cluster_api: Cluster, tmp_path: Path) -> None:
    # As deployed (SPEC §4.1, amended 2026-12-04): runtimed with the credentials, the Runs in the server.
    pod = cluster_api.add_pod("p1", runs=1)
    go, started = tmp_path / "go", tmp_path / "started"
    wait_then_print = (f"import os, time\nopen({str(started)!r}, 'w').close()\n"
                       f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\nprint('done')")
    cluster_api.add_run("long", mode={"task": {"args": [sys.executable, "-c", wait_then_print]}})
    current = cluster_api.run("long")
    body = {**current, "status": st.scheduled_status(None, "p1", pod["uid"], datetime.now(timezone.utc))}
    cluster_api.custom.replace_namespaced_custom_object_status(models.GROUP, models.VERSION, cluster_api.namespace,
                                                               "runs", "long", body)
    socket_path = tmp_path / "server" / "runtime.sock"
    server = runtime_server(socket_path, tmp_path)
    identity = {"name": "p1", "namespace": cluster_api.namespace, "uid": pod["uid"]}
    try:
        first = runtimed(kubeconfig, tmp_path, server=socket_path, **identity)
        # Running is written when runtimed claims the Run, before it asks the server to start the
        # process: a kill in between leaves nothing to adopt (ExecutionLost, rightly). Wait for the process.
        wait_for(lambda: cluster_api.phases()["long"] == "Running" and started.exists(), timeout=30,
                 what="the Run Running, its process started")
        first.kill()  # killed outright: the Run's process is the server's and keeps running
        first.communicate(timeout=30)
        second = runtimed(kubeconfig, tmp_path, server=socket_path, **identity)
        go.touch()
        wait_for(lambda: cluster_api.phases()["long"] == "Succeeded", timeout=30,
                 what="the Run Succeeded, adopted by the second runtimed (not ExecutionLost)")
        second.send_signal(signal.SIGTERM)
        runtimed_out, _ = second.communicate(timeout=30)
    finally:
        server.send_signal(signal.SIGTERM)
        server_out, _ = server.communicate(timeout=30)
    assert second.returncode == 0 and server.returncode == 0
    completed = next(c for c in cluster_api.run("long")["status"]["conditions"] if c["type"] == "Completed")
    assert completed["reason"] == "ProcessSucceeded"
    assert f"{cluster_api.namespace}/long: done" in server_out.splitlines()  # the runtime container's log
    assert "done" not in runtimed_out
