"""What the process tests share: a kubeconfig for the emulator (or the cluster), and scheduler processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any, Iterator

import pytest

from tests.emulator.fixtures import real_cluster_kubeconfig
from tests.integration.cluster import wait_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def kubeconfig(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The real cluster's kubeconfig, or one pointing at the emulator."""
    path = real_cluster_kubeconfig()
    if path is not None:
        return path
    host = request.getfixturevalue("emulator").host
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "emulator",
        "clusters": [{"name": "emulator", "cluster": {"server": host}}],
        "users": [{"name": "test", "user": {}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "test"}}]}))
    return str(config)


class Process:
    """A `kruntimes scheduler` process and its JSON log lines, read on a thread.

    It leads a process group of its own (with its journal writer process), so that
    ``kill`` ends both at once, as the kernel does when a container is killed.
    """

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.popen = subprocess.Popen([sys.executable, "-m", "kruntimes.cli.main", "scheduler", *args],
                                      stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT,
                                      start_new_session=True)
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
                           timeout=60, what="the 'starting' log line")  # a process start-up, on a loaded machine
        return int(started["http_port"])

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port()}{path}", timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def kill(self) -> None:
        """SIGKILL the scheduler and its writer process: nothing is flushed, released or recorded."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.finish()

    def finish(self, timeout: float = 20) -> int:
        try:
            return self.popen.wait(timeout)
        finally:
            if self.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
            self._reader.join()
            assert self.popen.stdout is not None
            self.popen.stdout.close()


@pytest.fixture
def run_scheduler(kubeconfig: str) -> Iterator[Any]:
    """Start `kruntimes scheduler --kubeconfig ...` processes; any still running are killed at teardown."""
    started: list[Process] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Process:
        environment = {**os.environ, "PYTHONPATH": str(ROOT), "KRUNTIMES_JOURNAL_URL": "", **(env or {})}
        started.append(Process(["--kubeconfig", kubeconfig, *args], environment))
        return started[-1]

    yield start
    for process in started:
        if process.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.popen.pid, signal.SIGKILL)
        process.finish()
