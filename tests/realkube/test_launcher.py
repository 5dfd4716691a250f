"""`python -m tests.realkube up`: what a person (and .ci/realkube) starts by hand.

It prints the kubeconfig's path once the server answers, serves the release's version
through it with RBAC and TokenRequest working, and on SIGTERM stops everything it
started and exits 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import kubernetes.client
import pytest

from tests.emulator.fixtures import api_client_from_kubeconfig
from tests.realkube import binaries, controlplane
from tests.realkube.fixtures import bin_dir_or_skip

ROOT = Path(__file__).resolve().parents[2]


def children_of(pid: int) -> list[int]:
    """Every process whose parent is `pid`, read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.fixture
def launched(tmp_path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, binaries.BIN_ENV: str(bin_dir_or_skip())}
    process = subprocess.Popen([sys.executable, "-m", "tests.realkube", "up", "--dir", str(tmp_path / "kr")],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield process
    if process.poll() is None:
        process.kill()
        process.wait()


def test_up_prints_the_kubeconfig_serves_the_release_and_stops_everything_on_sigterm(
        launched: subprocess.Popen[str], tmp_path: Path) -> None:
    assert launched.stdout is not None
    printed = launched.stdout.readline().strip()
    assert printed == str(tmp_path / "kr" / "kubeconfig"), launched.stderr.read() if launched.stderr else ""
    started = children_of(launched.pid)
    assert len(started) == 2  # etcd and kube-apiserver

    api = api_client_from_kubeconfig(printed)
    try:
        assert kubernetes.client.VersionApi(api).get_code().git_version == "v1.37.2"
        core = kubernetes.client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": "launcher"}})
        core.create_namespaced_service_account("launcher", {"metadata": {"name": "runtimed"}})
        token = core.create_namespaced_service_account_token(
            "runtimed", "launcher", {"spec": {"audiences": [], "expirationSeconds": 600}})
        assert token.status.token
    finally:
        api.close()

    launched.send_signal(signal.SIGTERM)
    assert launched.wait(timeout=30) == 0
    assert [pid for pid in started if Path(f"/proc/{pid}").exists()] == []


def test_a_control_plane_given_cpus_runs_every_thread_of_its_processes_on_them_alone(tmp_path: Path) -> None:
    # bench/realkube.py --server-cpus: the server on CPUs of its own, as on a cluster's
    # control-plane nodes; a thread left on another CPU would take the schedulers' time.
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: a process pinned to it looks like one that is not")
    cpus = {min(os.sched_getaffinity(0))}
    with controlplane.ControlPlane(tmp_path / "pinned", bin_dir=bin_dir_or_skip(), cpus=cpus) as plane:
        api = api_client_from_kubeconfig(str(plane.kubeconfig))
        try:
            assert kubernetes.client.VersionApi(api).get_code().git_version == "v1.37.2"
        finally:
            api.close()
        processes = [process.pid for _, process, _ in plane._processes]
        assert len(processes) == 2  # etcd and kube-apiserver
        for pid in processes:
            threads = [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]
            assert len(threads) > 1  # Go's runtime threads, each checked
            assert {tid: os.sched_getaffinity(tid) for tid in threads} == {tid: cpus for tid in threads}
