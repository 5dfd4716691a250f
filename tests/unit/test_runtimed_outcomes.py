"""runtimed's terminal statuses and restart recovery (SPEC §3.7, §4.1)."""

from __future__ import annotations

from datetime import datetime, timezone

from kruntimes.runtimed import outcomes
from kruntimes.runtimed.outcomes import Ended, RunRef, ended_status, lost_executions
from kruntimes.scheduler.status import terminal_status

NOW = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
RUN = RunRef("team", "train", "uid-1")
RUNNING = {"phase": "Running", "assignment": {"podName": "p", "podUID": "uid-p"},
           "conditions": [{"type": "Scheduled", "status": "True", "reason": "Scheduled", "message": "m",
                           "lastTransitionTime": "2026-12-01T10:00:00Z"}]}


def test_a_terminal_status_is_exactly_what_the_shared_helper_writes() -> None:
    ended = outcomes.exited(RUN, 3, ["boom"])
    assert ended_status(RUNNING, ended, NOW) == terminal_status(RUNNING, "Failed", outcomes.REASON_FAILED,
                                                                 ended.message, NOW)


def test_a_terminal_status_keeps_the_assignment_and_sets_completion_time() -> None:
    status = ended_status(RUNNING, outcomes.exited(RUN, 0, []), NOW)
    assert status["phase"] == "Succeeded" and status["completionTime"] == "2026-12-01T12:00:00Z"
    assert status["assignment"] == RUNNING["assignment"]
    completed = next(c for c in status["conditions"] if c["type"] == "Completed")
    assert (completed["reason"], completed["message"]) == ("ProcessSucceeded", "the process exited with code 0")


def test_a_released_function_run_is_marked_released_so_it_no_longer_counts() -> None:
    status = ended_status(RUNNING, outcomes.released(RUN), NOW)
    assert status["released"] is True and status["phase"] == "Succeeded"


def test_exit_codes_read_as_sentences() -> None:
    assert outcomes.describe_exit(0) == ("Succeeded", "ProcessSucceeded", "the process exited with code 0")
    assert outcomes.describe_exit(137)[2] == "the process exited with code 137"
    assert outcomes.describe_exit(-15)[2] == "the process was killed by SIGTERM (signal 15)"


def test_after_a_restart_running_runs_without_a_process_end_failed_with_a_clear_reason() -> None:
    kept, lost = RunRef("team", "kept", "uid-k"), RunRef("team", "lost", "uid-l")
    ended = lost_executions([lost, kept], has_process=lambda uid: uid == "uid-k")
    assert ended == [Ended(lost, "Failed", outcomes.REASON_EXECUTION_LOST, outcomes.EXECUTION_LOST)]
    assert "no longer has this Run's process" in ended[0].message


def test_a_start_failure_says_what_to_check() -> None:
    ended = outcomes.start_failed(RUN, ["train.py"], FileNotFoundError(2, "No such file or directory"))
    assert ended.message == ("could not start 'train.py': No such file or directory; "
                             "check spec.mode args and the Runtime's image")
