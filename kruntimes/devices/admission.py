"""runtimed's device check before it claims a Run, and what the Run's process is told (SPEC §7.7).

runtimed admits by device name, atomically with the capacity check; it evaluates no
CEL and reads no class, so it trusts the scheduler's choice only as far as the pod's
current inventory confirms it. Each verdict says what runtimed does next:

- `ADMIT`: the devices are free; claim the Run.
- `BUSY`: a device is held by an admitted Run, shared capacity or a counter is spent, or
  the inventory is malformed (it admits nothing new): stay Scheduled, recheck on release.
- `DEVICE_ALLOCATION_MISSING`: the results are absent or do not cover the requests
  (ExactCount: `count`; All: at least one; one alternative per request): Failed.
- `ALLOCATED_DEVICE_MISSING`: a result names a device a well-formed inventory lacks: Failed.
"""

from __future__ import annotations

import json
from typing import Literal

from kruntimes.devices import claims, inventory, results, usage

ADMIT = "admit"
BUSY = "busy"
DEVICE_ALLOCATION_MISSING = "DeviceAllocationMissing"
ALLOCATED_DEVICE_MISSING = "AllocatedDeviceMissing"
Verdict = Literal["admit", "busy", "DeviceAllocationMissing", "AllocatedDeviceMissing"]

# `kruntimes_runtimed_device_waits_total{reason}` (§7.8) tells a malformed inventory apart.
MALFORMED_INVENTORY = "malformed_inventory"


def covers(claim: claims.DeviceClaim, labels: list[str]) -> bool:
    """Whether results labelled ``labels`` (one per result) satisfy every request exactly."""
    by_label: dict[str, int] = {}
    for label in labels:
        by_label[label] = by_label.get(label, 0) + 1
    expected: set[str] = set()
    for request in claim.requests:
        chosen = [a for a in request.alternatives
                  if by_label.get(f"{request.name}/{a.name}" if request.first_available else request.name)]
        if len(chosen) != 1:
            return False
        alt = chosen[0]
        label = f"{request.name}/{alt.name}" if request.first_available else request.name
        expected.add(label)
        count = by_label[label]
        if (alt.mode == "ExactCount" and count != alt.count) or (alt.mode == "All" and count < 1):
            return False
    return set(by_label) == expected


def admit(inv: inventory.Inventory | None, malformed: bool, admitted: list[usage.Holder],
          claim: claims.DeviceClaim, status_devices: object) -> Verdict:
    """The device verdict for one Scheduled Run of this pod, given the holders already admitted."""
    wanted, labels = _results(status_devices)
    if not wanted or not covers(claim, labels):
        return DEVICE_ALLOCATION_MISSING
    if malformed:
        return BUSY
    if inv is None or any(inv.device(h.device) is None for h in wanted):
        return ALLOCATED_DEVICE_MISSING
    before = usage.Usage(inv, admitted)
    together = usage.Usage(inv, admitted + wanted)
    for holder in wanted:
        device = inv.device(holder.device)
        assert device is not None
        if not device.allow_multiple_allocations and (holder.device in before.held
                                                      or sum(h.device == holder.device for h in wanted) > 1):
            return BUSY
        used = together.consumed.get(device.name, {})
        if device.allow_multiple_allocations and any(used.get(k, 0) > c.value for k, c in device.capacity):
            return BUSY
        if device.allow_multiple_allocations and "\0whole" in used and len(
                [h for h in admitted + wanted if h.device == device.name]) > 1:
            return BUSY
    sets = inv.counters()
    if any(amount > sets[name][counter] for (name, counter), amount in together.counters.items()):
        return BUSY
    return ADMIT


def _results(status_devices: object) -> tuple[list[usage.Holder], list[str]]:
    """The Run's own results as holders, with their request labels; empty if not well formed."""
    if not isinstance(status_devices, dict) or not isinstance(status_devices.get("results"), list):
        return [], []
    entries = status_devices["results"]
    held = results.holders(status_devices)
    labels = [e.get("request") for e in entries if isinstance(e, dict) and isinstance(e.get("device"), str)]
    if len(held) != len(entries) or not all(isinstance(label, str) for label in labels):
        return [], []
    return held, labels  # type: ignore[return-value]


def process_env(inv: inventory.Inventory, status_devices: object,
                env: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """`KRUNTIMES_DEVICES` (`{"<request>": [devices…]}`) and each `env` variable: attribute values joined by ','."""
    held, labels = _results(status_devices)
    devices: dict[str, list[str]] = {}
    for holder, label in zip(held, labels):
        devices.setdefault(label.split("/", 1)[0], []).append(holder.device)
    variables = {"KRUNTIMES_DEVICES": json.dumps(devices, separators=(",", ":"))}
    for name, attribute in env:
        values = []
        for holder in held:
            device = inv.device(holder.device)
            value = device.attribute(attribute) if device is not None else None
            if value is not None:
                values.append(_text(value))
        variables[name] = ",".join(values)
    return variables


def _text(value: inventory.AttributeValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, str)):
        return str(value)
    return inventory.version_text(value)
