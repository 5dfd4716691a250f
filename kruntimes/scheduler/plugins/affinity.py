"""RunAffinity: required Run-to-Run affinity and anti-affinity (SPEC §3.3.2).

Targets are active and assumed Runs of the namespace, so a cohort sees its
earlier members before their binds are observed. PreFilter turns the terms into
sets of pod UIDs (from the label index, not by walking Runs), so Filter is a set
lookup per pod.

The semantics are kube-scheduler's InterPodAffinity, with the Runtime Pod as the
only topology (SPEC §3.3, amended 2026-12-01):

- required affinity: a target *satisfies* the Run when it matches ALL of the
  Run's required terms, and the pod must hold at least one satisfying target;
  targets that each match some of the terms do not add up to one;
- bootstrap: when no target anywhere in the namespace (any pod, available or not)
  satisfies the Run and the Run's own labels match all its required terms, the
  Run seeds its cohort and affinity passes everywhere. Nothing else bootstraps:
  two Runs that each require only the other's labels wait, with an affinity
  reason, until a satisfying target appears;
- required anti-affinity: each term on its own rejects the pods holding a target
  it matches;
- symmetry: a target whose own required anti-affinity matches the incoming Run
  rejects its pod.

Through a column (`columns`) the verdicts are written from those sets by position,
so a cycle's cost grows with the pods holding targets, not with the pods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from kruntimes.scheduler.columns import PodTable
from kruntimes.scheduler.interface import AFFINITY_TARGET, CycleState
from kruntimes.scheduler.projection import Amounts, RunInfo
from kruntimes.scheduler.snapshot import Snapshot
from kruntimes.scheduler.views import PodView

AFFINITY_UNSATISFIED = "run affinity not satisfied"
ANTI_AFFINITY = "run anti-affinity conflict"
EXISTING_ANTI_AFFINITY = "existing run anti-affinity"


@dataclass(frozen=True, slots=True)
class _State:
    # Sets of pod UIDs.
    allowed: frozenset[str] | None  # None: required affinity passes on every pod
    anti: frozenset[str]
    symmetric: frozenset[str]


class RunAffinity:
    name = "RunAffinity"
    reasons = (AFFINITY_UNSATISFIED, ANTI_AFFINITY, EXISTING_ANTI_AFFINITY)

    def wake_events(self) -> Mapping[str, frozenset[str]]:
        """A Run rejected for unsatisfied affinity also waits for a target that satisfies it (SPEC §3.1).
        Anti-affinity needs no more: its targets only go by ending or moving, which releases capacity."""
        return {AFFINITY_UNSATISFIED: frozenset({AFFINITY_TARGET})}

    def pre_filter(self, snapshot: Snapshot, run: RunInfo) -> _State | None:
        targets, uid, aff = snapshot.targets, run.uid, run.affinity
        labels = run.label_map()
        allowed: frozenset[str] | None = None
        if aff.required:
            selectors = [t.selector for t in aff.required]
            satisfying = targets.select_all(selectors, uid)
            seeds_cohort = not satisfying and all(s is not None and s.matches(labels) for s in selectors)
            if not seeds_cohort:
                allowed = targets.pods_of(satisfying)
        anti = frozenset().union(*(targets.pods_matching(t.selector, uid) for t in aff.required_anti))
        symmetric = targets.pods_rejecting(labels, uid)
        if allowed is None and not anti and not symmetric:
            return None  # nothing constrains this Run: Filter is a no-op
        return _State(allowed=allowed, anti=anti, symmetric=symmetric)

    def filter(self, state: CycleState, pods: Sequence[PodView]) -> list[str | None]:
        st: _State | None = state.of(self.name)
        if st is None:
            return [None] * len(pods)
        verdicts: list[str | None] = []
        for view in pods:
            uid = view.info.uid  # targets are on pods by UID (SPEC §2.2)
            if st.allowed is not None and uid not in st.allowed:
                verdicts.append(AFFINITY_UNSATISFIED)
            elif uid in st.anti:
                verdicts.append(ANTI_AFFINITY)
            elif uid in st.symmetric:
                verdicts.append(EXISTING_ANTI_AFFINITY)
            else:
                verdicts.append(None)
        return verdicts

    def column(self, requests: Amounts) -> _Column:
        return _COLUMN


class _Column:
    """Nothing per pod is kept: the verdicts come from the cycle's sets of pod UIDs."""

    def update(self, table: PodTable, changed: Sequence[int] | None) -> None:
        pass

    def signature(self, state: CycleState, table: PodTable) -> _State | None:
        return state.of(RunAffinity.name)  # type: ignore[no-any-return]

    def verdicts(self, state: CycleState, table: PodTable, st: _State | None) -> list[str | None] | None:
        if st is None:
            return None
        assert table.views is not None
        n = len(table.views)
        if st.allowed is None:
            verdicts: list[str | None] = [None] * n
        else:
            verdicts = [AFFINITY_UNSATISFIED] * n
            for i in table.positions(st.allowed):
                verdicts[i] = None
        # Precedence as in `filter`: unsatisfied, then anti-affinity, then symmetry.
        for i in table.positions(st.symmetric):
            if verdicts[i] is None:
                verdicts[i] = EXISTING_ANTI_AFFINITY
        for i in table.positions(st.anti):
            if verdicts[i] != AFFINITY_UNSATISFIED:
                verdicts[i] = ANTI_AFFINITY
        return verdicts


_COLUMN = _Column()
