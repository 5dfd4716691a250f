"""A Run's process is a tenant, not runtimed: the Runtime Server split, with real processes (SPEC §4.1, amended 2026-12-04).

runtimed (here: this test process, holding a stand-in for its API token) drives a
`RuntimeServer` over its Unix socket through `RemoteExecutor`, as deployed. Each attack
from issue 23 is a real Run trying it. Tests that need the Runs to be users of their own
need root (they then run as users 20001+, with /usr/bin/python3, which any user may
execute); without root they show the directory modes instead.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from kruntimes.runtimed import outcomes
from kruntimes.runtimed.lifecycle import Lifecycle
from kruntimes.runtimed.admission import Capacity
from kruntimes.runtimed.outcomes import Ended, RunRef
from kruntimes.runtimed.run_users import RunUsers
from kruntimes.runtimed.runtime_server import RuntimeServer
from kruntimes.runtimed.server_client import RemoteExecutor
from tests.unit.test_runtimed_lifecycle import POD, POD_UID, FakeApi

ROOT = os.geteuid() == 0
PY = "/usr/bin/python3" if ROOT and os.access("/usr/bin/python3", os.X_OK) else sys.executable
as_root = pytest.mark.skipif(not ROOT, reason="Runs as users of their own need a server that may change user")
NS = "team"


class Pod:
    """One Runtime Pod's two sides: runtimed's (a token, a client) and the runtime container's (the server)."""

    def __init__(self, base: Path, *, own_users: bool = ROOT) -> None:
        self.base = base
        self.socket = base / "server" / "runtime.sock"
        self.work = base / "runs"
        self.token = base / "runtimed" / "token"
        self.token.parent.mkdir(mode=0o700)
        self.token.write_text("secret-api-token")
        os.chmod(self.token, 0o600)
        self.server = RuntimeServer(self.socket, self.work, users=RunUsers(range(20001, 20010)) if own_users else None,
                                    stop_grace_seconds=5.0, log_line=lambda line: None)
        self.server.start()
        self.ended: queue.Queue[Ended] = queue.Queue()
        self.client = self.runtimed()

    def runtimed(self) -> RemoteExecutor:
        return RemoteExecutor(self.socket, self.ended.put, stop_grace_seconds=5.0)

    def workdir(self, run: RunRef) -> Path:
        return self.work / run.namespace / f"{run.name}-{run.uid}"

    def wait(self, timeout: float = 30.0) -> Ended:
        return self.ended.get(timeout=timeout)


def _pod(own_users: bool) -> Iterator[Pod]:
    # Not under pytest's tmp_path: its parents are 0700, and a Run of another user must reach its directory.
    base = Path(tempfile.mkdtemp(prefix="kruntimes-pod-"))
    os.chmod(base, 0o711)
    the_pod = Pod(base, own_users=own_users)
    yield the_pod
    the_pod.client.stop_all()
    the_pod.server.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def pod() -> Iterator[Pod]:
    yield from _pod(ROOT)


@pytest.fixture
def shared_user_pod() -> Iterator[Pod]:
    """No user range: every Run is the server's (and here runtimed's) own user."""
    yield from _pod(False)


def run(name: str) -> RunRef:
    return RunRef(NS, name, f"uid-{name}")


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def attempt(code: str) -> list[str]:
    """A Run that tries something and prints `refused: <error>` or `done`."""
    return [PY, "-c", f"try:\n    {code}\n    print('done')\nexcept OSError as exc:\n    print('refused:', type(exc).__name__)"]


def test_a_task_executes_in_the_server_and_its_end_reaches_runtimed(pod: Pod) -> None:
    pod.client.start_task(run("a"), [PY, "-c", "print('loading'); raise SystemExit(3)"])
    ended = pod.wait()
    assert (ended.phase, ended.reason, ended.exit_code) == ("Failed", outcomes.REASON_FAILED, 3)
    assert "loading" in ended.message
    wait_for(lambda: pod.server.unacknowledged() == 0)  # runtimed kept it: the server forgot it
    assert not pod.client.has("uid-a")


def test_a_task_started_through_the_server_gets_the_variables_that_name_its_devices(pod: Pod) -> None:
    # SPEC §7.7: runtimed computes KRUNTIMES_DEVICES and the env mapping; the server's process must see them.
    env = {"KRUNTIMES_DEVICES": '{"gpu":["gpu-1"]}', "GPU_MODEL": "a100"}
    code = "import os, sys; print(os.environ['KRUNTIMES_DEVICES'], os.environ['GPU_MODEL']); sys.exit(3)"
    pod.client.start_task(run("devices"), [PY, "-c", code], env=env)
    ended = pod.wait()
    assert ended.exit_code == 3 and '{"gpu":["gpu-1"]} a100' in ended.message


def test_a_function_is_kept_until_released_and_then_ends_released(pod: Pod) -> None:
    pod.client.start_function(run("f"), [PY, "-c", "import time; time.sleep(60)"])
    wait_for(lambda: [r.name for r in pod.server.executor.active()] == ["f"])
    assert pod.client.release("uid-f") is True
    ended = pod.wait()
    assert (ended.phase, ended.reason, ended.released) == ("Succeeded", outcomes.REASON_RELEASED, True)


def test_arguments_no_process_can_receive_still_end_the_run_failed(pod: Pod) -> None:
    pod.client.start_task(run("nul"), [PY, "-c", "print(1)", "a\x00b"])
    assert pod.wait().reason == outcomes.REASON_START_FAILED


def test_an_unreachable_server_ends_the_run_start_failed_instead_of_holding_its_slot(pod: Pod) -> None:
    lost = RemoteExecutor(pod.base / "nowhere.sock", pod.ended.put)
    lost.start_task(run("x"), [PY, "-c", ""])
    ended = pod.wait()
    assert (ended.run.name, ended.reason) == ("x", outcomes.REASON_START_FAILED)
    assert not lost.has("uid-x")
    lost.stop_all()


@as_root
def test_a_run_cannot_signal_runtimed(pod: Pod) -> None:
    pod.client.start_task(run("a"), attempt(f"import os; os.kill({os.getpid()}, 0)"))
    assert "refused: PermissionError" in pod.wait().message


@as_root
def test_a_run_cannot_read_runtimeds_token(pod: Pod) -> None:
    pod.client.start_task(run("a"), attempt(f"open({str(pod.token)!r}).read()"))
    assert "refused: PermissionError" in pod.wait().message


@as_root
def test_a_run_cannot_read_a_co_tenants_working_directory(pod: Pod) -> None:
    owner, snoop = run("owner"), run("snoop")
    pod.client.start_function(owner, [PY, "-c", "open('secret', 'w').write('s3'); import time; time.sleep(60)"])
    wait_for(lambda: (pod.workdir(owner) / "secret").exists())
    pod.client.start_task(snoop, attempt(f"print(open({str(pod.workdir(owner) / 'secret')!r}).read())"))
    assert "refused: PermissionError" in pod.wait().message
    pod.client.start_task(run("lister"), attempt(f"import os; print(os.listdir({str(pod.work / NS)!r}))"))
    assert "refused: PermissionError" in pod.wait().message  # not even the names of the others' directories
    assert pod.client.release(owner.uid)
    pod.wait()


@as_root
def test_each_run_is_a_user_of_its_own_and_owns_its_directory(pod: Pod) -> None:
    a, b = run("a"), run("b")
    for r in (a, b):
        pod.client.start_function(r, [PY, "-c", "import os, time; print(os.getuid()); time.sleep(60)"])
    wait_for(lambda: pod.workdir(a).exists() and pod.workdir(b).exists())
    owners = {pod.workdir(r).stat().st_uid for r in (a, b)}
    assert owners == {20001, 20002}
    for r in (a, b):
        pod.client.release(r.uid)
        pod.wait()


@pytest.mark.parametrize("users", ["own users", "the server's user"])
def test_a_run_cannot_drive_the_runtime_server_whatever_its_user(request: pytest.FixtureRequest, users: str) -> None:
    # With users of their own a Run is refused as another user; sharing runtimed's user, as the server's descendant.
    if users == "own users" and not ROOT:
        pytest.skip("Runs as users of their own need a server that may change user")
    pod = request.getfixturevalue("pod" if users == "own users" else "shared_user_pod")
    code = (f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({str(pod.socket)!r}); "
            "s.sendall(b'{\"op\": \"list\"}\\n'); assert s.recv(100) == b'', 'answered'; raise PermissionError")
    pod.client.start_task(run("a"), attempt(code))
    assert "refused:" in pod.wait().message  # connected, and closed unanswered (a reset or a broken pipe)


def test_a_runs_working_directory_is_its_own_mode_0700(pod: Pod) -> None:
    a = run("a")
    pod.client.start_function(a, [PY, "-c", "import time; time.sleep(60)"])
    wait_for(lambda: pod.workdir(a).exists())
    assert stat.S_IMODE(pod.workdir(a).stat().st_mode) == 0o700
    assert stat.S_IMODE((pod.work / NS).stat().st_mode) == 0o711  # others pass through, cannot list
    pod.client.release(a.uid)
    pod.wait()


def test_a_restarted_runtimed_adopts_what_the_server_still_executes_and_stops_the_rest(pod: Pod) -> None:
    go = pod.base / "go"
    keep, gone = run("keep"), run("gone")
    pod.client.start_task(keep, [PY, "-c", f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)"])
    pod.client.start_function(gone, [PY, "-c", "import time; time.sleep(60)"])
    wait_for(lambda: len(pod.server.executor.active()) == 2)
    pod.client._stopping.set()  # runtimed dies: it collects nothing more
    pod.client.join()
    successor = pod.client = pod.runtimed()
    successor.adopt({keep.uid})  # `gone` ended or was deleted while runtimed was away
    assert successor.has(keep.uid) and not successor.has(gone.uid)
    wait_for(lambda: [r.name for r in pod.server.executor.active()] == ["keep"])
    go.touch()
    ended = pod.wait()
    assert (ended.run, ended.reason) == (keep, outcomes.REASON_SUCCEEDED)
    wait_for(lambda: pod.server.unacknowledged() == 0)
    assert pod.ended.empty()  # the stopped one's end was dropped, not reported


def test_runtimed_through_the_server_claims_executes_and_ends_a_run(pod: Pod) -> None:
    api = FakeApi()
    api.lifecycle = Lifecycle(POD, POD_UID, Capacity((("runs", 1),)), api, api, pod.base / "unused",
                              stop_grace_seconds=5.0, state_dir=pod.base / "state", runtime_server=pod.socket)
    try:
        api.lifecycle.recover([])
        api.lifecycle.observe(api.add("a", args=[PY, "-c", "print('hi')"]))
        wait_for(lambda: api.phase("a") == "Succeeded")
        assert api.phases["a"] == ["Running", "Succeeded"]
        wait_for(lambda: api.lifecycle.guard.usage() == {})
    finally:
        api.lifecycle.shutdown()


def test_a_restarted_runtimed_writes_the_end_of_a_run_that_finished_while_it_was_away(pod: Pod) -> None:
    api = FakeApi()
    state = pod.base / "state"

    def runtimed() -> Lifecycle:
        api.lifecycle = Lifecycle(POD, POD_UID, Capacity((("runs", 1),)), api, api, pod.base / "unused",
                                  stop_grace_seconds=5.0, state_dir=state, runtime_server=pod.socket)
        return api.lifecycle

    first = runtimed()
    first.recover([])
    go = pod.base / "go"
    first.observe(api.add("a", args=[PY, "-c", f"import os, time\nwhile not os.path.exists({str(go)!r}): "
                                                "time.sleep(0.05)\nprint('done')"]))
    wait_for(lambda: api.phase("a") == "Running")
    first.executor._stopping.set()  # killed outright: no shutdown, nothing more collected
    first.executor.join()
    go.touch()
    wait_for(lambda: pod.server.unacknowledged() == 1)  # ended while no runtimed listened
    second = runtimed()
    # The follower that adoption starts may take the end from the server before recovery
    # goes on (a race CI lost once): here it always does, and hands the end on late, so a
    # recovery that counted the Run's process as lost would write ExecutionLost first.
    adopt, on_end = second.executor.adopt, second.executor._on_end

    def adopt_and_let_the_follower_take_the_end(running: set[str], **kwargs: Any) -> set[str]:
        adopted = adopt(running, **kwargs)
        wait_for(lambda: not second.executor.has("uid-a"))
        return adopted

    def hand_on_late(ended: Ended) -> None:
        time.sleep(0.5)
        on_end(ended)

    second.executor.adopt = adopt_and_let_the_follower_take_the_end  # type: ignore[method-assign]
    second.executor._on_end = hand_on_late
    try:
        second.recover([api.read_run("ns", "a")])
        wait_for(lambda: api.phase("a") == "Succeeded")
        assert api.condition("a", "Completed")["reason"] == outcomes.REASON_SUCCEEDED  # not ExecutionLost
        wait_for(lambda: second.guard.usage() == {})
    finally:
        second.shutdown()


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "kruntimes.cli.main", "runtime-server", *args]


def test_kruntimes_runtime_server_serves_runtimed_and_on_sigterm_stops_its_runs_and_hands_over_their_ends(
        tmp_path: Path) -> None:
    socket_path = tmp_path / "runtime.sock"
    server = subprocess.Popen(_command("--socket", str(socket_path), "--work-dir", str(tmp_path / "runs"),
                                       "--stop-grace", "5"), stdout=subprocess.PIPE)
    ended: queue.Queue[Ended] = queue.Queue()
    client = RemoteExecutor(socket_path, ended.put)
    try:
        wait_for(socket_path.exists)
        client.start_task(run("t"), [sys.executable, "-c", "print('from the runtime container')"])
        assert ended.get(timeout=30).reason == outcomes.REASON_SUCCEEDED
        client.start_function(run("f"), [sys.executable, "-c", "import time; time.sleep(60)"])
        wait_for(lambda: client.call({"op": "list"}, 5)["running"] != [])
        server.send_signal(signal.SIGTERM)  # the pod is going: its Runs stop, runtimed still collects their ends
        assert ended.get(timeout=30).reason == outcomes.REASON_INTERRUPTED
        assert server.wait(30) == 0
        assert b"team/t: from the runtime container" in server.stdout.read()  # the Runs' output: this container's log
    finally:
        client.stop_all()
        if server.poll() is None:
            server.kill()
            server.wait()


@pytest.mark.parametrize("args,says", [
    ([], "--socket (or KRUNTIMES_RUNTIME_SERVER) is required"),
    (["--socket", "/tmp/x.sock", "--run-uids", "lots"], "is not FIRST-LAST"),
    (["--socket", "/tmp/x.sock", "--run-uids", "0-10"], "the users must be 1 or more"),
    (["--socket", "/tmp/x.sock", "--run-uids", "100-200", "--client-uid", "150"],
     "runtimed's user 150 is in --run-uids 100-200"),
], ids=["no socket", "a range that is not one", "a range with root", "runtimed's user among the Runs'"])
def test_a_bad_setting_is_one_line_and_exit_code_2(args: list[str], says: str) -> None:
    done = subprocess.run(_command(*args), capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if not k.startswith("KRUNTIMES_")})
    assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_runtimed_started_before_its_server_waits_for_it_and_adopts_what_it_executes(pod: Pod) -> None:
    pod.server.stop()  # the runtime container is still starting
    server = RuntimeServer(pod.socket, pod.work, log_line=lambda line: None, stop_grace_seconds=5.0)
    server.executor.start_function(run("early"), [PY, "-c", "import time; time.sleep(60)"])
    adopting = threading.Thread(target=pod.client.adopt, args=({"uid-early"},))
    adopting.start()
    server.start()
    adopting.join(30)
    try:
        assert pod.client.has("uid-early")  # it listed what the server runs: it had waited for it
    finally:
        pod.client.stop_all()
        server.stop()


def test_a_symbolic_link_planted_as_a_runs_working_directory_ends_the_run_start_failed(pod: Pod) -> None:
    target = pod.base / "elsewhere"
    target.mkdir()
    victim = run("victim")
    pod.workdir(victim).parent.mkdir(parents=True)
    pod.workdir(victim).symlink_to(target)
    pod.client.start_task(victim, [PY, "-c", ""])
    ended = pod.wait()
    assert ended.reason == outcomes.REASON_START_FAILED and "symbolic link" in ended.message
    assert target.stat().st_uid == os.getuid() and stat.S_IMODE(target.stat().st_mode) != 0o700


def test_a_run_whose_process_went_with_a_restarted_server_ends_execution_lost_instead_of_running_forever(
        pod: Pod) -> None:
    lost, kept = run("lost"), run("kept")
    pod.client.start_function(lost, [PY, "-c", "import time; time.sleep(60)"])
    wait_for(lambda: [r.name for r in pod.server.executor.active()] == ["lost"])
    crashed = pod.server  # its container restarts: the listener and every process in it are gone, no end said
    assert crashed._server is not None
    crashed._server.shutdown()
    crashed._server.server_close()
    crashed.executor._on_end = lambda ended: None  # a crashed server tells nobody
    crashed.executor.stop_all()
    pod.server = RuntimeServer(pod.socket, pod.work, log_line=lambda line: None, stop_grace_seconds=5.0)
    pod.server.start()
    pod.client.start_function(kept, [PY, "-c", "import time; time.sleep(60)"])  # started on the new server
    ended = pod.wait()
    assert (ended.run, ended.reason) == (lost, outcomes.REASON_EXECUTION_LOST)
    assert "the Runtime Server restarted" in ended.message
    assert pod.client.has(kept.uid) and not pod.client.has(lost.uid)
    assert pod.client.release(kept.uid)
    assert pod.wait().run == kept
