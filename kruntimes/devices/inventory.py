"""A Runtime Pod's device inventory as typed values (SPEC §7.1).

What the planner, runtimed and replay read once `kruntimes.devices.inventory_codec`
has parsed and bounded a `kruntimes.io/devices` annotation: devices in inventory order
with typed attributes, capacities with their request policies, and shared counters.
Every number is an exact int. Also here, because every user of an inventory needs
them: the upstream rounding of a capacity request by its policy, and the "content" of
a device that selectors see (everything but its name, SPEC §7.4), with its digest.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from kruntimes.devices import semver

AttributeValue = str | int | bool | semver.Version


@dataclass(frozen=True)
class RequestPolicy:
    """How a multi-allocatable device rounds a capacity request (upstream `CapacityRequestPolicy`)."""

    default: int | None = None
    valid_values: tuple[int, ...] = ()  # ascending; empty when a range (or nothing) is given
    minimum: int | None = None  # validRange.min; None when there is no range
    maximum: int | None = None
    step: int | None = None

    def round(self, request: int) -> int | None:
        """The amount a request of ``request`` consumes, or None if no valid amount covers it.

        Upstream: a request between valid values rounds up to the next one; under a
        range's minimum rounds up to the minimum; with a step rounds up to
        ``min + k·step``; above the largest valid value or the maximum is unsatisfiable.
        """
        if self.valid_values:
            return next((v for v in self.valid_values if v >= request), None)
        if self.minimum is not None:
            amount = max(request, self.minimum)
            if self.step:
                amount = self.minimum + -(-(amount - self.minimum) // self.step) * self.step
            if self.maximum is not None and amount > self.maximum:
                return None
            return amount
        return request


@dataclass(frozen=True)
class Capacity:
    value: int
    policy: RequestPolicy | None = None

    def consumed(self, request: int | None) -> int | None:
        """What one allocation takes of a multi-allocatable device (SPEC §7.5 step 5).

        ``request`` None means the claim did not ask for this capacity: the policy's
        default, else the whole value. None back means no valid amount covers it.
        """
        if request is None:
            return self.policy.default if self.policy is not None and self.policy.default is not None else self.value
        return self.policy.round(request) if self.policy is not None else request


@dataclass(frozen=True)
class CounterUse:
    counter_set: str
    counters: tuple[tuple[str, int], ...]  # sorted by counter name


@dataclass(frozen=True)
class Device:
    """One device of a pod. Attribute and capacity names are fully qualified (`domain/id`)."""

    name: str
    driver: str
    attributes: tuple[tuple[str, AttributeValue], ...]  # sorted by name
    capacity: tuple[tuple[str, Capacity], ...]  # sorted by name
    allow_multiple_allocations: bool = False
    consumes_counters: tuple[CounterUse, ...] = ()
    content_digest: str = field(default="", compare=False)

    def attribute(self, name: str) -> AttributeValue | None:
        return dict(self.attributes).get(name)

    def capacity_of(self, name: str) -> Capacity | None:
        return dict(self.capacity).get(name)


@dataclass(frozen=True)
class Inventory:
    """A pod's devices in inventory order, its counter sets, and the digest of its annotation text."""

    driver: str
    devices: tuple[Device, ...]
    counter_sets: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]  # sorted by set, then counter
    digest: str
    text: str

    def __post_init__(self) -> None:
        # Looked up per holder and per result on every pod of every cycle: a dict, built once.
        object.__setattr__(self, "_by_name", {d.name: d for d in self.devices})

    def device(self, name: str) -> Device | None:
        return self._by_name.get(name)  # type: ignore[attr-defined, no-any-return]

    def counters(self) -> dict[str, dict[str, int]]:
        return {name: dict(values) for name, values in self.counter_sets}


def split_name(name: str, driver: str) -> tuple[str, str]:
    """(domain, id) of an attribute or capacity name; a name without domain is the driver's."""
    domain, slash, ident = name.rpartition("/")
    return (domain, ident) if slash else (driver, name)


def qualify(name: str, driver: str) -> str:
    domain, ident = split_name(name, driver)
    return f"{domain}/{ident}"


def tagged(value: AttributeValue) -> dict[str, object]:
    """Upstream's tagged form of an attribute value (`{"int": 3}`, `{"version": "1.2.3"}`)."""
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, semver.Version):
        return {"version": version_text(value)}
    return {"string": value}


def version_text(value: semver.Version) -> str:
    core = f"{value.major}.{value.minor}.{value.patch}"
    return core + ("-" + ".".join(str(p) for p in value.prerelease) if value.prerelease else "")


def content_view(driver: str, attributes: tuple[tuple[str, AttributeValue], ...],
                 capacity: tuple[tuple[str, Capacity], ...], allow_multiple: bool) -> dict[str, object]:
    """What a selector sees of a device (never its name), as plain JSON-able data."""
    attrs: dict[str, dict[str, object]] = {}
    for name, value in attributes:
        domain, ident = name.rsplit("/", 1)
        attrs.setdefault(domain, {})[ident] = tagged(value)
    caps: dict[str, dict[str, int]] = {}
    for name, cap in capacity:
        domain, ident = name.rsplit("/", 1)
        caps.setdefault(domain, {})[ident] = cap.value
    return {"driver": driver, "attributes": attrs, "capacity": caps, "allowMultipleAllocations": allow_multiple}


def content_digest(view: dict[str, object]) -> str:
    """SHA-256 of the canonical JSON of a device's content: the selector memo's key (§7.4)."""
    text = json.dumps(view, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()
