"""`kruntimes scheduler` as a process: kubeconfig, JSON logs, probes and metrics, graceful SIGTERM,
and waiting for `kruntimes db upgrade` instead of migrating (SPEC §5)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import IO, Any, Iterator

import pytest
from kubernetes import client

from kruntimes.journal import migrate
from kruntimes.journal.backends import Journal
from tests.integration.cluster import Cluster, wait_for
from tests.integration.processes import kubeconfig  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]


class Process:
    """The scheduler process and its JSON log lines, read on a thread."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.popen = subprocess.Popen([sys.executable, "-m", "kruntimes.cli.main", "scheduler", *args],
                                      stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, args=(self.popen.stderr,))
        self._reader.start()

    def _read(self, stream: IO[str] | None) -> None:
        assert stream is not None
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def logs(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in list(self.lines)]

    def port(self) -> int:
        started = wait_for(lambda: next((e for e in self.logs() if e["message"] == "starting"), None),
                           timeout=20, what="the 'starting' log line")
        return int(started["http_port"])

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port()}{path}", timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def finish(self, timeout: float = 20) -> int:
        try:
            return self.popen.wait(timeout)
        finally:
            if self.popen.poll() is None:
                self.popen.kill()
                self.popen.wait()
            self._reader.join()
            assert self.popen.stdout is not None
            self.popen.stdout.close()


@pytest.fixture
def run_scheduler(kubeconfig: str) -> Iterator[Any]:
    started: list[Process] = []

    def start(*args: str) -> Process:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "KRUNTIMES_JOURNAL_URL": ""}
        started.append(Process(["--kubeconfig", kubeconfig, *args], env))
        return started[-1]

    yield start
    for process in started:
        if process.popen.poll() is None:
            process.popen.kill()
        process.finish()


def test_the_scheduler_process_schedules_serves_probes_and_metrics_and_shuts_down_on_sigterm(
        run_scheduler: Any, cluster_api: Cluster, kube_namespace: str, tmp_path: Path) -> None:
    journal = f"sqlite:///{tmp_path / 'journal.db'}"
    cluster_api.add_pod("python-0", runs=2)
    process = run_scheduler("--namespace", kube_namespace, "--leader-elect-resource-namespace", kube_namespace,
                            "--leader-elect-identity", "process-a", "--leader-elect-lease-duration", "2",
                            "--leader-elect-renew-deadline", "1", "--leader-elect-retry-period", "0.2",
                            "--http-address", "127.0.0.1", "--http-port", "0", "--binders", "1",
                            "--journal-url", journal)
    wait_for(lambda: process.get("/readyz")[0] == 200, timeout=20, what="/readyz 200")
    assert process.get("/healthz") == (200, "ok\n")
    cluster_api.add_run("r")
    wait_for(lambda: cluster_api.placements() == {"r": "python-0"}, timeout=20, what="the Run placed")
    # The status is visible before its answer is back from the binder process: wait for the count.
    wait_for(lambda: 'kruntimes_scheduler_schedule_results_total{result="scheduled"} 1.0' in process.get("/metrics")[1],
             what="the placing cycle's result counted")
    status, metrics = process.get("/metrics")
    assert status == 200
    assert "kruntimes_scheduler_leader 1.0" in metrics and "kruntimes_journal_records" in metrics
    process.popen.send_signal(signal.SIGTERM)
    assert process.finish() == 0
    messages = [entry["message"] for entry in process.logs()]  # every line is JSON
    assert messages[-1] == "stopped" and "shutting down" in messages
    lease = client.CoordinationV1Api(cluster_api.core.api_client).read_namespaced_lease("kruntimes-scheduler",
                                                                                       kube_namespace)
    assert lease.spec.holder_identity is None  # released, not left to expire
    store = Journal.open(journal)
    try:
        leader = [r.payload for r in store.read(kinds={"leader"})]
    finally:
        store.close()
    assert [(r["event"], r.get("reason")) for r in leader] == [("acquired", None), ("lost", "shutdown")]


def test_a_setting_that_cannot_work_is_one_line_and_exit_code_2(run_scheduler: Any) -> None:
    process = run_scheduler("--leader-elect-lease-duration", "5", "--leader-elect-renew-deadline", "8")
    assert process.finish() == 2
    assert len(process.lines) == 1
    assert process.lines[0].startswith("kruntimes scheduler: need 0 < retry period (2.0) < renew deadline (8.0)")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_replica_on_an_unmigrated_journal_waits_with_probes_up_then_starts_once_db_upgrade_ran(
        run_scheduler: Any, kube_namespace: str, tmp_path: Path) -> None:
    journal, port = f"sqlite:///{tmp_path / 'journal.db'}", _free_port()
    process = run_scheduler("--namespace", kube_namespace, "--leader-elect-resource-namespace", kube_namespace,
                            "--http-address", "127.0.0.1", "--http-port", str(port), "--journal-url", journal,
                            "--journal-migrate", "never", "--journal-schema-wait", "60")
    wait_for(lambda: any(e["message"].startswith("waiting for the journal schema") for e in process.logs()),
             timeout=20, what="the 'waiting for the journal schema' log line")

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    assert get("/healthz")[0] == 200 and get("/readyz")[0] == 503
    assert "kruntimes_journal_schema_waiting 1.0" in get("/metrics")[1]
    assert migrate.current_revision(journal) is None  # the replica migrated nothing
    migrate.upgrade(journal)  # what `kruntimes db upgrade` does
    wait_for(lambda: get("/readyz")[0] == 200, timeout=30, what="/readyz 200 after the upgrade")
    assert "kruntimes_journal_schema_waiting 0.0" in get("/metrics")[1]
    process.popen.send_signal(signal.SIGTERM)
    assert process.finish() == 0


def test_a_replica_whose_schema_never_arrives_exits_2_with_one_line_naming_the_job(
        run_scheduler: Any, tmp_path: Path) -> None:
    process = run_scheduler("--http-address", "127.0.0.1", "--http-port", "0",
                            "--journal-url", f"sqlite:///{tmp_path / 'journal.db'}",
                            "--journal-migrate", "never", "--journal-schema-wait", "0.5")
    assert process.finish() == 2
    final = process.lines[-1]
    assert final.startswith("kruntimes scheduler: journal schema is at revision 'empty' after 0.5 s"), final
    assert "kruntimes-db-upgrade Job" in final
