"""`kruntimes controller` as a process: it creates a Runtime's pods and exits 0 on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from typing import Iterator

from kruntimes.api import models
from tests.integration.cluster import Cluster, wait_for
from tests.integration.processes import ROOT, kubeconfig  # noqa: F401 - a fixture, found by name
from tests.integration.test_controller_runner import create_runtime, pods


def test_the_controller_creates_a_runtimes_pods_and_exits_zero_on_sigterm(kubeconfig: str,  # noqa: F811
                                                                          cluster_api: Cluster) -> None:
    create_runtime(cluster_api, 2, {"runs": "2"})
    process = subprocess.Popen([sys.executable, "-m", "kruntimes.cli.main", "controller", "--kubeconfig", kubeconfig,
                                "--namespace", cluster_api.namespace, "--leader-elect-resource-namespace",
                                cluster_api.namespace, "--resync-period", "1", "--http-port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        wait_for(lambda: len(pods(cluster_api)) == 2, timeout=30, what="two runtime pods")
        port = next(json.loads(line)["http_port"] for line in _lines(process) if '"starting"' in line)
        for probe in ("healthz", "readyz"):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/{probe}", timeout=10) as answer:
                assert answer.status == 200
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert all(p.metadata.labels[models.RUNTIME_LABEL] == "python" for p in pods(cluster_api))


def _lines(process: subprocess.Popen[str]) -> Iterator[str]:
    assert process.stderr is not None
    for line in process.stderr:
        yield line
