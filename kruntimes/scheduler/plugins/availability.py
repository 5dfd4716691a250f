"""RuntimePodAvailability: can this Runtime Pod take this Run at all (SPEC §3.3.1)?

Ready and not terminating; runtimed's heartbeat fresh against the cycle's `now`
(never the wall clock); capacity annotations valid; every requested resource
declared and fitting next to active and assumed usage; and the Run's workspace,
once bound to pods, keeps its Runs there.

Through a column (`columns`), the verdict that does not depend on the cycle is kept
per pod and request shape: `pre` (not ready, terminating, or no heartbeat: stale
whatever the clock) and `full` (`pre`, else the capacity verdict). Fresh pods'
heartbeats are kept sorted, so the pods stale at a cycle's `now` are a prefix found
by bisection. A cycle copies `full` only when some pod is stale or the Run's
workspace is bound, and patches those pods.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Sequence

from kruntimes.scheduler.columns import PodTable
from kruntimes.scheduler.interface import CycleState
from kruntimes.scheduler.outcome import Explanation
from kruntimes.scheduler.projection import Amounts
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
#: The Pending message's note for a Run whose request is above every pod's capacity.
NEVER_FITS = "no runtime pod could fit this Run even if idle: it waits until pods or their capacity change"


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
        memo_key = _memo_key(requests)
        verdicts: list[str | None] = []
        append = verdicts.append
        for view in pods:
            before, heartbeat, after = _memoised(view, memo_key, requests)
            if before is not None:
                append(before)
            elif heartbeat is None or heartbeat < since:
                append(STALE)
            elif bound and view.info.uid not in bound:
                append(WORKSPACE_ELSEWHERE)
            else:
                append(after)
        return verdicts


    def column(self, requests: Amounts) -> _Column:
        return _Column(requests)

    def explain(self, state: CycleState, pods: Sequence[PodView], verdicts: Sequence[str | None]) -> Explanation:
        """Which requested resources the capacity verdicts were about, and whether any pod could
        ever hold the Run (issue 27: "60 insufficient capacity" alone does not say which).

        Only unschedulable cycles ask, once per cycle: O(pods x requested resources).
        """
        requests = state.requests
        short: set[str] = set()
        missing: set[str] = set()
        for view, verdict in zip(pods, verdicts):
            if verdict == INSUFFICIENT:
                free = view.free
                short.update(r for r, amount in requests if r in free and free[r] < amount)
            elif verdict == NOT_OFFERED:
                missing.update(r for r, _ in requests if r not in view.free)
        # Usage only frees what the pods have: above every pod's whole capacity (or on pods whose
        # capacity cannot be read), nothing but a pod or capacity change can let the Run in.
        never = bool(pods) and all(_never_fits(view, requests) for view in pods)
        named = tuple((reason, tuple(sorted(names))) for reason, names in ((INSUFFICIENT, short),
                                                                           (NOT_OFFERED, missing)) if names)
        return Explanation(named=named, note=NEVER_FITS if never else None, waits_for_pods=never)


class _Column:
    """The static verdicts of one table's pods for one request shape."""

    __slots__ = ("requests", "memo_key", "pre", "after", "full", "heartbeats", "fresh", "version")

    def __init__(self, requests: Amounts) -> None:
        self.requests, self.memo_key = requests, _memo_key(requests)
        self.pre: list[str | None] = []  # NOT_READY, TERMINATING, or STALE for no heartbeat at all
        self.after: list[str | None] = []  # the capacity verdict
        self.full: list[str | None] = []  # pre, else after: the verdict of a fresh pod, workspace aside
        self.heartbeats: list[datetime | None] = []  # of the pods whose verdict depends on the clock
        # (heartbeat, position) of those pods, sorted; None when heartbeats do not compare
        # (aware with naive), and then each cycle compares them one by one, as `filter` does.
        self.fresh: list[tuple[datetime, int]] | None = []
        self.version = 0  # moves whenever an entry of `full` changes

    def update(self, table: PodTable, changed: Sequence[int] | None) -> None:
        views = table.views
        assert views is not None
        if changed is None:
            n = len(views)
            self.pre, self.after, self.full, self.heartbeats = [None] * n, [None] * n, [None] * n, [None] * n
            self.version += 1
        for i in range(len(views)) if changed is None else changed:
            before, heartbeat, after = _memoised(views[i], self.memo_key, self.requests)
            if changed is not None:
                self._unsort(i)
            pre = before if before is not None else STALE if heartbeat is None else None
            self.pre[i], self.after[i] = pre, after
            full = pre if pre is not None else after
            if full != self.full[i]:
                self.full[i] = full
                self.version += 1
            self.heartbeats[i] = heartbeat if pre is None else None
            if changed is not None:
                self._sort(i)
        if changed is None:
            try:
                self.fresh = sorted((h, i) for i, h in enumerate(self.heartbeats) if h is not None)
            except TypeError:
                self.fresh = None

    def _unsort(self, i: int) -> None:
        if self.fresh is not None and (heartbeat := self.heartbeats[i]) is not None:
            del self.fresh[bisect.bisect_left(self.fresh, (heartbeat, i))]

    def _sort(self, i: int) -> None:
        if self.fresh is not None and (heartbeat := self.heartbeats[i]) is not None:
            try:
                bisect.insort(self.fresh, (heartbeat, i))
            except TypeError:
                self.fresh = None

    def signature(self, state: CycleState, table: PodTable) -> tuple:  # type: ignore[type-arg]
        """What this cycle's verdicts follow from: the static ones, the stale pods, the workspace."""
        st: _State = state.of(RuntimePodAvailability.name)
        since = st.fresh_since
        if self.fresh is not None:  # those with heartbeat < since: a prefix
            stale = tuple([i for _, i in self.fresh[:bisect.bisect_left(self.fresh, (since,))]])
        else:
            stale = tuple([i for i, h in enumerate(self.heartbeats) if h is not None and h < since])
        return (self.version, stale, st.workspace_pods)

    def verdicts(self, state: CycleState, table: PodTable,
                 signature: tuple) -> list[str | None]:  # type: ignore[type-arg]
        _, stale, bound = signature
        if not stale and not bound:
            return self.full
        if bound:
            # Pods without an earlier verdict are elsewhere, but those the workspace is on.
            verdicts = list(map(_ELSEWHERE.get, self.pre, self.pre))
            pre, after = self.pre, self.after
            for i in table.positions(bound):
                if pre[i] is None:
                    verdicts[i] = after[i]
        else:
            verdicts = list(self.full)
        for i in stale:  # the heartbeat outranks the workspace and the capacity
            verdicts[i] = STALE
        return verdicts


#: `_ELSEWHERE.get(v, v)` is v, or WORKSPACE_ELSEWHERE for None, in C.
_ELSEWHERE = {None: WORKSPACE_ELSEWHERE}


def _memo_key(requests: Amounts) -> str:
    return repr((RuntimePodAvailability.name, requests))  # a str: hashed once per cycle, not per pod


def _memoised(view: PodView, memo_key: str, requests: Amounts) -> tuple:  # type: ignore[type-arg]
    """`_static`, kept on the (immutable) view."""
    static = view.memo.get(memo_key)
    if static is None:
        static = view.memo[memo_key] = _static(view, requests)
    return static


def _static(view: PodView, requests) -> tuple:  # type: ignore[no-untyped-def]
    """(verdict before the staleness check, heartbeat, verdict after the workspace check)."""
    info = view.info
    before = NOT_READY if not info.ready else TERMINATING if info.terminating else None
    after = INVALID_CAPACITY if info.capacity_problem is not None else _fit(view.free, requests)
    return (before, info.heartbeat, after)


def _never_fits(view: PodView, requests: Amounts) -> bool:
    if view.info.capacity_problem is not None:
        return True
    capacity = view.capacity
    return any(capacity.get(r, -1) < amount for r, amount in requests)


def _fit(free, requests) -> str | None:  # type: ignore[no-untyped-def]
    for resource, amount in requests:
        left = free.get(resource)
        if left is None:
            return NOT_OFFERED
        if left < amount:
            return INSUFFICIENT
    return None
