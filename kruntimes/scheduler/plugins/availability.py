"""RuntimePodAvailability: can this Runtime Pod take this Run at all (SPEC §3.3.1)?

Ready and not terminating; runtimed's heartbeat fresh against the cycle's `now`
(never the wall clock); capacity annotations valid; every requested resource
declared and fitting next to active and assumed usage; and the Run's workspace,
once bound to pods, keeps its Runs there.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Sequence

from kruntimes.scheduler.framework import CycleState
from kruntimes.scheduler.projection import RunInfo
from kruntimes.scheduler.snapshot import Snapshot
from kruntimes.scheduler.views import PodView

NOT_READY = "runtime pod not ready"
TERMINATING = "runtime pod terminating"
STALE = "runtimed stale"
INVALID_CAPACITY = "invalid capacity"
NOT_OFFERED = "resource not offered"
INSUFFICIENT = "insufficient capacity"
WORKSPACE_ELSEWHERE = "workspace bound to another pod"


@dataclass(frozen=True, slots=True)
class _State:
    fresh_since: datetime
    workspace_pods: frozenset[str]  # pod UIDs


class RuntimePodAvailability:
    name = "RuntimePodAvailability"
    reasons = (NOT_READY, TERMINATING, STALE, INVALID_CAPACITY, NOT_OFFERED, INSUFFICIENT, WORKSPACE_ELSEWHERE)

    def pre_filter(self, snapshot: Snapshot, run: RunInfo) -> _State:
        # now - heartbeat <= staleness  <=>  heartbeat >= now - staleness; a heartbeat
        # ahead of now is therefore fresh.
        since = snapshot.now - timedelta(seconds=snapshot.config.heartbeat_staleness_seconds)
        bound = snapshot.targets.workspace_pods(run.workspace) if run.workspace else frozenset()
        return _State(fresh_since=since, workspace_pods=bound)

    def filter(self, state: CycleState, pods: Sequence[PodView]) -> list[str | None]:
        st: _State = state.of(self.name)
        since, bound, requests = st.fresh_since, st.workspace_pods, state.requests
        # Everything but staleness and the workspace is a pure function of the view and
        # the request shape: memoised on the (immutable) view, like LeastLoaded's key.
        memo_key = repr((self.name, requests))  # a str: its hash is computed once, not per pod
        verdicts: list[str | None] = []
        append = verdicts.append
        for view in pods:
            static = view.memo.get(memo_key)
            if static is None:
                static = view.memo[memo_key] = _static(view, requests)
            before, heartbeat, after = static
            if before is not None:
                append(before)
            elif heartbeat is None or heartbeat < since:
                append(STALE)
            elif bound and view.info.uid not in bound:
                append(WORKSPACE_ELSEWHERE)
            else:
                append(after)
        return verdicts


def _static(view: PodView, requests) -> tuple:  # type: ignore[no-untyped-def]
    """(verdict before the staleness check, heartbeat, verdict after the workspace check)."""
    info = view.info
    before = NOT_READY if not info.ready else TERMINATING if info.terminating else None
    after = INVALID_CAPACITY if info.capacity_problem is not None else _fit(view.free, requests)
    return (before, info.heartbeat, after)


def _fit(free, requests) -> str | None:  # type: ignore[no-untyped-def]
    for resource, amount in requests:
        left = free.get(resource)
        if left is None:
            return NOT_OFFERED
        if left < amount:
            return INSUFFICIENT
    return None
