"""What a Runtime Pod's devices already give away: active and assumed holders (SPEC §7.5 step 5, §7.6).

Pod device usage is the `status.devices` results of the active Runs on the pod of their
podUID plus the assumed results. A device the pod lacks counts nowhere; a holder
without consumed capacity (a malformed entry) uses the whole device; double booking
counts every holder. An exclusive device is taken whole; a multi-allocatable one per
capacity key; a device's shared counters are charged once while it has any holder.
"""

from __future__ import annotations

from dataclasses import dataclass

from kruntimes.devices import claims, inventory


@dataclass(frozen=True)
class Holder:
    """One active or assumed allocation of a device; ``consumed`` None means the whole device."""

    device: str
    consumed: tuple[tuple[str, int], ...] | None = None


def fingerprint(inv: inventory.Inventory, holders: tuple[Holder, ...] | list[Holder]) -> tuple:
    """The holders that count on this pod (devices it has), in a canonical order: part of the search key."""
    kept = [h for h in holders if inv.device(h.device) is not None]
    return tuple(sorted(((h.device, h.consumed is not None, tuple(sorted(h.consumed or ()))) for h in kept)))


class Usage:
    """What a pod's devices already give away: per device, holders, consumed capacity, counters in use."""

    def __init__(self, inv: inventory.Inventory, holders: tuple[Holder, ...] | list[Holder]) -> None:
        self.held: set[str] = set()
        self.consumed: dict[str, dict[str, int]] = {}
        for holder in holders:
            device = inv.device(holder.device)
            if device is None:  # a device the pod lacks counts nowhere (§7.6)
                continue
            self.held.add(device.name)
            amounts = self.consumed.setdefault(device.name, {})
            whole = holder.consumed is None or not device.allow_multiple_allocations
            given = dict(holder.consumed or ())
            for key, cap in device.capacity:
                amounts[key] = amounts.get(key, 0) + (cap.value if whole else given.get(key, 0))
            if whole:
                amounts["\0whole"] = 1  # blocks even a device without capacities
        self.counters: dict[tuple[str, str], int] = {}
        for name in sorted(self.held):
            charge(self.counters, inv.device(name))  # type: ignore[arg-type]


def charge(counters: dict[tuple[str, str], int], device: inventory.Device, sign: int = 1) -> None:
    for use in device.consumes_counters:
        for name, amount in use.counters:
            counters[(use.counter_set, name)] = counters.get((use.counter_set, name), 0) + sign * amount


def consumption(device: inventory.Device, alt: claims.Alternative) -> tuple[tuple[str, int], ...] | None:
    """Per capacity key, what ``alt`` takes of a multi-allocatable ``device``; None if it cannot."""
    requested = {inventory.qualify(k, device.driver): v for k, v in alt.capacity}
    amounts = []
    for key, cap in device.capacity:
        amount = cap.consumed(requested.get(key))
        if amount is None or amount > cap.value:
            return None
        amounts.append((key, amount))
    return tuple(amounts)
