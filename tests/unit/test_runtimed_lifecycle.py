"""runtimed end to end on one pod, against an in-memory API with resourceVersions (SPEC §4.1).

The fake API refuses a status write at a stale resourceVersion (409) and, like a
watch, hands every accepted write straight back to runtimed. Runs execute as real
short processes.
"""

from __future__ import annotations

import copy
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import pytest

from kruntimes.runtimed import outcomes
from kruntimes.runtimed.admission import RESERVED, Capacity, Decision
from kruntimes.runtimed.lifecycle import RELEASE_ANNOTATION, Lifecycle, utcnow
from kruntimes.runtimed.reading import assigned_run
from kruntimes.scheduler import status as st
from kruntimes.scheduler.projection import RunInfo

PY = sys.executable
POD, POD_UID = "python-abcde", "uid-pod"


class ServerError(st.ApiError):
    def __init__(self, retry_after: float | None) -> None:
        super().__init__("the server answered 500")
        self.retry_after = retry_after


class FakeApi:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.lock = threading.RLock()
        self.lifecycle: Lifecycle | None = None
        self.conflict_next: set[str] = set()
        self.fail_next: dict[str, bool] = {}  # name -> whether the failed write landed anyway
        self.phases: dict[str, list[str]] = {}
        self.attempts: dict[str, int] = {}
        self.failing: dict[str, int] = {}  # name -> how many more status writes answer 500 (nothing lands)
        self.reads_failing = 0  # how many more reads answer 500
        self.retry_after: float | None = None  # what a 500 above asks for

    def add(self, name: str, phase: str = "Scheduled", *, args: list[str] | None = None, function: bool = False,
            minute: int = 0, requests: dict[str, str] | None = None) -> dict[str, Any]:
        mode = {"function": {"args": args} if args else {}} if function else {"task": {"args": args or [PY, "-c", ""]}}
        obj = {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1"},
               "spec": {"runtime": "rt", "mode": mode, **({"resources": {"requests": requests}} if requests else {})},
               "status": {"phase": phase, "assignment": {"podName": POD, "podUID": POD_UID},
                          "conditions": [{"type": "Scheduled", "status": "True", "reason": "Scheduled",
                                          "message": "", "lastTransitionTime": f"2026-12-01T10:{minute:02d}:00Z"}]}}
        with self.lock:
            self.objects[name] = obj
        return copy.deepcopy(obj)

    def update_status(self, run: RunInfo, status: dict[str, Any]) -> None:
        with self.lock:
            self.attempts[run.name] = self.attempts.get(run.name, 0) + 1
            if self.failing.get(run.name, 0) > 0:
                self.failing[run.name] -= 1
                raise ServerError(self.retry_after)
            if run.name in self.fail_next:
                if self.fail_next.pop(run.name):
                    self.objects[run.name]["status"] = copy.deepcopy(status)
                    self.objects[run.name]["metadata"]["resourceVersion"] += "0"
                    self.phases.setdefault(run.name, []).append(status.get("phase", ""))
                raise st.ApiError("timed out")
            obj = self.objects.get(run.name)
            if obj is None or obj["metadata"]["resourceVersion"] != run.resource_version or \
                    run.name in self.conflict_next:
                self.conflict_next.discard(run.name)
                if obj is not None:  # someone else wrote meanwhile
                    obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
                raise st.Conflict(run.name)
            obj["status"] = copy.deepcopy(status)
            obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
            self.phases.setdefault(run.name, []).append(status.get("phase", ""))
            delivered = copy.deepcopy(obj)
        assert self.lifecycle is not None
        self.lifecycle.observe(delivered)

    def read_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            if self.reads_failing > 0:
                self.reads_failing -= 1
                raise ServerError(self.retry_after)
            obj = self.objects.get(name)
            return copy.deepcopy(obj) if obj else None

    def edit(self, name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        with self.lock:
            change(self.objects[name])
            self.objects[name]["metadata"]["resourceVersion"] = str(
                int(self.objects[name]["metadata"]["resourceVersion"]) + 1)
            return copy.deepcopy(self.objects[name])

    def phase(self, name: str) -> str:
        with self.lock:
            return self.objects[name]["status"]["phase"]

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        with self.lock:
            return next((c for c in self.objects[name]["status"].get("conditions", []) if c["type"] == type_), None)


@pytest.fixture
def api(tmp_path: Path) -> Any:
    fake = FakeApi()
    yield fake
    if fake.lifecycle is not None:
        fake.lifecycle.shutdown()


def start(api: FakeApi, tmp_path: Path, runs: int = 1, *, wait: Callable[[float], bool] | None = None,
          state_dir: Path | None = None, clock: Callable[[], datetime] = utcnow, **capacity: int) -> Lifecycle:
    amounts = tuple(sorted({"runs": runs, **capacity}.items()))
    api.lifecycle = Lifecycle(POD, POD_UID, Capacity(amounts), api, api, tmp_path / "work",
                              log_line=lambda line: None, stop_grace_seconds=5.0, wait=wait, state_dir=state_dir,
                              clock=clock)
    return api.lifecycle


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_scheduled_run_is_claimed_executed_and_ends_succeeded(api: FakeApi, tmp_path: Path) -> None:
    life = start(api, tmp_path)
    life.observe(api.add("a", args=[PY, "-c", "print('hi')"]))
    wait_for(lambda: api.phase("a") == "Succeeded")
    assert api.phases["a"] == ["Running", "Succeeded"]
    assert api.condition("a", "Completed")["reason"] == outcomes.REASON_SUCCEEDED
    wait_for(lambda: life.guard.usage() == {})


def test_a_run_that_does_not_fit_stays_scheduled_saying_why_and_runs_when_room_frees(api: FakeApi,
                                                                                       tmp_path: Path) -> None:
    life = start(api, tmp_path, runs=1)
    life.observe(api.add("first", args=[PY, "-c", "import time; time.sleep(0.5)"]))
    life.observe(api.add("second", minute=1))
    assert api.phase("second") == "Scheduled"
    admitted = api.condition("second", "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("False", "InsufficientCapacity")
    assert "insufficient runs" in admitted["message"]
    wait_for(lambda: api.phase("second") == "Succeeded")
    assert api.phases["first"] == ["Running", "Succeeded"]


def test_the_api_never_shows_more_runs_active_on_the_pod_than_it_holds(api: FakeApi, tmp_path: Path) -> None:
    life = start(api, tmp_path, runs=2)
    seen: list[int] = []
    original = api.update_status

    def counting(run: RunInfo, status: dict[str, Any]) -> None:
        original(run, status)
        with api.lock:
            seen.append(sum(o["status"]["phase"] == "Running" for o in api.objects.values()))

    api.update_status = counting  # type: ignore[method-assign]
    for i in range(6):
        life.observe(api.add(f"r{i}", minute=i, args=[PY, "-c", "import time; time.sleep(0.1)"]))
    wait_for(lambda: all(api.phase(f"r{i}") == "Succeeded" for i in range(6)))
    assert max(seen) <= 2


def test_a_claim_conflict_drops_the_reservation_rereads_and_claims_again(api: FakeApi, tmp_path: Path) -> None:
    life = start(api, tmp_path)
    obj = api.add("a")
    api.conflict_next.add("a")
    life.observe(obj)
    wait_for(lambda: api.phase("a") == "Succeeded")


def test_after_a_restart_a_running_run_without_its_process_ends_failed_and_frees_its_room(api: FakeApi,
                                                                                          tmp_path: Path) -> None:
    life = start(api, tmp_path, runs=1)
    lost, waiting = api.add("lost", phase="Running"), api.add("waiting", minute=1)
    life.recover([waiting, lost])
    assert api.phase("lost") == "Failed"
    assert api.condition("lost", "Completed")["reason"] == outcomes.REASON_EXECUTION_LOST
    wait_for(lambda: api.phase("waiting") == "Succeeded")


def test_a_function_run_runs_until_released_by_its_annotation(api: FakeApi, tmp_path: Path) -> None:
    life = start(api, tmp_path)
    life.observe(api.add("fn", function=True, args=[PY, "-c", "import time; time.sleep(60)"]))
    wait_for(lambda: api.phase("fn") == "Running")
    life.observe(api.edit("fn", lambda o: o["metadata"].setdefault("annotations", {}).update(
        {RELEASE_ANNOTATION: "true"})))
    wait_for(lambda: api.phase("fn") == "Succeeded")
    with api.lock:
        assert api.objects["fn"]["status"]["released"] is True


def test_a_malformed_run_assigned_by_an_old_scheduler_ends_failed_as_invalid(api: FakeApi, tmp_path: Path) -> None:
    life = start(api, tmp_path)
    life.observe(api.add("bad", requests={"runs": "0.5"}))
    assert api.phase("bad") == "Failed"
    assert api.condition("bad", "Completed")["reason"] == st.REASON_INVALID
    assert life.guard.usage() == {}


def test_a_run_another_writer_ended_is_stopped_here_and_not_overwritten(api: FakeApi, tmp_path: Path) -> None:
    life = start(api, tmp_path)
    life.observe(api.add("a", args=[PY, "-c", "import time; time.sleep(60)"]))
    wait_for(lambda: api.phase("a") == "Running")
    ended = api.edit("a", lambda o: o["status"].update(phase="Failed", completionTime="2026-12-01T11:00:00Z"))
    life.observe(ended)
    wait_for(lambda: life.guard.usage() == {} and not life.executor.has("uid-a"))
    assert api.phases["a"] == ["Running"]


@pytest.mark.parametrize("landed", [True, False], ids=["the write landed", "the write was lost"])
def test_a_claim_whose_answer_was_lost_is_read_back_and_the_run_executes_once(
        api: FakeApi, tmp_path: Path, landed: bool) -> None:
    life = start(api, tmp_path)
    api.fail_next["a"] = landed
    life.observe(api.add("a", args=[PY, "-c", "print('once')"]))
    wait_for(lambda: api.phase("a") == "Succeeded")
    assert api.phases["a"] == ["Running", "Succeeded"]


def test_a_running_run_of_this_pod_that_this_runtimed_never_claimed_ends_failed_as_lost(
        api: FakeApi, tmp_path: Path) -> None:
    life = start(api, tmp_path, runs=1)
    life.observe(api.add("stray", phase="Running"))
    assert api.phase("stray") == "Failed"
    assert api.condition("stray", "Completed")["reason"] == outcomes.REASON_EXECUTION_LOST
    assert life.guard.usage() == {}


def test_a_late_event_showing_a_run_still_running_after_it_ended_here_changes_nothing(
        api: FakeApi, tmp_path: Path) -> None:
    life = start(api, tmp_path)
    life.observe(api.add("a"))
    wait_for(lambda: api.phase("a") == "Succeeded")
    wait_for(lambda: life.guard.usage() == {})  # the room is given back once the end's write landed
    with api.lock:
        stale = copy.deepcopy(api.objects["a"])
    stale["status"]["phase"] = "Running"
    stale["metadata"]["resourceVersion"] = "2"
    attempts = api.attempts["a"]
    life.observe(stale)
    assert api.attempts["a"] == attempts and api.phases["a"] == ["Running", "Succeeded"]
    assert life.guard.usage() == {}


def test_runs_of_other_pods_are_neither_remembered_nor_counted(api: FakeApi, tmp_path: Path) -> None:
    life = start(api, tmp_path)
    other = api.add("elsewhere")
    other["status"]["assignment"] = {"podName": "python-zzzzz", "podUID": "uid-other"}
    life.observe(other)
    assert life._latest == {} and life.guard.usage() == {}  # noqa: SLF001 - memory held per namespace Run


def test_runs_stopped_because_the_pod_is_being_deleted_end_runtime_pod_lost(api: FakeApi, tmp_path: Path) -> None:
    life = start(api, tmp_path)
    life.observe(api.add("a", args=[PY, "-c", "import time; time.sleep(60)"]))
    wait_for(lambda: api.phase("a") == "Running")
    life.pod_leaving()
    life.shutdown()
    assert api.phase("a") == "Failed"
    assert api.condition("a", "Completed")["reason"] == outcomes.REASON_POD_LOST


def test_runs_stopped_with_runtimed_on_a_pod_that_stays_end_runtimed_stopped(api: FakeApi, tmp_path: Path) -> None:
    life = start(api, tmp_path)
    life.observe(api.add("a", args=[PY, "-c", "import time; time.sleep(60)"]))
    wait_for(lambda: api.phase("a") == "Running")
    life.shutdown()
    assert api.condition("a", "Completed")["reason"] == outcomes.REASON_INTERRUPTED


def _fail_elsewhere(life: Lifecycle, api: FakeApi, name: str) -> None:
    life.observe(api.edit(name, lambda o: o["status"].update(phase="Failed", completionTime="2026-12-01T11:00:00Z")))


def _delete_with_finalizer(life: Lifecycle, api: FakeApi, name: str) -> None:
    life.observe(api.edit(name, lambda o: o["metadata"].update(deletionTimestamp="2026-12-01T11:00:00Z",
                                                               finalizers=["example.com/keep"])))
    with api.lock:
        del api.objects[name]
    life.forget("ns", name)


def _delete_outright(life: Lifecycle, api: FakeApi, name: str) -> None:
    with api.lock:
        del api.objects[name]
    life.forget("ns", name)


@pytest.mark.parametrize("end_elsewhere", [_fail_elsewhere, _delete_with_finalizer, _delete_outright],
                         ids=["set failed by another writer", "deleted while it has a finalizer", "deleted"])
def test_a_waiting_run_someone_else_ends_is_forgotten_and_its_slot_goes_to_the_next_run(
        api: FakeApi, tmp_path: Path, end_elsewhere: Callable[[Lifecycle, FakeApi, str], None]) -> None:
    life = start(api, tmp_path, runs=1)
    gate = tmp_path / "gate"
    life.observe(api.add("first", args=[PY, "-c", f"import os, time\nwhile not os.path.exists({str(gate)!r}): "
                                                  "time.sleep(0.02)"]))
    wait_for(lambda: api.phase("first") == "Running")
    life.observe(api.add("waiting", minute=1))
    assert [r.name for r in life.guard.waiting()] == ["waiting"]
    end_elsewhere(life, api, "waiting")
    assert life.guard.waiting() == []
    gate.touch()
    wait_for(lambda: api.phase("first") == "Succeeded")
    wait_for(lambda: life.guard.usage() == {})
    life.observe(api.add("next", minute=2))
    wait_for(lambda: api.phase("next") == "Succeeded")
    wait_for(lambda: life.guard.usage() == {})  # the room is given back once the end's write landed
    assert life.guard.waiting() == []


def test_a_reserved_run_that_vanished_before_its_claim_gives_its_reservation_back(api: FakeApi,
                                                                                    tmp_path: Path) -> None:
    life = start(api, tmp_path, runs=1)
    run = api.add("a")
    life.guard.offer(assigned_run(run)[0])  # reserved, but its object is no longer known here
    life._claim_all(life.guard.release("nobody") + [Decision(RESERVED, assigned_run(run)[0])])  # noqa: SLF001
    assert life.guard.usage() == {}


def test_a_run_whose_args_hold_a_nul_ends_failed_at_start_up_and_frees_its_slot(api: FakeApi, tmp_path: Path) -> None:
    life = start(api, tmp_path, runs=1)
    life.recover([api.add("nul", args=[PY, "-c", "print('a\x00b')"]), api.add("next", minute=1)])
    assert api.phase("nul") == "Failed"
    assert api.condition("nul", "Completed")["reason"] == outcomes.REASON_START_FAILED
    wait_for(lambda: api.phase("next") == "Succeeded")
    wait_for(lambda: life.guard.usage() == {})


class FakeSleep:
    """Records each backoff delay and returns at once (runtimed is not stopping); runs `then` at a given wait."""

    def __init__(self, then: dict[int, Callable[[], None]] | None = None) -> None:
        self.delays: list[float] = []
        self.then = then or {}

    def __call__(self, seconds: float) -> bool:
        self.delays.append(seconds)
        self.then.get(len(self.delays), lambda: None)()
        return False


def test_a_claim_answered_500_two_thousand_times_backs_off_to_a_cap_and_runs_when_the_api_recovers(
        api: FakeApi, tmp_path: Path) -> None:
    sleep = FakeSleep()
    life = start(api, tmp_path, wait=sleep)
    api.failing["a"] = 2000  # more than Python's recursion limit
    life.observe(api.add("a"))
    wait_for(lambda: api.phase("a") == "Succeeded")
    assert api.phases["a"] == ["Running", "Succeeded"]
    assert len(sleep.delays) == 2000  # one wait between any two attempts: no hot loop
    assert sleep.delays[:5] == [0.25, 0.5, 1.0, 2.0, 4.0] and max(sleep.delays) == 30.0 == sleep.delays[-1]
    wait_for(lambda: life.guard.usage() == {})


def test_a_claim_retry_waits_at_least_what_the_server_asked(api: FakeApi, tmp_path: Path) -> None:
    sleep = FakeSleep()
    life = start(api, tmp_path, wait=sleep)
    api.failing["a"], api.retry_after = 3, 7.0
    life.observe(api.add("a"))
    wait_for(lambda: api.phase("a") == "Succeeded")
    assert sleep.delays == [7.0, 7.0, 7.0]


@pytest.mark.parametrize("landed", [True, False], ids=["the claim had landed", "the claim was lost"])
def test_while_the_api_is_down_a_claim_keeps_its_reservation_and_the_run_executes_once_after(
        api: FakeApi, tmp_path: Path, landed: bool) -> None:
    held: list[dict[str, int]] = []
    life = start(api, tmp_path, wait=lambda seconds: held.append(api.lifecycle.guard.usage()) is None and False)
    api.fail_next["a"] = landed
    api.failing["a"], api.reads_failing = 0 if landed else 20, 30
    life.observe(api.add("a"))
    wait_for(lambda: api.phase("a") == "Succeeded")
    assert api.phases["a"] == ["Running", "Succeeded"]
    assert held and all(usage == {"runs": 1} for usage in held)
    wait_for(lambda: life.guard.usage() == {})


def test_a_run_deleted_while_its_claim_retries_frees_its_reservation_for_the_next(api: FakeApi,
                                                                                 tmp_path: Path) -> None:
    def delete_a() -> None:
        with api.lock:
            del api.objects["a"]
        life.forget("ns", "a")

    life = start(api, tmp_path, runs=1, wait=FakeSleep(then={3: delete_a}))
    api.failing["a"] = 1000
    life.observe(api.add("a"))
    life.observe(api.add("next", minute=1))
    wait_for(lambda: api.phase("next") == "Succeeded")
    wait_for(lambda: life.guard.usage() == {} and life.guard.waiting() == [])


def gated(gate: Path) -> list[str]:
    """A task that runs until `gate` exists."""
    return [PY, "-c", f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.02)"]


def test_an_end_the_api_refuses_for_a_while_is_kept_and_written_and_its_room_stays_taken_until_then(
        api: FakeApi, tmp_path: Path) -> None:
    seen: list[tuple[str, dict[str, int]]] = []
    life = start(api, tmp_path, runs=1, state_dir=tmp_path / "state",
                 wait=lambda seconds: seen.append((api.phase("next"), api.lifecycle.guard.usage())) is None and False)
    gate = tmp_path / "gate"
    life.observe(api.add("a", args=gated(gate)))
    wait_for(lambda: api.phase("a") == "Running")
    life.observe(api.add("next", minute=1))
    api.failing["a"] = 50  # a hiccup of 50 answers, far more than a few quick re-sends
    gate.touch()
    wait_for(lambda: api.phase("a") == "Succeeded")
    assert api.condition("a", "Completed")["reason"] == outcomes.REASON_SUCCEEDED
    assert len(seen) == 50 and all(entry == ("Scheduled", {"runs": 1}) for entry in seen)
    wait_for(lambda: api.phase("next") == "Succeeded")
    wait_for(lambda: life.outbox.pending() == {})  # forgotten only after its write landed


def test_an_end_not_yet_written_survives_a_restart_and_is_written_with_the_time_it_happened(
        api: FakeApi, tmp_path: Path) -> None:
    ended_at = datetime(2026, 12, 4, 12, 0, tzinfo=timezone.utc)
    first = start(api, tmp_path, runs=1, state_dir=tmp_path / "state", clock=lambda: ended_at)
    first.observe(api.add("a", args=[PY, "-c", "raise SystemExit(3)"]))
    api.failing["a"] = 10**9 - 1  # the claim lands; from then on the API is down
    wait_for(lambda: api.attempts.get("a", 0) >= 2)
    first.shutdown()  # as a restart: the end is on disk, not in the API
    assert api.phase("a") == "Running" and set(first.outbox.pending()) == {"uid-a"}
    api.failing["a"] = 0
    second = start(api, tmp_path, runs=1, state_dir=tmp_path / "state")
    with api.lock:
        listed = [copy.deepcopy(api.objects["a"])]
    second.recover(listed + [api.add("next", minute=1)])
    assert api.phase("a") == "Failed"
    completed = api.condition("a", "Completed")
    assert completed["reason"] == outcomes.REASON_FAILED and "exited with code 3" in completed["message"]
    with api.lock:
        assert api.objects["a"]["status"]["completionTime"] == "2026-12-04T12:00:00Z"
    wait_for(lambda: api.phase("next") == "Succeeded")
    # The end is forgotten only after its write landed, so the outbox empties a moment after.
    wait_for(lambda: second.outbox.pending() == {})


def test_a_run_moved_to_another_pod_while_its_claim_retries_gives_its_reservation_back_at_once(
        api: FakeApi, tmp_path: Path) -> None:
    held: list[dict[str, int]] = []

    def move_a() -> None:
        life.observe(api.edit("a", lambda o: o["status"].update(assignment={"podName": "p-other",
                                                                            "podUID": "uid-other"})))
        held.append(life.guard.usage())

    life = start(api, tmp_path, runs=1, wait=FakeSleep(then={2: move_a}))
    api.failing["a"] = 1000
    life.observe(api.add("a"))
    wait_for(lambda: held != [])
    assert held == [{}]
    wait_for(lambda: life.guard.usage() == {} and api.failing["a"] > 990)
