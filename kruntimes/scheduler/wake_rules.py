"""Which updates wake whom: the tests the cluster cache applies to pod and Run events."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.projection import PodInfo, RunInfo


def status_only(old: RunInfo | None, new: RunInfo) -> bool:
    """Whether an update changed only what the scheduler itself writes on a Pending Run."""
    return old is not None and replace(old, resource_version=new.resource_version,
                                       pending_message=new.pending_message) == new


def availability_changed(old: PodInfo, new: PodInfo, now: datetime | None, config: SchedulerConfig) -> bool:
    """Whether a pod update can change what fits: readiness, deletion, capacity, device inventory (SPEC §7.6),
    heartbeat staleness."""
    if (old.ready, old.terminating, old.capacity, old.capacity_problem, old.devices) != (
            new.ready, new.terminating, new.capacity, new.capacity_problem, new.devices):
        return True
    if old.heartbeat == new.heartbeat or now is None:
        return False
    limit = now - timedelta(seconds=config.heartbeat_staleness_seconds)
    was_fresh = old.heartbeat is not None and old.heartbeat >= limit
    is_fresh = new.heartbeat is not None and new.heartbeat >= limit
    return was_fresh != is_fresh
