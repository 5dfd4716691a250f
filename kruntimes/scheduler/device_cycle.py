"""The loop's device steps (SPEC §7.2, §7.6, §7.8): what a cycle allocated, class changes, device metrics.

Kept beside `loop` so that the loop reads as the numbered cycle: after planning (under
the cache lock) the devices the DeviceAllocation Filter found on the chosen pod become
the `status.devices` text that Reserve re-checks and assumes and Bind writes in the
assignment's own guarded write. A RuntimeDeviceClass change can turn any Pending
Run with devices feasible or not, so it enqueues them all (source `device_class`).
"""

from __future__ import annotations

from typing import Any

from kruntimes.devices import cel_engine
from kruntimes.scheduler import device_state, outcome as out
from kruntimes.scheduler.cache import ClusterCache, Wakeup
from kruntimes.scheduler.planner import Planner
from kruntimes.scheduler.metrics import SchedulerMetrics
from kruntimes.scheduler.plugins.device_allocation import DeviceCycle
from kruntimes.scheduler.projection import RunInfo

SOURCE_DEVICE_CLASS = "device_class"


def allocated(planner: Planner, metrics: SchedulerMetrics, run: RunInfo, outcome: out.CycleOutcome) -> str | None:
    """The chosen pod's `status.devices` (canonical JSON), None for a Run without a claim; counts the work (§7.8)."""
    if run.devices is None:
        return None
    plugin = planner.device_filter
    cycle: DeviceCycle | None = getattr(plugin, "last", None)
    if plugin is not None and cycle is not None and cycle.run_uid == run.uid:
        steps, allocated_n, exhausted, limit = cycle.searches()
        memoised = plugin.memo.hits - cycle.memo_hits  # type: ignore[attr-defined]
        engine = cycle.engine if cycle.engine is not None else cel_engine.shared()  # the one the cycle evaluated with
        metrics.device_cycle(steps, (allocated_n, exhausted, limit, memoised), engine.evaluations_by_result,
                             cycle.evaluations)
    found = planner.device_results(run, outcome.chosen) if outcome.chosen is not None else None
    return device_state.encode(*found) if found is not None else None


def class_changed(cache: ClusterCache, name: str, generation: Any, spec: Any) -> list[Wakeup]:
    with cache.lock:  # the change is journaled by the cache (§7.8), so replay plans with the same classes
        return _device_runs(cache) if cache.upsert_device_class(name, generation, spec) else []


def class_deleted(cache: ClusterCache, name: str) -> list[Wakeup]:
    with cache.lock:
        return _device_runs(cache) if cache.delete_device_class(name) else []


def _device_runs(cache: ClusterCache) -> list[Wakeup]:
    keys = [k for k in cache.pending_keys() if (r := cache.run(k)) is not None and r.devices is not None]
    return [(k, SOURCE_DEVICE_CLASS) for k in keys]
