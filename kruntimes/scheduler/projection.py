"""Projections: the planner's whole view of a Runtime Pod and of a Run.

The planner never sees a Kubernetes object. The cluster adapter (and `simulate`,
and the demo) turn objects into these small frozen values; the journal records
exactly these values; replay rebuilds them from the journal. Keeping them plain,
immutable and JSON-round-trippable is what lets a past cycle be rebuilt
bit-for-bit, so every field here is either a str, an int, a bool, a sorted tuple
or None - never a float, a set or a dict whose order could matter.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

# Names, not the module: `active` and `terminal` are read on every usage update and cycle.
from kruntimes.wire import ACTIVE_PHASES, TERMINAL_PHASES

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]

#: Requests and capacities: sorted (resource name, amount) pairs.
Amounts = tuple[tuple[str, int], ...]
Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Requirement:
    """One matchExpressions entry of a label selector."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Selector:
    """A label selector. `Term.selector is None` is the missing selector (matches nothing)."""

    match_labels: Labels = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        for req in self.match_expressions:
            present = req.key in labels
            if req.operator == "In":
                if not present or labels[req.key] not in req.values:
                    return False
            elif req.operator == "NotIn":
                if present and labels[req.key] in req.values:
                    return False
            elif req.operator == "Exists":
                if not present:
                    return False
            elif req.operator == "DoesNotExist":
                if present:
                    return False
            else:  # PreFilter rejects unknown operators; never match on one.
                return False
        return True


@dataclass(frozen=True, slots=True)
class Term:
    """A Run affinity term; the only topology is the Runtime Pod itself."""

    selector: Selector | None


@dataclass(frozen=True, slots=True)
class WeightedTerm:
    weight: int
    term: Term


@dataclass(frozen=True, slots=True)
class Affinity:
    required: tuple[Term, ...] = ()
    required_anti: tuple[Term, ...] = ()
    preferred: tuple[WeightedTerm, ...] = ()
    preferred_anti: tuple[WeightedTerm, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.required or self.required_anti or self.preferred or self.preferred_anti)


NO_AFFINITY = Affinity()


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What the scheduler knows of one Run.

    `problems` holds the validation errors found when the object was read; a Run
    with problems is a configuration error that PreFilter turns into terminal
    Failed. `requests` is then the lenient reading (`runs` default plus the entries
    that did parse), which is what an old active Run with a malformed entry counts.
    """

    namespace: str
    name: str
    uid: str
    runtime: str = ""
    resource_version: str = ""
    labels: Labels = ()
    requests: Amounts = (("runs", 1),)
    affinity: Affinity = NO_AFFINITY
    workspace: str | None = None
    phase: str = "Pending"
    pod_name: str | None = None
    pod_uid: str | None = None
    released: bool = False
    deleting: bool = False
    created: str = ""  # RFC 3339 creation timestamp; orders `simulate`, not the planner
    pending_message: str | None = None  # the observed Scheduled=False message, to write only changes
    problems: tuple[str, ...] = ()
    # Why a terminal Run ended (its Completed condition: reason, bounded message). Never read by
    # the planner: carried so that the journal, which records this projection, can say why
    # a Run failed (history, the UI). It changes only with the phase, so it adds no record.
    end_reason: str | None = None
    end_message: str | None = None
    # SPEC §7: the claim (`spec.devices`, canonical JSON; None: asks for no device) and the
    # allocation Bind wrote (`status.devices` as observed, canonical JSON), read by `kruntimes.devices`.
    devices: str | None = None
    device_results: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def active(self) -> bool:
        """Active = assigned and not terminal or released: it consumes capacity."""
        return self.phase in ACTIVE_PHASES and self.pod_name is not None and not self.released

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES or self.released

    @property
    def eligible(self) -> bool:
        """A Run the queue should hold: Pending (or phase not yet set), not being deleted."""
        return self.phase == "Pending" and not self.deleting

    def label_map(self) -> dict[str, str]:
        return dict(self.labels)


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What the scheduler knows of one Runtime Pod.

    `capacity` is only what the pod's capacity annotations declare (the JSON
    `kruntimes.io/capacity` and the `kruntimes.io/capacity.<name>` keys, SPEC §2.1);
    the default `runs` capacity is a scheduler setting applied by the
    planner, so that replay can ask "what if the default were 2". A malformed
    annotation sets `capacity_problem` (a bounded reason, not the user's text).
    """

    namespace: str
    name: str
    uid: str
    runtime: str
    resource_version: str = ""
    ready: bool = False
    terminating: bool = False
    heartbeat: datetime | None = None
    capacity: Amounts = ()
    capacity_problem: str | None = None
    devices: str | None = None  # the `kruntimes.io/devices` annotation as written (SPEC §7.1); None: absent

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def amounts(mapping: dict[str, int]) -> Amounts:
    """Sorted, positive-only amounts: the one canonical form of a request."""
    return tuple(sorted((k, v) for k, v in mapping.items() if v > 0))


@dataclass(frozen=True, slots=True)
class Assumption:
    """One entry of the assumed cache: a reserved, not yet observed, placement."""

    namespace: str
    run_uid: str
    run_name: str
    pod_name: str
    pod_uid: str
    requests: Amounts
    labels: Labels = ()
    affinity: Affinity = NO_AFFINITY
    workspace: str | None = None
    device_results: str | None = None  # the `status.devices` Bind will write (canonical JSON), SPEC §7.6

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.run_uid)
