"""The snapshot: everything one scheduling cycle may read, as one consistent value.

The live scheduler and replay build it in two different ways (from watches; from
the journal) through the same cluster cache, and the planner is a pure function of
it. `pods` is an immutable tuple of immutable views, sorted by name. `targets` is
the namespace's affinity index; it is read-only to the planner and consistent for
as long as the cluster cache lock is held, which is why a cycle plans under that
lock: copying the targets instead would make every cycle walk the active Runs.
`changes`, when the cache has it, says which positions of `pods` were replaced
since earlier snapshots of the same group; the planner uses it only to find the
pods its tables must patch (`columns`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping

from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.projection import RunInfo
from kruntimes.scheduler.targets import NamespaceTargets
from kruntimes.scheduler.views import PodView


@dataclass(frozen=True, slots=True)
class ViewChanges:
    """The runtime group's log of replaced view positions: `log[:length]` as of this snapshot.

    `era` is a token that changes whenever the group rebuilt every view (positions
    logged under another era mean nothing here); `log` is the group's own list, only
    appended to, and read under the cluster cache lock like the snapshot."""

    era: object
    log: list[int]
    length: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    run: RunInfo
    pods: tuple[PodView, ...]
    targets: NamespaceTargets
    now: datetime
    lsn: int
    config: SchedulerConfig
    names: tuple[str, ...] | None = None  # the pods' names, when the cache already has them
    changes: ViewChanges | None = None  # which views were replaced, when the cache logs it
    # SPEC §7.2: the RuntimeDeviceClasses this cycle plans with (None: none known), name → class.
    device_classes: Mapping[str, Any] | None = None
