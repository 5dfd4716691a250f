"""The plugin interface: extension points, per-cycle state and wake-up hints.

What a plugin implements and what it is handed, apart from the planner that runs
plugins (`planner`), as kube-scheduler keeps `interface.go` and `cycle_state.go`
apart from its runtime: plugins import this module only, so the planner may import
the plugins (through `registry`) without a circle.

One Protocol per extension point, as in kube-scheduler's framework. Plugins work
on a batch of pods rather than one pod per call: the semantics are kube's (each
Filter plugin sees only the pods every earlier plugin accepted, so evaluation of a
pod stops at its first rejection), but one call per plugin per cycle instead of one
per pod is what lets a Python planner evaluate a thousand pods in about a
millisecond. Plugins receive only immutable values and cannot write anything; their
results come back as values. Optional extras are separate Protocols: `ScoreExtensions`
(normalisation), `FilterExtensions` (a Pending message's detail), `EnqueueExtensions`
(which cluster events can make a Run the plugin rejected schedulable) and, in
`columns`, `ColumnPlugin`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from kruntimes.scheduler import outcome as out
from kruntimes.scheduler.projection import Amounts, RunInfo
from kruntimes.scheduler.snapshot import Snapshot
from kruntimes.scheduler.views import PodView

# The cluster events that wake a parked Run (kube's ClusterEvent), also the `source` label of
# the wake-up metric (SPEC §3.1, §3.8). Every parked Run waits for the first two, by its
# Runtime (`parking`'s runtime index); a plugin's `EnqueueExtensions` names the others.
#: A pod of the Run's Runtime appeared, went, was replaced, or changed readiness or capacity.
RUNTIME_POD = "runtime_pod"
#: Capacity was released on a pod of the Run's Runtime (a Run ended, an assumption went).
CAPACITY_RELEASED = "capacity_released"
#: A Run became an active or assumed target that satisfies a waiting Run's required affinity.
AFFINITY_TARGET = "affinity_target"
WAKE_EVENTS = (RUNTIME_POD, CAPACITY_RELEASED, AFFINITY_TARGET)


@dataclass(frozen=True, slots=True)
class CycleState:
    """Per-cycle state: written once by PreFilter, then only read by Filter and Score."""

    snapshot: Snapshot
    run: RunInfo
    requests: Amounts
    data: Mapping[str, Any]

    def of(self, plugin: str) -> Any:
        return self.data.get(plugin)


@runtime_checkable
class PreFilterPlugin(Protocol):
    """Prepares a plugin's per-cycle data once, from the snapshot and the Run."""

    name: str

    def pre_filter(self, snapshot: Snapshot, run: RunInfo) -> Any: ...


@runtime_checkable
class FilterPlugin(Protocol):
    """Returns, for each pod handed in, None (feasible) or one reason from `reasons`.

    Unschedulable is a verdict, not an error: the Run stays Pending and the reason
    is counted in its message and in filter_rejections_total. An exception is an
    error: the cycle is aborted and the key retried with backoff.
    """

    name: str
    reasons: tuple[str, ...]

    def filter(self, state: CycleState, pods: Sequence[PodView]) -> list[str | None]: ...


@runtime_checkable
class ScorePlugin(Protocol):
    """Returns one raw score per feasible pod (an int, or a tuple of ints)."""

    name: str

    def score(self, state: CycleState, pods: Sequence[PodView]) -> list[out.Raw]: ...


@runtime_checkable
class ScoreExtensions(Protocol):
    """Optional: maps the raw scores of all feasible pods to 0..100 (framework-owned step)."""

    def normalize(self, state: CycleState, raws: Sequence[out.Raw]) -> list[int]: ...


@runtime_checkable
class FilterExtensions(Protocol):
    """Optional: the detail a Pending message adds to a Filter plugin's bounded reasons.

    A reason is a metric label and a journal count, so it names no resource; a person
    still needs to read WHICH resource is short. `explain` gets the plugin's own verdict
    per pod (None where another plugin rejected the pod, or none did) and names a few
    things per reason, for the message only, never for a label.
    """

    def explain(self, state: CycleState, pods: Sequence[PodView],
                verdicts: Sequence[str | None]) -> out.Explanation: ...


@runtime_checkable
class EnqueueExtensions(Protocol):
    """Optional for Filter plugins: which cluster events can make a Run it rejected schedulable.

    kube's EnqueueExtensions: the plugin that gave a reason knows what can change it, so
    the cache parks a Run by the events its rejections name, never by a reason's text.
    Maps some of the plugin's `reasons` to events of `WAKE_EVENTS` beyond the two every
    parked Run waits for (`RUNTIME_POD`, `CAPACITY_RELEASED`); a reason not named waits for
    those two only.
    """

    def wake_events(self) -> Mapping[str, frozenset[str]]: ...


class PluginError(RuntimeError):
    """A plugin broke its contract or raised; the cycle is aborted and retried."""
