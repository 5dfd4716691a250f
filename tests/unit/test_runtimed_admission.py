"""runtimed's admission guard in the cases seed 000 names (SPEC §4.1).

Each test injects one way the scheduler's accounting can be wrong and checks that
runtimed still never admits more than its pod's capacity, that a Run that does not
fit waits (never fails) and that waiting Runs are admitted oldest assignment first.
"""

from __future__ import annotations

import sys
import threading
from datetime import datetime, timedelta, timezone
from typing import Iterable

import pytest

from kruntimes.runtimed.admission import (ALREADY_ADMITTED, MALFORMED_CAPACITY, NOT_THIS_POD, RESERVED, WAITING,
                                          AdmissionGuard, AssignedRun, Capacity, Decision, shortfall)

T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
POD, POD_UID = "python-abcde", "uid-pod"


def run(name: str, *, minute: int | None = 0, pod_uid: str | None = POD_UID, pod_name: str | None = POD,
        runs: int = 1, gpu: int = 0, fpga: int = 0) -> AssignedRun:
    requested = {"runs": runs, "example.com/gpu": gpu, "example.com/fpga": fpga}
    amounts = tuple(sorted((r, q) for r, q in requested.items() if q))
    return AssignedRun(namespace="ns", name=name, uid=f"uid-{name}", requests=amounts, pod_name=pod_name,
                       pod_uid=pod_uid, assigned_at=None if minute is None else T0 + timedelta(minutes=minute))


def guard(**capacity: int) -> AdmissionGuard:
    return AdmissionGuard(POD, POD_UID, Capacity(tuple(sorted(capacity.items()))))


def names(items: Iterable[Decision | AssignedRun]) -> list[str]:
    return [(i.run if isinstance(i, Decision) else i).name for i in items]


def test_a_run_that_fits_is_reserved_and_its_request_counts_at_once() -> None:
    g = guard(runs=2)
    assert g.offer(run("a")).outcome == RESERVED
    assert g.usage() == {"runs": 1}


def test_a_stale_scheduler_cache_assigning_more_runs_than_fit_admits_only_what_fits() -> None:
    g = guard(runs=2)
    outcomes = [g.offer(run(f"r{i}", minute=i)).outcome for i in range(5)]
    assert outcomes == [RESERVED, RESERVED, WAITING, WAITING, WAITING]
    assert g.usage() == {"runs": 2}
    assert names(g.waiting()) == ["r2", "r3", "r4"]


def test_a_run_that_does_not_fit_waits_with_a_reason_and_is_never_dropped() -> None:
    g = guard(runs=1)
    g.offer(run("a"))
    decision = g.offer(run("b", minute=1))
    assert decision.outcome == WAITING
    assert decision.reason == "insufficient runs: 0 of 1 free, 1 requested"
    assert names(g.waiting()) == ["b"]


def test_waiting_runs_are_admitted_oldest_assignment_first_when_a_local_run_ends() -> None:
    g = guard(runs=1)
    g.offer(run("running", minute=0))
    for name, minute in (("young", 9), ("old", 1), ("middle", 5)):
        g.offer(run(name, minute=minute))
    assert names(g.release("uid-running")) == ["old"]
    assert names(g.release("uid-old")) == ["middle"]
    assert names(g.release("uid-middle")) == ["young"]


def test_a_waiting_run_too_big_for_the_free_room_does_not_block_a_smaller_one_behind_it() -> None:
    g = guard(runs=2)
    g.offer(run("a", runs=2))
    g.offer(run("big", minute=1, runs=2))
    g.offer(run("small", minute=2))
    g.set_capacity(Capacity((("runs", 3),)))
    assert names(g.waiting()) == ["big"]
    assert g.usage() == {"runs": 3}


def test_runs_without_an_assignment_time_are_checked_after_timed_ones_in_the_order_offered() -> None:
    g = guard(runs=1)
    g.offer(run("running"))
    for name, minute in (("untimed-1", None), ("timed", 3), ("untimed-2", None)):
        g.offer(run(name, minute=minute))
    assert names(g.waiting()) == ["timed", "untimed-1", "untimed-2"]


def test_two_runs_assigned_concurrently_by_competing_writers_admit_only_one() -> None:
    # Two schedulers each saw one free slot and bound a different Run to it; their
    # watch events reach runtimed on two threads at the same moment.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for attempt in range(50):
            g = guard(runs=1)
            barrier = threading.Barrier(2)
            outcomes: dict[str, str] = {}

            def writer(name: str) -> None:
                barrier.wait()
                outcomes[name] = g.offer(run(name)).outcome

            threads = [threading.Thread(target=writer, args=(n,)) for n in ("from-a", "from-b")]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert sorted(outcomes.values()) == [RESERVED, WAITING], attempt
            assert g.usage() == {"runs": 1}
    finally:
        sys.setswitchinterval(previous)


def test_many_threads_racing_admission_never_reserve_beyond_capacity() -> None:
    g = guard(runs=3, **{"example.com/gpu": 2})
    barrier = threading.Barrier(16)
    reserved: list[str] = []

    def handle(i: int) -> None:
        barrier.wait()
        decision = g.offer(run(f"r{i}", minute=i, gpu=i % 2))
        if decision.outcome == RESERVED:
            reserved.append(decision.run.name)

    threads = [threading.Thread(target=handle, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    usage = g.usage()
    assert len(reserved) == 3 and usage["runs"] == 3 and usage.get("example.com/gpu", 0) <= 2


def test_a_bind_applied_late_waits_for_the_run_the_scheduler_placed_since() -> None:
    # The scheduler saw the slot free and placed "newer"; the earlier bind of
    # "late" lands afterwards. Both are assigned here; only one may run.
    g = guard(runs=1)
    assert g.offer(run("newer", minute=5)).outcome == RESERVED
    g.claimed("uid-newer")
    assert g.offer(run("late", minute=1)).outcome == WAITING
    assert names(g.release("uid-newer")) == ["late"]


def test_a_late_or_repeated_event_for_an_admitted_run_does_not_reserve_it_twice() -> None:
    g = guard(runs=2)
    g.offer(run("a"))
    g.claimed("uid-a")
    assert g.offer(run("a")).outcome == ALREADY_ADMITTED
    assert g.usage() == {"runs": 1}


@pytest.mark.parametrize("requests, reason", [
    ({"fpga": 1}, "the pod does not declare example.com/fpga"),
    ({"gpu": 2}, "example.com/gpu request 2 exceeds the pod's capacity 1"),
    ({"runs": 5}, "runs request 5 exceeds the pod's capacity 4"),
], ids=["a resource the pod lacks", "more of a resource than the pod has", "more runs than the pod has"])
def test_an_assignment_from_an_old_scheduler_that_ignored_resources_waits_and_is_not_failed(
        requests: dict[str, int], reason: str) -> None:
    g = guard(runs=4, **{"example.com/gpu": 1})
    decision = g.offer(run("old", **requests))
    assert (decision.outcome, decision.reason) == (WAITING, reason)
    assert g.usage() == {}


def test_capacity_lowered_under_active_runs_evicts_nothing_and_admits_nothing_new_until_it_fits() -> None:
    g = guard(runs=3)
    for name in ("a", "b", "c"):
        g.offer(run(name))
        g.claimed(f"uid-{name}")
    assert g.set_capacity(Capacity((("runs", 1),))) == []
    assert names(g.admitted()) == ["a", "b", "c"]
    assert g.offer(run("d", minute=1)).outcome == WAITING
    assert g.release("uid-a") == [] and g.release("uid-b") == []
    assert g.usage() == {"runs": 1}
    assert names(g.release("uid-c")) == ["d"]


def test_capacity_raised_admits_waiting_runs_at_once() -> None:
    g = guard(runs=1)
    g.offer(run("a"))
    g.offer(run("b", minute=1))
    g.offer(run("c", minute=2))
    assert names(g.set_capacity(Capacity((("runs", 3),)))) == ["b", "c"]


def test_a_lowered_capacity_still_admits_runs_that_request_none_of_the_overcommitted_resource() -> None:
    g = guard(runs=4, **{"example.com/gpu": 2})
    g.offer(run("a", gpu=2))
    g.set_capacity(Capacity((("example.com/gpu", 1), ("runs", 4))))
    assert g.offer(run("cpu-only", minute=1)).outcome == RESERVED
    assert g.offer(run("gpu", minute=2, gpu=1)).outcome == WAITING


def test_a_malformed_capacity_admits_nothing_new_and_keeps_what_runs() -> None:
    g = guard(runs=4)
    g.offer(run("a"))
    g.set_capacity(Capacity(problem="malformed capacity annotation"))
    decision = g.offer(run("b", minute=1))
    assert (decision.outcome, decision.reason) == (WAITING, MALFORMED_CAPACITY)
    assert names(g.admitted()) == ["a"]
    assert names(g.set_capacity(Capacity((("runs", 4),)))) == ["b"]


def test_a_claim_conflict_drops_the_reservation_so_the_run_can_be_offered_again() -> None:
    g = guard(runs=1)
    g.offer(run("a"))
    g.release("uid-a")  # the Running write answered 409; runtimed re-reads the Run
    assert g.usage() == {}
    assert g.offer(run("a")).outcome == RESERVED


def test_a_run_assigned_to_another_pod_or_an_older_pod_of_the_same_name_is_never_touched() -> None:
    g = guard(runs=4)
    assert g.offer(run("elsewhere", pod_uid="uid-other", pod_name="python-zzzzz")).outcome == NOT_THIS_POD
    assert g.offer(run("recreated", pod_uid="uid-old-pod-same-name")).outcome == NOT_THIS_POD
    assert g.usage() == {}


def test_an_assignment_without_a_pod_uid_is_this_pod_when_it_names_this_pod() -> None:
    g = guard(runs=4)
    assert g.offer(run("by-name", pod_uid=None)).outcome == RESERVED
    assert g.offer(run("other", pod_uid=None, pod_name="python-zzzzz")).outcome == NOT_THIS_POD


def test_a_waiting_run_reassigned_elsewhere_is_forgotten() -> None:
    g = guard(runs=1)
    g.offer(run("a"))
    g.offer(run("b", minute=1))
    g.offer(run("b", minute=1, pod_uid="uid-other"))
    assert g.waiting() == [] and g.release("uid-a") == []


def test_runs_found_running_after_a_restart_count_even_beyond_capacity() -> None:
    g = guard(runs=1)
    g.adopt(run("x"))
    g.adopt(run("y"))
    assert g.usage() == {"runs": 2}
    assert g.offer(run("z", minute=1)).outcome == WAITING
    assert g.release("uid-x") == []
    assert names(g.release("uid-y")) == ["z"]


def test_releasing_twice_or_releasing_an_unknown_run_frees_nothing_more() -> None:
    g = guard(runs=2)
    g.offer(run("a"))
    g.offer(run("b"))
    g.release("uid-a")
    g.release("uid-a")
    g.release("uid-never-seen")
    assert g.usage() == {"runs": 1}


def test_a_zero_request_constrains_nothing_but_a_declared_zero_capacity_admits_no_positive_request() -> None:
    assert shortfall((("example.com/gpu", 0), ("runs", 1)), {"runs": 1}, {}) is None
    assert shortfall((("runs", 1),), {"runs": 0}, {}) == "runs request 1 exceeds the pod's capacity 0"
