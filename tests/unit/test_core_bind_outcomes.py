"""The loop's bind step when the answer is missing or the pod moved (SPEC §3.2 step 6, amended 2026-12-01).

A bind whose outcome is unknown keeps its assumption until the Run is observed
again, and each observation settles it one way: seen bound to our pod (watch or
read) -> as a success; seen Pending at a newer version -> released; read at the
version the write was guarded by -> the same bind is sent once more (releasing
then could let the first one land on a slot given away). A pod deleted or replaced
since the snapshot is a bind conflict. Driven single-threaded over the in-memory
API (`tests.builders.Harness`); the wire-level versions are in
`tests/integration/test_fault_safe_binding.py`.
"""

from __future__ import annotations

from typing import Any

from kruntimes.scheduler import status as st
from kruntimes.scheduler.projection import RunInfo
from tests.builders import Harness, pod, run

CONFLICTS = "kruntimes_scheduler_reservation_conflicts_total"
KEY = ("ns", "r")
ASSUMED = ("ns", "uid-ns-r")


class Unanswered:
    """The in-memory API as the binder, with the next sends' answers lost.

    `plan` lists what happens to each coming send: "lost" (not applied), "landed"
    (applied, answer lost), "conflict" (409), or "ok"; then every send is "ok".
    """

    def __init__(self, h: Harness, *plan: str) -> None:
        self.api, self.plan = h.api, list(plan)
        self.sends = 0
        self.read_error: Exception | None = None
        h.scheduler.binder = self

    def update_status(self, r: RunInfo, body: dict[str, Any]) -> None:
        self.sends += 1
        what = self.plan.pop(0) if self.plan else "ok"
        if what == "conflict":
            raise st.Conflict("409")
        if what in ("landed", "ok"):
            self.api.update_status(r, body)
        if what in ("lost", "landed"):
            raise st.Ambiguous("read timed out")

    def observe(self, r: RunInfo) -> st.Observed | None:
        if self.read_error is not None:
            raise self.read_error
        return self.api.observe(r)


def one_slot(deliver: bool = True) -> Harness:
    h = Harness(deliver=deliver)
    h.add_pods(pod("p", capacity={"runs": 1}))
    return h


def test_a_bind_with_no_answer_keeps_its_assumption_so_no_other_run_takes_the_slot() -> None:
    h = one_slot()
    Unanswered(h, "lost")
    h.create(run("r"))
    assert h.step() == (KEY, "error")
    assert ASSUMED in h.cache.assumed and h.cache.usage("ns", "p") == {"runs": 1}
    h.create(run("other"))
    assert h.step() == (("ns", "other"), "unschedulable")


def test_a_bind_that_landed_is_settled_by_the_watch_and_never_sent_again() -> None:
    h = one_slot()
    binder = Unanswered(h, "landed")
    h.create(run("r"))
    assert h.step() == (KEY, "error")
    assert ASSUMED not in h.cache.assumed  # the watch showed it bound: actual usage took over
    h.drain(retries=True)
    assert binder.sends == 1 and h.placement("r") == "p" and h.cache.usage("ns", "p") == {"runs": 1}


def test_a_bind_that_landed_unseen_by_the_watch_is_settled_by_a_read_and_never_sent_again() -> None:
    h = one_slot(deliver=False)
    binder = Unanswered(h, "landed")
    h.create(run("r"))
    h.sync()
    assert h.step() == (KEY, "error")
    assert h.drain(retries=True) == [(KEY, "scheduled")]
    assert binder.sends == 1 and ASSUMED in h.cache.assumed  # until the informer shows it
    h.sync()
    assert ASSUMED not in h.cache.assumed and h.cache.usage("ns", "p") == {"runs": 1}


def test_a_bind_read_back_at_its_guarding_version_is_sent_once_more_keeping_its_slot() -> None:
    h = one_slot()
    binder = Unanswered(h, "lost")
    h.create(run("r"))
    assert h.step() == (KEY, "error")
    assert h.drain(retries=True) == [(KEY, "scheduled")]
    assert binder.sends == 2 and h.api.writes == 1 and h.placement("r") == "p"
    assert h.sample(CONFLICTS, stage="bind") == 0


def test_a_re_send_that_meets_a_conflict_keeps_the_assumption_the_first_send_may_have_landed() -> None:
    h = one_slot(deliver=False)
    binder = Unanswered(h, "lost", "conflict")
    h.create(run("r"))
    h.sync()
    assert h.step() == (KEY, "error")
    h.qclock.now += 10_000
    assert h.step() == (KEY, "error")  # read: not landed; the same bind once more: 409
    assert binder.sends == 2 and ASSUMED in h.cache.assumed
    assert h.sample(CONFLICTS, stage="bind") == 0


def test_a_run_seen_pending_at_a_newer_version_releases_the_unanswered_bind_and_plans_again() -> None:
    h = one_slot()
    binder = Unanswered(h, "lost")
    h.create(run("r"))
    assert h.step() == (KEY, "error")
    h.api.touch(KEY)  # someone else wrote the Run: the lost write, guarded by the older version, cannot land
    assert ASSUMED in h.cache.assumed  # Pending: the hand-off rule keeps it
    assert (KEY, "scheduled") in h.drain(retries=True)
    assert h.sample(CONFLICTS, stage="bind") == 1 and binder.sends == 2 and h.api.writes == 1


def test_a_failed_read_leaves_the_bind_unsettled_and_keeps_the_assumption() -> None:
    h = one_slot()
    binder = Unanswered(h, "lost")
    binder.read_error = st.ApiError("connection refused")
    h.create(run("r"))
    h.step()
    h.qclock.now += 10_000
    assert h.step() == (KEY, "error")
    assert binder.sends == 1 and ASSUMED in h.cache.assumed
    binder.read_error = None
    assert h.drain(retries=True) == [(KEY, "scheduled")]


def pod_changes_after_reserve(h: Harness, change: Any) -> None:
    """Right after the cycle reserves, the informer delivers `change` (before the bind)."""
    reserve = h.cache.reserve_waking

    def reserve_then_change(r: RunInfo, pod_name: str, pod_uid: str | None = None) -> Any:
        woken = reserve(r, pod_name, pod_uid)
        change()
        return woken

    h.cache.reserve_waking = reserve_then_change  # type: ignore[method-assign]


def test_a_pod_replaced_between_plan_and_bind_is_a_bind_conflict_and_nothing_is_written() -> None:
    h = one_slot()
    replaced = [False]

    def replace_pod() -> None:
        if not replaced[0]:
            replaced[0] = True
            h.scheduler.on_pod_deleted("ns", "p")
            h.scheduler.on_pod(pod("p", uid="uid-new", capacity={"runs": 1}), event="ADDED")

    pod_changes_after_reserve(h, replace_pod)
    binder = Unanswered(h)
    h.create(run("r"))
    assert h.step() == (KEY, "conflict")
    assert binder.sends == 0 and ASSUMED not in h.cache.assumed
    assert h.sample(CONFLICTS, stage="bind") == 1
    h.drain(retries=True)
    placed = h.api.get(KEY)
    assert placed is not None and (placed.pod_name, placed.pod_uid) == ("p", "uid-new")


def test_a_pod_deleted_between_plan_and_bind_is_a_bind_conflict() -> None:
    h = one_slot()
    pod_changes_after_reserve(h, lambda: h.scheduler.on_pod_deleted("ns", "p"))
    binder = Unanswered(h)
    h.create(run("r"))
    assert h.step() == (KEY, "conflict")
    assert binder.sends == 0 and h.sample(CONFLICTS, stage="bind") == 1
    assert ASSUMED not in h.cache.assumed and h.phase("r") == "Pending"


def test_a_throttled_bind_is_retried_no_sooner_than_the_servers_retry_after() -> None:
    h = one_slot()

    class Throttled(Unanswered):
        def update_status(self, r: RunInfo, body: dict[str, Any]) -> None:
            if self.sends == 0:
                self.sends += 1
                error = st.ApiError("429: Too many requests")
                error.retry_after = 30
                raise error
            super().update_status(r, body)

    binder = Throttled(h)
    h.create(run("r"))
    assert h.step() == (KEY, "error")
    assert ASSUMED not in h.cache.assumed  # refused before it was applied: released
    h.qclock.now += 29
    assert h.step() is None
    h.qclock.now += 1
    assert h.step() == (KEY, "scheduled") and binder.sends == 2
