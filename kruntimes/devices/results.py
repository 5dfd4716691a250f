"""`Run.status.devices`: what Bind writes and what the pod's device usage is read back from (SPEC §7.6).

Bind writes, in the assignment's guarded write, `{inventoryDigest, results: [{request,
device, consumedCapacity?}]}`; the scheduler, runtimed and replay read it back as the
holders of a pod's devices. An old active Run is judged entry by entry (§2.2): a
well-formed entry holds what it says; a malformed entry that still names a device holds
that device whole; an entry naming no device, or no `status.devices` at all, holds
nothing. Whether the pod still has the device is the usage's business (`usage.Usage`).
Quantities are written as plain integer strings: valid Kubernetes quantities, exact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kruntimes.devices import inventory_codec, quantities, usage

if TYPE_CHECKING:  # runtimed reads results without loading the allocator (and its CEL engine)
    from kruntimes.devices import allocation


def encode(inventory_digest: str, outcome: allocation.Allocation) -> dict[str, object]:
    """The `status.devices` value for an allocation made on the inventory of that digest."""
    results: list[dict[str, object]] = []
    for result in outcome.results:
        entry: dict[str, object] = {"request": result.request, "device": result.device}
        if result.consumed is not None:
            entry["consumedCapacity"] = {name: str(amount) for name, amount in result.consumed}
        results.append(entry)
    return {"inventoryDigest": inventory_digest, "results": results}


def holders(status_devices: object) -> list[usage.Holder]:
    """The holders an active Run's `status.devices` contributes to its pod, entry by entry."""
    if not isinstance(status_devices, dict):
        return []
    entries = status_devices.get("results")
    if not isinstance(entries, list):
        return []
    found = []
    for entry in entries:
        device = entry.get("device") if isinstance(entry, dict) else None
        if not isinstance(device, str):
            continue  # names no device: holds nothing
        found.append(usage.Holder(device, _consumed(entry)))
    return found


def _consumed(entry: dict) -> tuple[tuple[str, int], ...] | None:
    """The consumed capacity of a well-formed entry; None (the whole device) otherwise."""
    if not isinstance(entry.get("request"), str) or set(entry) - {"request", "device", "consumedCapacity"}:
        return None
    raw = entry.get("consumedCapacity")
    if not isinstance(raw, dict):
        return None
    amounts = []
    for name, amount in raw.items():
        if inventory_codec.qualified_name_error(name) is not None or "/" not in name or not isinstance(amount, str):
            return None
        try:
            amounts.append((name, quantities.parse_count(amount)))
        except quantities.InvalidCount:
            return None
    return tuple(sorted(amounts))



def by_request(status_devices: object) -> dict[str, list[str]]:
    """`status.devices` as people read it: request ("req" or "req/alt") → device names, in result order.

    Entries that name no device or no request are left out (they hold nothing a person could look up).
    """
    entries = status_devices.get("results") if isinstance(status_devices, dict) else None
    found: dict[str, list[str]] = {}
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("request"), str) and isinstance(entry.get("device"), str):
            found.setdefault(entry["request"], []).append(entry["device"])
    return found


def describe(status_devices: object) -> str:
    """`gpu=gpu-0+gpu-1, nic/fast=nic-0`: one line for tables and pages; "" when it names no device."""
    return line(by_request(status_devices))


def line(devices: dict[str, list[str]]) -> str:
    """`by_request`'s mapping on one line."""
    return ", ".join(f"{request}={'+'.join(names)}" for request, names in devices.items())
