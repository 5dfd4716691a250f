"""A device cycle's work as part of its outcome (SPEC §7.8), the same for the live loop and replay.

The DeviceAllocation Filter keeps what it found per pod in its cycle state (`last`);
the outcome's digest must cover every feasible pod's allocation and the steps the
cycle was charged, so that replay proves devices and steps, not only the choice.
`attach` copies that into the outcome right after `Planner.plan`, where both callers
hold the cycle's plugin state; a Run without a claim gets nothing, and its outcome
(and digest) is what it was before devices existed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kruntimes.devices import results
from kruntimes.scheduler import outcome as out
from kruntimes.scheduler.projection import RunInfo

ALLOCATION = "DeviceAllocation"  # the Filter's name (plugins.device_allocation.NAME), without importing CEL


def attach(planner: Any, run: RunInfo, outcome: out.CycleOutcome) -> out.CycleOutcome:
    """`outcome` with its device work (`DeviceWork`) when `run` claims devices and the cycle planned them."""
    # An invalid Run or a cycle a plugin aborted planned no devices; and the plugin's state may then
    # be an earlier cycle's, which replay need not have run: nothing is attached.
    if run.devices is None or outcome.status not in (out.SCHEDULED, out.UNSCHEDULABLE):
        return outcome
    plugin = next((f for f in planner.filters if f.name == ALLOCATION), None)
    cycle = getattr(plugin, "last", None)
    if cycle is None or cycle.run_uid != run.uid:  # no DeviceAllocation in this configuration (a what-if)
        return dataclasses.replace(outcome, devices=out.DeviceWork(steps=0, allocations=()))
    steps = cycle.searches()[0]
    allocations = []
    for pod in outcome.feasible:
        found = cycle.found_on(pod)
        allocations.append((pod, None if found is None else results.encode(*found)))
    chosen = dict(allocations).get(outcome.chosen) if outcome.chosen is not None else None
    return dataclasses.replace(outcome, devices=out.DeviceWork(steps=steps, allocations=tuple(allocations),
                                                               chosen=chosen))


def configuration() -> dict[str, Any]:
    """What decides device cycles beside the scheduler configuration (SPEC §7.8): the CEL engine, name and
    version, and the step budgets. The incarnation record carries it; replay reports a difference."""
    from kruntimes.devices import allocation, cel_engine  # the engine loads only where devices are planned

    name, version = cel_engine.ENGINE
    return {"cel_engine": name, "cel_engine_version": version,
            "search_steps": allocation.SEARCH_STEPS, "cycle_steps": allocation.CYCLE_STEPS}


def configuration_differences(recorded: dict[str, Any] | None) -> list[tuple[str, Any, Any]]:
    """(field, recorded, current) for each device setting a journal recorded otherwise than this code has.

    A journal written before devices were journaled recorded none: nothing to compare.
    """
    if not isinstance(recorded, dict):
        return []
    current = configuration()
    return [(k, recorded.get(k), v) for k, v in current.items() if recorded.get(k) != v]
