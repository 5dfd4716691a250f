"""The snapshot: everything one scheduling cycle may read, as one consistent value.

The live scheduler and replay build it in two different ways (from watches; from
the journal) through the same cluster cache, and the planner is a pure function of
it. `pods` is an immutable tuple of immutable views, sorted by name. `targets` is
the namespace's affinity index; it is read-only to the planner and consistent for
as long as the cluster cache lock is held, which is why a cycle plans under that
lock: copying the targets instead would make every cycle walk the active Runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.projection import RunInfo
from kruntimes.scheduler.targets import NamespaceTargets
from kruntimes.scheduler.views import PodView


@dataclass(frozen=True, slots=True)
class Snapshot:
    run: RunInfo
    pods: tuple[PodView, ...]
    targets: NamespaceTargets
    now: datetime
    lsn: int
    config: SchedulerConfig
    names: tuple[str, ...] | None = None  # the pods' names, when the cache already has them
