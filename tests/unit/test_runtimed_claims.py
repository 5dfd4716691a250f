"""What a claim's read-back means, and how long runtimed waits before the next attempt (SPEC §4.1)."""

from __future__ import annotations

from typing import Any

import pytest

from kruntimes.runtimed import claims
from kruntimes.runtimed.reading import assigned_run

POD, POD_UID = "python-abcde", "uid-pod"


def run(phase: str = "Scheduled", *, uid: str = "uid-a", pod_uid: str = POD_UID, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "a", "namespace": "ns", "uid": uid, "resourceVersion": "2", **meta},
            "spec": {"runtime": "rt", "mode": {"task": {"args": ["true"]}}},
            "status": {"phase": phase, "assignment": {"podName": POD, "podUID": pod_uid}}}


RESERVED = assigned_run(run())[0]


@pytest.mark.parametrize("fresh, may_have_landed, verdict", [
    (run(), False, claims.RETRY),
    (run("Running"), True, claims.CLAIMED),
    (run("Running"), False, claims.DROPPED),
    (None, True, claims.DROPPED),
    (run(uid="uid-recreated"), False, claims.DROPPED),
    (run("Failed"), True, claims.DROPPED),
    (run(deletionTimestamp="2026-12-04T00:00:00Z"), False, claims.DROPPED),
    (run(pod_uid="uid-other"), False, claims.DROPPED),
], ids=["still scheduled here: try again", "running after an unanswered claim: ours",
        "running though every claim was refused: someone else's", "gone", "recreated under the same name",
        "ended", "being deleted", "moved to another pod"])
def test_a_read_after_a_failed_claim_says_what_to_do(fresh: dict[str, Any] | None, may_have_landed: bool,
                                                      verdict: str) -> None:
    is_mine = lambda r: r.pod_uid == POD_UID  # noqa: E731
    assert claims.settle(RESERVED, fresh, is_mine=is_mine, may_have_landed=may_have_landed) == verdict


@pytest.mark.parametrize("attempt, retry_after, delay", [
    (0, None, 0.25), (1, None, 0.5), (4, None, 4.0), (7, None, 30.0), (10_000, None, 30.0),
    (0, 7.0, 7.0), (7, 7.0, 30.0), (0, 86_400.0, claims.MAX_RETRY_AFTER), (0, 0.0, 0.25),
], ids=["first", "doubles", "keeps doubling", "capped", "capped however long", "a server's retry-after",
        "never shorter than the backoff", "a retry-after beyond reason is bounded", "retry-after zero"])
def test_retries_back_off_exponentially_to_a_cap_honouring_retry_after(attempt: int, retry_after: float | None,
                                                                       delay: float) -> None:
    assert claims.Backoff().delay(attempt, retry_after) == delay
