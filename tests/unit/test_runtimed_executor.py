"""runtimed executes task Runs as real processes and keeps function Runs until released (SPEC §4.1).

Every test starts short real processes (`sys.executable -c ...`) and waits for the
executor's report; nothing is mocked below the subprocess boundary.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kruntimes.runtimed import outcomes
from kruntimes.runtimed.executor import TAIL_LINE_CHARS, TAIL_LINES, Executor
from kruntimes.runtimed.outcomes import Ended, RunRef

PY = sys.executable
RUN = RunRef("team", "train", "uid-1")


class Harness:
    def __init__(self, root: Path, **kwargs) -> None:  # type: ignore[no-untyped-def]
        self.ended: queue.Queue[Ended] = queue.Queue()
        self.lines: list[str] = []
        self.lock = threading.Lock()
        self.executor = Executor(root, self.ended.put, log=self._log, **kwargs)

    def _log(self, line: str) -> None:
        with self.lock:
            self.lines.append(line)

    def wait(self, timeout: float = 20.0) -> Ended:
        ended = self.ended.get(timeout=timeout)
        self.executor.join(timeout)
        return ended


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    harness = Harness(tmp_path / "runs", stop_grace_seconds=5.0)
    yield harness
    harness.executor.stop_all()


def test_a_task_that_exits_zero_succeeds_and_its_output_reaches_the_pod_log_under_its_name(h: Harness) -> None:
    h.executor.start_task(RUN, [PY, "-c", "print('hello'); import sys; print('oops', file=sys.stderr)"])
    ended = h.wait()
    assert (ended.phase, ended.reason, ended.exit_code) == ("Succeeded", outcomes.REASON_SUCCEEDED, 0)
    assert h.lines == ["team/train: hello", "team/train: oops"]
    assert ended.message == "the process exited with code 0; last output:\nhello\noops"


def test_a_task_that_exits_non_zero_fails_with_its_exit_code_and_last_output(h: Harness) -> None:
    h.executor.start_task(RUN, [PY, "-c", "print('loading'); raise SystemExit(3)"])
    ended = h.wait()
    assert (ended.phase, ended.reason, ended.exit_code) == ("Failed", outcomes.REASON_FAILED, 3)
    assert ended.message.startswith("the process exited with code 3; last output:\nloading")


def test_args_are_an_argv_never_a_shell_command(h: Harness, tmp_path: Path) -> None:
    h.executor.start_task(RUN, [PY, "-c", "import sys; print(sys.argv[1])", "$(touch pwned); *"])
    h.wait()
    assert h.lines == ["team/train: $(touch pwned); *"]


def test_each_run_works_in_a_directory_of_its_own_with_home_and_its_identity(h: Harness, tmp_path: Path) -> None:
    code = "import os; print(os.getcwd()); print(os.environ['HOME']); print(os.environ['KRUNTIMES_RUN_NAME'])"
    h.executor.start_task(RUN, [PY, "-c", code])
    h.wait()
    workdir = str(tmp_path / "runs" / "team" / "train-uid-1")
    assert h.lines == [f"team/train: {workdir}", f"team/train: {workdir}", "team/train: train"]


def test_the_working_directory_is_removed_when_the_run_ends_unless_kept(tmp_path: Path) -> None:
    gone, kept = Harness(tmp_path / "a"), Harness(tmp_path / "b", keep_workdirs=True)
    for harness in (gone, kept):
        harness.executor.start_task(RUN, [PY, "-c", "open('out.txt', 'w').write('x')"])
        harness.wait()
    assert not (tmp_path / "a" / "team" / "train-uid-1").exists()
    assert (tmp_path / "b" / "team" / "train-uid-1" / "out.txt").read_text() == "x"


def test_only_a_bounded_tail_of_output_is_kept_for_the_status_message(h: Harness) -> None:
    code = f"for i in range(500): print(str(i) + 'x' * {TAIL_LINE_CHARS * 2})\nraise SystemExit(1)"
    h.executor.start_task(RUN, [PY, "-c", code])
    ended = h.wait()
    assert len(h.lines) == 500
    assert len(ended.message) <= outcomes.MAX_MESSAGE_CHARS
    assert ended.message.endswith("...") and "499x" in ended.message and "\n0x" not in ended.message
    assert TAIL_LINES >= ended.message.count("\n")


def test_a_program_that_does_not_exist_fails_at_once_saying_what_could_not_start(h: Harness) -> None:
    h.executor.start_task(RUN, ["no-such-program-kruntimes"])
    ended = h.wait()
    assert (ended.phase, ended.reason) == ("Failed", outcomes.REASON_START_FAILED)
    assert "could not start 'no-such-program-kruntimes'" in ended.message
    assert not h.executor.has(RUN.uid)


@pytest.mark.parametrize("args, said", [
    (["bad\x00program"], "argument 1 contains a NUL character"),
    ([PY, "-c", "print(1)", "a\x00b"], "argument 4 contains a NUL character"),
    ([PY, "-c", "print(1)", "lone \ud800 surrogate"], "argument 4 is not valid Unicode"),
    (["\udcff"], "argument 1 is not valid Unicode"),
    ([""], "could not start ''"),
], ids=["a NUL in the program", "a NUL in an argument", "a lone surrogate", "an escaped byte", "an empty program"])
def test_arguments_no_process_can_receive_end_the_run_failed_saying_which(h: Harness, args: list[str],
                                                                          said: str) -> None:
    h.executor.start_task(RUN, args)
    ended = h.wait()
    assert (ended.phase, ended.reason) == ("Failed", outcomes.REASON_START_FAILED)
    assert said in ended.message
    assert not h.executor.has(RUN.uid)


def test_a_function_with_a_nul_in_its_args_ends_failed_too(h: Harness) -> None:
    h.executor.start_function(RUN, [PY, "-c", "\x00"])
    ended = h.wait()
    assert (ended.phase, ended.reason) == ("Failed", outcomes.REASON_START_FAILED)
    assert "argument 3 contains a NUL character" in ended.message


def test_a_task_killed_by_a_signal_fails_naming_the_signal(h: Harness) -> None:
    h.executor.start_task(RUN, [PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    ended = h.wait()
    assert (ended.phase, ended.reason) == ("Failed", outcomes.REASON_KILLED)
    assert "killed by SIGKILL (signal 9)" in ended.message


def test_a_function_run_keeps_its_process_until_released_then_succeeds_released(h: Harness) -> None:
    h.executor.start_function(RUN, [PY, "-c", "import time; print('serving', flush=True); time.sleep(60)"])
    time.sleep(0.3)
    assert h.ended.empty() and h.executor.has(RUN.uid)
    assert h.executor.release(RUN.uid)
    ended = h.wait()
    assert (ended.phase, ended.reason, ended.released) == ("Succeeded", outcomes.REASON_RELEASED, True)


def test_a_function_run_without_a_process_is_held_until_released(h: Harness) -> None:
    h.executor.start_function(RUN)
    assert h.executor.has(RUN.uid) and h.ended.empty()
    h.executor.release(RUN.uid)
    assert h.wait().released


def test_a_function_process_that_exits_by_itself_ends_the_run_by_its_exit_code(h: Harness) -> None:
    h.executor.start_function(RUN, [PY, "-c", "raise SystemExit(2)"])
    ended = h.wait()
    assert (ended.phase, ended.released) == ("Failed", False)
    assert ended.message.startswith("the process exited with code 2 before the Run was released")


def test_releasing_a_task_run_is_refused(h: Harness) -> None:
    h.executor.start_task(RUN, [PY, "-c", "import time; time.sleep(0.2)"])
    assert not h.executor.release(RUN.uid)
    assert h.wait().phase == "Succeeded"


def test_a_task_ends_when_its_process_ends_even_if_it_left_a_child_holding_its_output(h: Harness) -> None:
    code = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); print('done')"
    started = time.monotonic()
    h.executor.start_task(RUN, [PY, "-c", code])
    assert h.wait().phase == "Succeeded"
    assert time.monotonic() - started < 30


def test_stopping_runtimed_ends_each_executing_run_failed_saying_runtimed_stopped(h: Harness) -> None:
    h.executor.start_task(RUN, [PY, "-c", "import time; time.sleep(60)"])
    h.executor.stop_all()
    ended = h.wait()
    assert (ended.phase, ended.reason) == ("Failed", outcomes.REASON_INTERRUPTED)


def test_a_stop_that_arrives_while_the_process_is_starting_still_stops_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Seen under load in the end-to-end suite: a pod deleted right after the claim
    # stopped the Run before its process existed, and the process then ran on unstopped.
    # (Working directories kept: removing it on the stop would only hide the race.)
    h = Harness(tmp_path / "runs", stop_grace_seconds=5.0, keep_workdirs=True)
    popen = subprocess.Popen

    def stopped_first(*args, **kwargs):  # type: ignore[no-untyped-def]
        assert h.executor.stop(RUN.uid)  # the stop wins the race to the not-yet-started process
        return popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", stopped_first)
    h.executor.start_task(RUN, [PY, "-c", "import time; time.sleep(60)"])
    ended = h.ended.get(timeout=5)
    assert (ended.phase, ended.reason) == ("Failed", outcomes.REASON_INTERRUPTED)
    h.executor.join(10)
    assert not any(t.is_alive() for t in h.executor._threads), "the started process ran on after its stop"
    assert h.ended.empty()  # one end, reported once


def test_one_run_cannot_be_started_twice(h: Harness) -> None:
    h.executor.start_function(RUN)
    with pytest.raises(ValueError, match="already executing"):
        h.executor.start_task(RUN, [PY, "-c", "pass"])


def test_children_a_run_leaves_behind_are_reaped_once_they_exit_so_no_zombies_pile_up(tmp_path: Path) -> None:
    # In a fresh interpreter made a child subreaper, as runtimed is in its container:
    # the task's child is killed with the task's process group and adopted by it.
    script = f"""
import os, queue, sys, time
from pathlib import Path
from kruntimes.runtimed.executor import Executor, _zombie_children, become_subreaper
assert become_subreaper()
ended = queue.Queue()
executor = Executor(Path({str(tmp_path)!r}), ended.put, log=lambda line: None)
code = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])"
executor.start_task(__import__('kruntimes.runtimed.outcomes', fromlist=['RunRef']).RunRef('ns', 'r', 'u'),
                    [sys.executable, '-c', code])
ended.get(timeout=20)
executor.join(20)
deadline = time.monotonic() + 10
while not _zombie_children(os.getpid()) and time.monotonic() < deadline:
    time.sleep(0.05)
assert _zombie_children(os.getpid()), "expected the left-behind child as a zombie"
reaped = executor.reap_orphans()
assert reaped >= 1 and _zombie_children(os.getpid()) == [], (reaped, _zombie_children(os.getpid()))
print("ok", reaped)
"""
    result = subprocess.run([PY, "-c", script], capture_output=True, text=True, timeout=60,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok")
