"""Affinity targets of one namespace, indexed by label.

A target is a Run that is active on a Runtime Pod or assumed onto one. Required
and preferred Run affinity terms ask "which pods hold a Run matching this
selector"; answering that by walking every Run would make a cycle's cost grow with
the number of active Runs, so targets are indexed by (label key, value) and by
label key, and a selector is answered from the index, checking the full selector
only against the candidates the index returns.

A target is on the pod its assignment's `podUID` names (SPEC §2.2, "One pod
identity everywhere"): the index knows the UID of the current pod of every name
in the namespace, and a target is on the current pod of its UID, whatever pod name
its assignment also carries; one whose UID no current pod has is on no pod - it
matches nothing, repels nothing and binds no workspace until (if ever) that pod
is observed again. An assignment without a UID is on the current pod of its name.
Answers are therefore sets of pod UIDs, which a Filter compares with the UID of
the view it is handed.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterable, Mapping, Sequence

from kruntimes.scheduler.projection import Assumption, RunInfo, Selector, Term


@dataclass(frozen=True, slots=True)
class Target:
    uid: str
    name: str
    labels: Mapping[str, str]
    pod_name: str
    pod_uid: str | None  # None: an assignment by name only
    required_anti: tuple[Term, ...]
    workspace: str | None
    assumed: bool
    device_results: str | None = None  # the devices it holds on its pod (SPEC §7.6), canonical JSON


class NamespaceTargets:
    """The targets of one namespace. Mutated only under the cluster cache lock."""

    def __init__(self) -> None:
        self.targets: dict[str, Target] = {}
        self._by_label: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
        self._by_key: defaultdict[str, set[str]] = defaultdict(set)
        self._anti_holders: set[str] = set()
        self._workspace_pods: defaultdict[str, Counter[tuple[str, str | None]]] = defaultdict(Counter)
        self._pod_uids: dict[str, str] = {}  # name -> UID of the namespace's current pods (every runtime)
        self._uids: set[str] = set()  # the same UIDs, to tell whether an assignment's UID is current
        # SPEC §7.6: the targets holding devices, by the pod their assignment names (`device_key`), so a
        # cycle reads one pod's holders without walking every target; and the log of keys whose
        # holders or pod changed (oldest first; `device_log_start` is the absolute position of its
        # first entry), so what a reader derived per pod is dropped only for the pods that changed.
        self.device_holders: dict[tuple[bool, str], dict[str, Target]] = {}
        self.device_log: list[tuple[bool, str]] = []
        self.device_log_start = 0

    def __len__(self) -> int:
        return len(self.targets)

    # -- the namespace's pods -------------------------------------------------------------
    def pod_seen(self, name: str, uid: str) -> None:
        old = self._pod_uids.get(name)
        if old is not None:
            self._uids.discard(old)
            self._device_touched((True, old))
        self._pod_uids[name] = uid
        self._uids.add(uid)
        self._device_touched((True, uid))
        self._device_touched((False, name))

    def pod_gone(self, name: str) -> None:
        old = self._pod_uids.pop(name, "")
        self._uids.discard(old)
        self._device_touched((True, old))
        self._device_touched((False, name))

    def current(self, pod_name: str, pod_uid: str | None) -> str | None:
        """The UID of the current pod an assignment is on: its UID's pod, else (no UID) its name's."""
        if pod_uid is not None:
            return pod_uid if pod_uid in self._uids else None
        return self._pod_uids.get(pod_name)

    def pod_of(self, target: Target) -> str | None:
        """The UID of the current pod `target` is on, or None when it is on no pod."""
        return self.current(target.pod_name, target.pod_uid)

    # -- targets ----------------------------------------------------------------------------
    def put(self, target: Target) -> bool:
        """Index `target`. True when it is on a pod and that pod or its labels changed:
        then it may satisfy a Run waiting for its cohort (SPEC §3.1 `affinity_target`)."""
        before = self.remove(target.uid)
        self.targets[target.uid] = target
        for key, value in target.labels.items():
            self._by_label[(key, value)].add(target.uid)
            self._by_key[key].add(target.uid)
        if target.required_anti:
            self._anti_holders.add(target.uid)
        if target.workspace is not None:
            self._workspace_pods[target.workspace][(target.pod_name, target.pod_uid)] += 1
        if target.device_results is not None:
            key = device_key(target.pod_name, target.pod_uid)
            self.device_holders.setdefault(key, {})[target.uid] = target
            self._device_touched(key)
        on = self.pod_of(target)
        return on is not None and (before is None or before.labels != target.labels or self.pod_of(before) != on)

    def remove(self, uid: str) -> Target | None:
        target = self.targets.pop(uid, None)
        if target is None:
            return None
        for key, value in target.labels.items():
            _discard(self._by_label, (key, value), uid)
            _discard(self._by_key, key, uid)
        self._anti_holders.discard(uid)
        if target.workspace is not None:
            pods = self._workspace_pods[target.workspace]
            at = (target.pod_name, target.pod_uid)
            pods[at] -= 1
            if pods[at] <= 0:
                del pods[at]
            if not pods:
                del self._workspace_pods[target.workspace]
        if target.device_results is not None:
            key = device_key(target.pod_name, target.pod_uid)
            holders = self.device_holders[key]
            del holders[uid]
            if not holders:
                del self.device_holders[key]
            self._device_touched(key)
        return target

    DEVICE_LOG_LIMIT = 4096

    def _device_touched(self, key: tuple[bool, str]) -> None:
        log = self.device_log
        if len(log) >= self.DEVICE_LOG_LIMIT:  # a reader further behind starts afresh
            half = len(log) // 2
            del log[:half]
            self.device_log_start += half
        log.append(key)

    def select(self, selector: Selector | None, exclude_uid: str) -> list[Target]:
        """Targets on a current pod matching `selector` (Kubernetes semantics), never the excluded Run."""
        return self.select_all((selector,), exclude_uid)

    def select_all(self, selectors: Sequence[Selector | None], exclude_uid: str) -> list[Target]:
        """Targets on a current pod matching every one of `selectors`; none when `selectors` is empty."""
        if not selectors or any(s is None for s in selectors):
            return []
        candidates: set[str] | None = None
        for selector in selectors:
            candidates = self._candidates(selector, candidates)  # type: ignore[arg-type]
        uids: Iterable[str] = self.targets.keys() if candidates is None else candidates
        found = []
        for uid in uids:
            if uid == exclude_uid:
                continue
            target = self.targets[uid]
            if self.pod_of(target) is not None and all(
                    s.matches(target.labels) for s in selectors):  # type: ignore[union-attr, arg-type]
                found.append(target)
        return found

    def _candidates(self, selector: Selector, candidates: set[str] | None) -> set[str] | None:
        """Narrow `candidates` (None: every target) by what the label index can answer for `selector`."""
        for key, value in selector.match_labels:
            candidates = _narrow(candidates, self._by_label.get((key, value), set()))
        for req in selector.match_expressions:
            if req.operator == "In":
                found: set[str] = set()
                for value in req.values:
                    found |= self._by_label.get((req.key, value), set())
                candidates = _narrow(candidates, found)
            elif req.operator == "Exists":
                candidates = _narrow(candidates, self._by_key.get(req.key, set()))
        return candidates

    def pods_matching(self, selector: Selector | None, exclude_uid: str) -> frozenset[str]:
        """UIDs of the pods holding a target that matches `selector`."""
        return self.pods_of(self.select(selector, exclude_uid))

    def pods_of(self, targets: Iterable[Target]) -> frozenset[str]:
        return frozenset(uid for t in targets for uid in (self.pod_of(t),) if uid is not None)

    def pods_rejecting(self, labels: Mapping[str, str], exclude_uid: str) -> frozenset[str]:
        """UIDs of the pods holding a target whose own required anti-affinity matches `labels` (symmetry)."""
        pods = set()
        for uid in self._anti_holders:
            if uid == exclude_uid:
                continue
            target = self.targets[uid]
            pod_uid = self.pod_of(target)
            if pod_uid is not None and any(term.selector is not None and term.selector.matches(labels)  # type: ignore[arg-type]
                                           for term in target.required_anti):
                pods.add(pod_uid)
        return frozenset(pods)

    def workspace_pods(self, workspace: str) -> frozenset[str]:
        """UIDs of the current pods an active or assumed Run of `workspace` is on."""
        pods = self._workspace_pods.get(workspace)
        if not pods:
            return frozenset()
        found = set()
        for name, uid in pods:
            current = self.current(name, uid)
            if current is not None:
                found.add(current)
        return frozenset(found)


def device_key(pod_name: str, pod_uid: str | None) -> tuple[bool, str]:
    """The device-holder index's key of an assignment: (True, its pod UID), else (False, its pod name).

    A target with a UID is on the pod of that UID when it is current; one without is on
    the current pod of its name. So a current pod's holders are those under its UID's
    key and under its name's, and nothing else.
    """
    return (True, pod_uid) if pod_uid is not None else (False, pod_name)


def _narrow(current: set[str] | None, found: set[str]) -> set[str]:
    return set(found) if current is None else current & found


def _discard(index: defaultdict, key, uid: str) -> None:  # type: ignore[type-arg]
    members = index.get(key)
    if members is not None:
        members.discard(uid)
        if not members:
            del index[key]


def frozen_labels(labels: Iterable[tuple[str, str]]) -> Mapping[str, str]:
    return MappingProxyType(dict(labels))


def target_of(run: RunInfo | None, assumption: Assumption | None) -> Target | None:
    """The Run as an affinity target: where it is active, else where it is assumed, else none."""
    if run is not None and run.active:
        assert run.pod_name is not None
        return Target(uid=run.uid, name=run.name, labels=frozen_labels(run.labels), pod_name=run.pod_name,
                      pod_uid=run.pod_uid, required_anti=run.affinity.required_anti, workspace=run.workspace, assumed=False,
                      device_results=run.device_results)
    if assumption is not None:
        return Target(uid=assumption.run_uid, name=assumption.run_name, labels=frozen_labels(assumption.labels),
                      pod_name=assumption.pod_name, pod_uid=assumption.pod_uid, required_anti=assumption.affinity.required_anti,
                      workspace=assumption.workspace, assumed=True, device_results=assumption.device_results)
    return None
