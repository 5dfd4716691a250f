"""Writes that leave the cycle: the loop plans on while they are out, and settles each answer when it comes.

A `Held` sender keeps every write until the test answers it, in any order, as the
binder processes do. The cycle's key stays "processing" until its answer (so an
event for that Run waits, as it would for a cycle in progress), the assumption
lives until then, and each answer means exactly what it meant when the cycle
waited for it (SPEC §3.2 step 6).
"""

from __future__ import annotations

import time
from typing import Any

from kruntimes.scheduler import status as st
from kruntimes.scheduler.cycle import IN_FLIGHT
from kruntimes.scheduler.projection import RunInfo
from kruntimes.scheduler.writes import ReadDone, WriteDone
from tests.builders import Harness, pod, run

CONFLICTS = "kruntimes_scheduler_reservation_conflicts_total"
RESULTS = "kruntimes_scheduler_schedule_results_total"


class Held:
    """A sender that answers nothing until told: `answer(name, exc)` applies the oldest write
    of that Run (exc None) or fails it with `exc`."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.writes: list[tuple[RunInfo, dict[str, Any], WriteDone]] = []
        h.scheduler.sender = self

    def write(self, run: RunInfo, body: dict[str, Any], deadline: float, done: WriteDone) -> None:
        self.writes.append((run, body, done))

    def read(self, run: RunInfo, done: ReadDone) -> None:
        done(self.h.api.observe(run), None)

    room = True  # what `wait_for_room` answers: a test closes it to hold the loop

    def wait_for_room(self, timeout: float) -> bool:
        if not self.room:
            time.sleep(min(timeout, 0.01))
        return self.room

    def out(self) -> list[str]:
        return [r.name for r, _, _ in self.writes]

    def body(self, name: str) -> dict[str, Any]:
        return next(body for r, body, _ in self.writes if r.name == name)

    def answer(self, name: str, exc: BaseException | None = None) -> None:
        index = self.out().index(name)
        r, body, done = self.writes.pop(index)
        if exc is None:
            self.h.api.update_status(r, body)
        done(exc)


def two_pods() -> Harness:
    h = Harness()
    h.add_pods(pod("p", capacity={"runs": 1}), pod("q", capacity={"runs": 1}))
    return h


def test_the_loop_plans_the_next_run_while_a_bind_is_out_and_the_assumption_holds_its_slot() -> None:
    h = two_pods()
    held = Held(h)
    h.create(run("a"), run("b"), run("c"))
    assert [result for _, result in h.drain()] == [IN_FLIGHT] * 3
    assert held.out() == ["a", "b", "c"]  # c's Pending message is out too: a and b hold both slots
    assert h.queue.processing_count() == 3 and len(h.cache.assumed) == 2
    assert all(h.phase(n) == "Pending" for n in "abc")
    held.answer("c")
    assert h.sample(RESULTS, result="unschedulable") == 1 and h.queue.processing_count() == 2


def test_answers_in_any_order_each_settle_their_own_cycle() -> None:
    h = two_pods()
    held = Held(h)
    h.create(run("a"), run("b"))
    h.drain()
    placed = {name: held.body(name)["assignment"]["podName"] for name in "ab"}
    held.answer("b")  # the later one first
    assert h.placement("b") == placed["b"] and h.queue.processing_count() == 1
    held.answer("a", st.Conflict("409"))  # a's Run changed meanwhile: release and requeue
    assert h.queue.processing_count() == 0
    assert ("ns", "uid-ns-a") not in h.cache.assumed and h.sample(CONFLICTS, stage="bind") == 1
    assert h.sample(RESULTS, result="scheduled") == 1 and h.sample(RESULTS, result="conflict") == 1
    h.qclock.now += 10_000
    assert h.drain() == [(("ns", "a"), IN_FLIGHT)]  # planned again, on the slot it had
    held.answer("a")
    assert h.placement("a") == placed["a"] and h.cache.usage("ns", "p") == {"runs": 1}


def test_an_event_for_a_run_whose_write_is_out_waits_for_the_answer() -> None:
    h = two_pods()
    held = Held(h)
    h.create(run("a"))
    h.drain()
    h.sync()  # an event for a while its bind is out: the key is marked, not handed out
    assert h.drain() == []
    held.answer("a")
    assert h.drain() == [(("ns", "a"), "skipped")]  # after the answer: bound, awaiting the informer


def test_an_ambiguous_answer_keeps_the_assumption_and_a_read_settles_it_later() -> None:
    h = two_pods()
    held = Held(h)
    h.create(run("a"))
    h.drain()
    held.answer("a", st.Ambiguous("the binder exited"))  # not applied, outcome unknown
    assert ("ns", "uid-ns-a") in h.cache.assumed
    h.qclock.now += 10_000
    assert h.drain() == [(("ns", "a"), IN_FLIGHT)]  # read: at the guarding version; the same bind again
    pod_name = held.body("a")["assignment"]["podName"]
    held.answer("a")
    assert h.placement("a") == pod_name and h.sample(CONFLICTS, stage="bind") == 0


def test_an_answer_for_a_term_that_ended_changes_nothing_in_the_next() -> None:
    h = two_pods()
    held = Held(h)
    h.create(run("a"))
    h.drain()
    old_queue = h.queue
    assert not h.scheduler.pause(timeout=0.01)  # the term ends with a's bind still out
    h.cache.release("ns", "uid-ns-a", "aborted")  # as the term's end does
    h.queue = h.scheduler.queue
    h.scheduler.enqueue_pending()  # the next term
    assert h.drain() == [(("ns", "a"), IN_FLIGHT)]
    assert held.out() == ["a", "a"] and ("ns", "uid-ns-a") in h.cache.assumed
    held.answer("a", st.Conflict("409"))  # the old term's answer arrives late ...
    assert old_queue.processing_count() == 0
    assert ("ns", "uid-ns-a") in h.cache.assumed and h.sample(CONFLICTS, stage="bind") == 0  # ... and is ignored
    held.answer("a")
    assert h.placement("a") is not None and h.queue.processing_count() == 0


def test_the_loop_takes_no_run_while_the_sender_has_no_room_for_its_write() -> None:
    h = two_pods()
    held = Held(h)
    held.room = False
    h.scheduler.start()
    try:
        h.create(run("a"))
        time.sleep(0.3)  # the loop thread is running, waiting for room
        assert held.out() == [] and len(h.queue) == 1 and h.queue.processing_count() == 0
        held.room = True
        deadline = time.monotonic() + 30
        while held.out() != ["a"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert held.out() == ["a"] and len(h.cache.assumed) == 1
    finally:
        h.scheduler.stop(timeout=5)
