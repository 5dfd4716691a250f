"""Affinity targets of one namespace, indexed by label.

A target is a Run that is active on a Runtime Pod or assumed onto one. Required
and preferred Run affinity terms ask "which pods hold a Run matching this
selector"; answering that by walking every Run would make a cycle's cost grow with
the number of active Runs, so targets are indexed by (label key, value) and by
label key, and a selector is answered from the index, checking the full selector
only against the candidates the index returns.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterable, Mapping

from kruntimes.scheduler.projection import Assumption, RunInfo, Selector, Term


@dataclass(frozen=True, slots=True)
class Target:
    uid: str
    name: str
    labels: Mapping[str, str]
    pod_name: str
    required_anti: tuple[Term, ...]
    workspace: str | None
    assumed: bool


class NamespaceTargets:
    """The targets of one namespace. Mutated only under the cluster cache lock."""

    def __init__(self) -> None:
        self.targets: dict[str, Target] = {}
        self._by_label: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
        self._by_key: defaultdict[str, set[str]] = defaultdict(set)
        self._anti_holders: set[str] = set()
        self._workspace_pods: defaultdict[str, Counter[str]] = defaultdict(Counter)

    def __len__(self) -> int:
        return len(self.targets)

    def put(self, target: Target) -> None:
        self.remove(target.uid)
        self.targets[target.uid] = target
        for key, value in target.labels.items():
            self._by_label[(key, value)].add(target.uid)
            self._by_key[key].add(target.uid)
        if target.required_anti:
            self._anti_holders.add(target.uid)
        if target.workspace is not None:
            self._workspace_pods[target.workspace][target.pod_name] += 1

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
            pods[target.pod_name] -= 1
            if pods[target.pod_name] <= 0:
                del pods[target.pod_name]
            if not pods:
                del self._workspace_pods[target.workspace]
        return target

    def select(self, selector: Selector | None, exclude_uid: str) -> Iterable[Target]:
        """Targets matching `selector` (Kubernetes semantics), never the excluded Run itself."""
        if selector is None:
            return ()
        candidates: set[str] | None = None
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
        uids: Iterable[str] = self.targets.keys() if candidates is None else candidates
        return [t for uid in uids if uid != exclude_uid
                for t in (self.targets[uid],) if selector.matches(t.labels)]  # type: ignore[arg-type]

    def pods_matching(self, selector: Selector | None, exclude_uid: str) -> frozenset[str]:
        return frozenset(t.pod_name for t in self.select(selector, exclude_uid))

    def pods_rejecting(self, labels: Mapping[str, str], exclude_uid: str) -> frozenset[str]:
        """Pods holding a target whose own required anti-affinity matches `labels` (symmetry)."""
        pods = set()
        for uid in self._anti_holders:
            if uid == exclude_uid:
                continue
            target = self.targets[uid]
            if any(term.selector is not None and term.selector.matches(labels)  # type: ignore[arg-type]
                   for term in target.required_anti):
                pods.add(target.pod_name)
        return frozenset(pods)

    def workspace_pods(self, workspace: str) -> frozenset[str]:
        pods = self._workspace_pods.get(workspace)
        return frozenset(pods) if pods else frozenset()


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
                      required_anti=run.affinity.required_anti, workspace=run.workspace, assumed=False)
    if assumption is not None:
        return Target(uid=assumption.run_uid, name=assumption.run_name, labels=frozen_labels(assumption.labels),
                      pod_name=assumption.pod_name, required_anti=assumption.affinity.required_anti,
                      workspace=assumption.workspace, assumed=True)
    return None
