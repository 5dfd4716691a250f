"""A restarted runtimed stops the processes a killed predecessor left running, and only those (SPEC §4.1).

Real processes, each in a process group of its own as the executor starts them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kruntimes.runtimed.outcomes import RunRef
from kruntimes.runtimed.pidfiles import PidFiles, group_alive, start_ticks

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="pid files need Linux's /proc")

PY = sys.executable
RUN = RunRef("ns", "train", "uid-1")


def spawn(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([PY, "-c", code], start_new_session=True, stdout=subprocess.PIPE)


def wait_ready(process: subprocess.Popen[bytes]) -> int:
    """The process prints a pid (its child's, or its own) once it is set up."""
    assert process.stdout is not None
    return int(process.stdout.readline())


WITH_A_CHILD = ("import subprocess, sys, time\n"
                "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                "print(child.pid, flush=True); time.sleep(60)")
IGNORING_SIGTERM = "import os, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint(os.getpid(), " \
                   "flush=True); time.sleep(60)"


@pytest.mark.parametrize("code", [WITH_A_CHILD, IGNORING_SIGTERM],
                         ids=["a process and the child it started", "a process that ignores SIGTERM"])
def test_processes_a_killed_runtimed_left_running_are_stopped_by_its_successor(tmp_path: Path, code: str) -> None:
    process = spawn(code)
    try:
        other = wait_ready(process)
        PidFiles(tmp_path).record(RUN, process.pid)  # as the predecessor's executor did
        stopped = PidFiles(tmp_path).stop_predecessors(grace_seconds=0.5)
        assert stopped == [RUN]
        assert not group_alive(process.pid) and start_ticks(other) is None
        assert PidFiles(tmp_path).recorded() == []
    finally:
        process.kill()
        process.wait()


def test_a_pid_that_now_belongs_to_another_process_is_left_alone(tmp_path: Path) -> None:
    process = spawn("import os, time; print(os.getpid(), flush=True); time.sleep(60)")
    try:
        wait_ready(process)
        PidFiles(tmp_path).record(RUN, process.pid)
        (path,) = tmp_path.glob("*.pid.json")
        data = json.loads(path.read_text())
        path.write_text(json.dumps({**data, "startTicks": data["startTicks"] - 1}))  # started at another time
        assert PidFiles(tmp_path).stop_predecessors(grace_seconds=0.5) == []
        time.sleep(0.1)
        assert process.poll() is None and PidFiles(tmp_path).recorded() == []
    finally:
        process.kill()
        process.wait()


def test_a_pid_file_whose_process_ended_long_ago_is_only_removed(tmp_path: Path) -> None:
    process = spawn("import time; print(0, flush=True); time.sleep(0.3)")
    wait_ready(process)
    PidFiles(tmp_path).record(RUN, process.pid)
    assert len(PidFiles(tmp_path).recorded()) == 1
    process.wait()
    assert PidFiles(tmp_path).stop_predecessors(grace_seconds=0.5) == []
    assert PidFiles(tmp_path).recorded() == []
