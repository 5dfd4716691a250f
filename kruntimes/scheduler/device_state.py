"""What a cycle knows of devices (SPEC §7.6): inventories, claims, holders per pod, and the classes.

Projections carry device documents as canonical JSON text (hashable, exact,
JSON-round-trippable like every other projection field); this module turns them into
`kruntimes.devices` values once per distinct text, so a thousand pods sharing one
inventory parse it once and the allocator's search key (the inventory digest) is
the same object every cycle.

Pod device usage is the `status.devices` of the active Runs on the pod of their
podUID plus the assumed results: exactly the namespace's affinity targets
(`targets`, which already place every active or assumed Run on its current pod
by UID), read entry by entry by `kruntimes.devices.results`.

Classes are cluster-wide and come from the RuntimeDeviceClass informer; a cycle
plans with the classes of its snapshot (`DeviceClasses.view`, a value replaced
on every change, never edited).
"""

from __future__ import annotations

import functools
import json
from types import MappingProxyType
from typing import Any, Mapping

from kruntimes.devices import allocation, claims, inventory, inventory_codec, results, usage
from kruntimes.scheduler.projection import PodInfo, RunInfo
from kruntimes.scheduler.targets import NamespaceTargets

ClassMap = Mapping[str, "claims.DeviceClass | claims.InvalidDeviceClass"]
NO_CLASSES: ClassMap = MappingProxyType({})


@functools.lru_cache(maxsize=1024)  # an inventory text is at most 64 KiB: at most 64 MiB held
def inventory_of(text: str) -> inventory.Inventory | None:
    """The pod's inventory, or None when the annotation is malformed (SPEC §7.1)."""
    try:
        return inventory_codec.parse_annotation(text)
    except inventory_codec.InvalidInventory:
        return None


@functools.lru_cache(maxsize=4096)
def claim_of(text: str) -> claims.DeviceClaim:
    """A Run's claim; the text is one the API model accepted, so it parses."""
    return claims.parse_claim(json.loads(text))


@functools.lru_cache(maxsize=16384)
def _holders(text: str) -> tuple[usage.Holder, ...]:
    return tuple(results.holders(json.loads(text)))


def holders_by_pod(targets: NamespaceTargets, exclude_uid: str) -> dict[str, list[usage.Holder]]:
    """Pod UID → the holders of its devices: active and assumed Runs but `exclude_uid`, in Run UID order."""
    found: dict[str, list[usage.Holder]] = {}
    for uid in sorted(targets.targets):
        target = targets.targets[uid]
        if target.device_results is None or uid == exclude_uid:
            continue
        pod = targets.pod_of(target)
        if pod is not None:
            found.setdefault(pod, []).extend(_holders(target.device_results))
    return found


def encode(inventory_digest: str, outcome: allocation.Allocation) -> str:
    """`status.devices` as canonical JSON: what the assumption holds and Bind writes."""
    return inventory_codec.canonical_text(results.encode(inventory_digest, outcome))


def reserve_fits(pod: PodInfo, targets: NamespaceTargets, run: RunInfo, device_results: str | None) -> bool:
    """Reserve's re-check under the cache lock (SPEC §7.6): every result still passes step 3's try rule.

    A Run without a claim has nothing to re-check; one with a claim needs results for this pod's inventory.
    """
    if run.devices is None:
        return True
    if device_results is None or pod.devices is None:
        return False
    inv = inventory_of(pod.devices)
    doc: dict[str, Any] = json.loads(device_results)
    if inv is None or doc.get("inventoryDigest") != inv.digest:
        return False
    chosen = tuple(allocation.Result(r["request"], r["device"],
                                     tuple(sorted((k, int(v)) for k, v in r["consumedCapacity"].items()))
                                     if "consumedCapacity" in r else None) for r in doc["results"])
    holders = holders_by_pod(targets, run.uid).get(pod.uid, [])
    return allocation.recheck(inv, holders, claim_of(run.devices), chosen)


class DeviceClasses:
    """The RuntimeDeviceClasses the informer has seen; mutated under the cluster cache lock."""

    def __init__(self) -> None:
        self._classes: dict[str, claims.DeviceClass | claims.InvalidDeviceClass] = {}
        self._view: ClassMap = NO_CLASSES

    def upsert(self, name: str, generation: Any, spec: Any) -> bool:
        """Apply an add or update; True when what a cycle would see changed."""
        try:
            judged: claims.DeviceClass | claims.InvalidDeviceClass = claims.parse_class(name, generation, spec)
        except claims.InvalidDeviceClass as exc:
            judged = exc
        old = self._classes.get(name)
        if isinstance(old, claims.DeviceClass) and isinstance(judged, claims.DeviceClass) and old.digest == judged.digest:
            return False
        if isinstance(old, claims.InvalidDeviceClass) and isinstance(judged, claims.InvalidDeviceClass):
            return False
        self._classes[name] = judged
        self._view = MappingProxyType(dict(sorted(self._classes.items())))
        return True

    def delete(self, name: str) -> bool:
        if self._classes.pop(name, None) is None:
            return False
        self._view = MappingProxyType(dict(sorted(self._classes.items())))
        return True

    def view(self) -> ClassMap:
        return self._view
