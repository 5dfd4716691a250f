"""Property: whatever the interleaving, runtimed's guard never admits beyond its pod's capacity (SPEC §4.1).

Hypothesis drives the guard through random interleavings of everything that can
happen to a Runtime Pod: Runs assigned (fitting or not, by stale or competing
schedulers, with resources the pod lacks), late and repeated events, claims that
succeed or answer 409 and are re-read, Runs ending, reassigned or deleted, capacity
raised, lowered under active Runs or made malformed, and Runs found running after a
restart. After every step it checks, against an independent model:
- usage of a resource only grows within capacity (lowered capacity evicts nothing,
  but nothing new goes on top of it); with no adopted Runs and no lowered capacity,
  usage never exceeds capacity at all;
- the guard's usage is exactly the sum of what the Runs it admitted request (no
  leak, no double count);
- no waiting Run fits (nothing waits that could run);
- a Run is never both admitted and waiting, and never admitted twice.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import settings
from hypothesis import strategies as hs
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, invariant, rule

from kruntimes.runtimed.admission import RESERVED, AdmissionGuard, AssignedRun, Capacity, shortfall

T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
POD, POD_UID = "p", "uid-p"
RESOURCES = ("runs", "example.com/gpu", "example.com/fpga")

requests_st = hs.dictionaries(hs.sampled_from(RESOURCES), hs.integers(0, 3), max_size=3).map(
    lambda d: tuple(sorted((r, q) for r, q in {"runs": 1, **d}.items() if q > 0)))
capacity_st = hs.dictionaries(hs.sampled_from(RESOURCES[:2]), hs.integers(0, 4), max_size=2).map(
    lambda d: Capacity(tuple(sorted(d.items()))))


class GuardMachine(RuleBasedStateMachine):
    offered = Bundle("offered")

    def __init__(self) -> None:
        super().__init__()
        self.serial = 0
        self.lowered_or_adopted = False

    @initialize(capacity=capacity_st)
    def start(self, capacity: Capacity) -> None:
        self.guard = AdmissionGuard(POD, POD_UID, capacity)
        self.capacity = capacity
        self.admitted: dict[str, AssignedRun] = {}  # the model: what the guard said it admitted
        self.claimed: set[str] = set()

    # -- steps -------------------------------------------------------------------------

    def _step(self, action) -> None:  # type: ignore[no-untyped-def]
        before = self._model_usage()
        decisions = action()
        for decision in decisions or []:
            if decision.outcome == RESERVED:
                assert decision.run.uid not in self.admitted, "admitted twice"
                self.admitted[decision.run.uid] = decision.run
        after = self._model_usage()
        cap = dict(self.capacity.amounts)
        for resource, amount in after.items():
            if amount > before.get(resource, 0):
                assert self.capacity.problem is None, "admitted under a malformed capacity"
                assert amount <= cap.get(resource, 0), f"{resource} grew to {amount} beyond capacity {cap}"

    @rule(target=offered, requests=requests_st, minute=hs.none() | hs.integers(0, 30),
          mine=hs.sampled_from(["uid", "uid", "uid", "name-only", "other"]))
    def assign(self, requests, minute, mine):  # type: ignore[no-untyped-def]
        self.serial += 1
        run = AssignedRun("ns", f"r{self.serial}", f"uid-{self.serial}", requests,
                          pod_name=POD if mine != "other" else "q",
                          pod_uid={"uid": POD_UID, "name-only": None, "other": "uid-q"}[mine],
                          assigned_at=None if minute is None else T0 + timedelta(minutes=minute))
        self._step(lambda: [self.guard.offer(run)])
        return run

    @rule(run=offered)
    def late_or_repeated_event(self, run: AssignedRun) -> None:
        if run.uid in self.admitted or self.guard.is_mine(run):
            self._step(lambda: [self.guard.offer(run)])

    @rule(run=offered, conflict=hs.booleans())
    def claim(self, run: AssignedRun, conflict: bool) -> None:
        if run.uid not in self.admitted or run.uid in self.claimed:
            return
        if not conflict:
            self.guard.claimed(run.uid)
            self.claimed.add(run.uid)
            return
        # 409: drop the reservation, re-read (same Run, newer version) and offer it again.
        self._step(lambda: self._leave(run.uid))
        self._step(lambda: [self.guard.offer(run)])

    @rule(run=consumes(offered))
    def end_or_delete(self, run: AssignedRun) -> None:
        self._step(lambda: self._leave(run.uid))

    @rule(run=consumes(offered))
    def reassigned_elsewhere(self, run: AssignedRun) -> None:
        moved = AssignedRun(run.namespace, run.name, run.uid, run.requests, "q", "uid-q", run.assigned_at)
        self._step(lambda: [self.guard.offer(moved)])
        if run.uid in self.admitted:  # still executing here until its end is seen
            self._step(lambda: self._leave(run.uid))

    @rule(capacity=capacity_st)
    def capacity_changes(self, capacity: Capacity) -> None:
        self.capacity = capacity
        self.lowered_or_adopted |= any(q > dict(capacity.amounts).get(r, 0) for r, q in self._model_usage().items())
        self._step(lambda: self.guard.set_capacity(capacity))

    @rule()
    def capacity_becomes_malformed(self) -> None:
        self.capacity = Capacity(problem="malformed capacity annotation")
        self.lowered_or_adopted = True
        self._step(lambda: self.guard.set_capacity(self.capacity))

    @rule(target=offered, requests=requests_st)
    def found_running_after_restart(self, requests):  # type: ignore[no-untyped-def]
        self.serial += 1
        run = AssignedRun("ns", f"r{self.serial}", f"uid-{self.serial}", requests, POD, POD_UID)
        self.guard.adopt(run)  # counts regardless of fit: it is already running
        self.admitted[run.uid] = run
        self.claimed.add(run.uid)
        self.lowered_or_adopted = True
        return run

    def _leave(self, uid: str) -> list:  # type: ignore[type-arg]
        self.admitted.pop(uid, None)
        self.claimed.discard(uid)
        return self.guard.release(uid)

    # -- invariants --------------------------------------------------------------------

    def _model_usage(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for run in self.admitted.values():
            for resource, amount in run.requests:
                out[resource] = out.get(resource, 0) + amount
        return {r: q for r, q in sorted(out.items()) if q}

    @invariant()
    def usage_is_exactly_what_admitted_runs_request(self) -> None:
        assert self.guard.usage() == self._model_usage()
        assert sorted(r.uid for r in self.guard.admitted()) == sorted(self.admitted)

    @invariant()
    def usage_never_exceeds_capacity_unless_capacity_was_lowered_or_runs_adopted(self) -> None:
        if not self.lowered_or_adopted:
            cap = dict(self.capacity.amounts)
            assert all(q <= cap.get(r, 0) for r, q in self.guard.usage().items())

    @invariant()
    def nothing_waits_that_could_run(self) -> None:
        waiting = self.guard.waiting()
        assert not {r.uid for r in waiting} & set(self.admitted)
        if self.capacity.problem is None:
            usage = self.guard.usage()
            assert all(shortfall(r.requests, dict(self.capacity.amounts), usage) for r in waiting)


GuardMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_admission_never_exceeds_capacity_over_random_interleavings = GuardMachine.TestCase
