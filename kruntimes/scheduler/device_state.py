"""What a cycle knows of devices (SPEC §7.6): inventories, claims, holders per pod, and the classes.

Projections carry device documents as canonical JSON text (hashable, exact,
JSON-round-trippable like every other projection field); this module turns them into
`kruntimes.devices` values once per distinct text, so a thousand pods sharing one
inventory parse it once and the allocator's search key (the inventory digest) is
the same object every cycle.

Pod device usage is the `status.devices` of the active Runs on the pod of their
podUID plus the assumed results: exactly the namespace's affinity targets
(`targets`, which already place every active or assumed Run on its current pod
by UID), read entry by entry by `kruntimes.devices.results`. The targets index the
ones holding devices by the pod they name, so one pod's holders are two look-ups
(`holders_on`), and what a search needs of a pod (`PodDevices`: its inventory, the
holders that count, their usage key) is kept per pod until its inventory text or
one of its two index keys changes; a reservation derives its pod's new entry from the
kept one and the results it assumed (`KeptPods.reserved`): the next cycle need not recompute it.

Classes are cluster-wide and come from the RuntimeDeviceClass informer; a cycle
plans with the classes of its snapshot (`DeviceClasses.view`, a value replaced
on every change, never edited).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import weakref
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from kruntimes.devices import allocation, claims, inventory, inventory_codec, results, usage
from kruntimes.scheduler.projection import PodInfo, RunInfo
from kruntimes.scheduler.targets import NamespaceTargets, Target

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


def holders_on(targets: NamespaceTargets, pod_name: str, pod_uid: str, exclude_uid: str) -> list[usage.Holder]:
    """The holders of one pod's devices, as `holders_by_pod(targets, exclude_uid).get(pod_uid, [])`."""
    found = _targets_on(targets, pod_name, pod_uid)
    if found is None:
        return holders_by_pod(targets, exclude_uid).get(pod_uid, [])
    return [h for uid in sorted(found) if uid != exclude_uid for h in _holders(found[uid].device_results)]  # type: ignore[arg-type]


def _targets_on(targets: NamespaceTargets, pod_name: str, pod_uid: str) -> dict[str, Target] | None:
    """The device-holding targets on the current pod (`pod_name`, `pod_uid`); None when it is not current
    (then only a walk over every target answers, as `pod_of` decides)."""
    if targets.current(pod_name, None) != pod_uid:
        return None
    by_uid = targets.device_holders.get((True, pod_uid))
    by_name = targets.device_holders.get((False, pod_name))
    if by_name is None:
        return by_uid or {}
    return by_name if by_uid is None else {**by_uid, **by_name}


@dataclass(frozen=True, slots=True)
class PodDevices:
    """One pod's devices as a search sees them; pods with the same `usage_id` get the same search."""

    inventory: inventory.Inventory
    holders: tuple[usage.Holder, ...]
    fingerprint: tuple  # type: ignore[type-arg]
    usage_id: int  # stands for (inventory digest, fingerprint) in this process: a per-cycle dict key


_USAGE_IDS: dict[tuple, int] = {}  # type: ignore[type-arg]
_NEXT_ID = itertools.count()  # never reused, so clearing the table cannot make two usages one
KEPT_LIMIT = 1 << 16


class KeptPods:
    """`PodDevices` kept per pod for one namespace's targets, dropped as the targets' device log says.

    An entry is kept only for a current pod and without the excluded Run among its holders,
    so it holds while neither of the pod's index keys (its UID's, its name's) is logged: the
    log names every change of their holders and of which pod is current. The inventory
    text is compared on each read (a new annotation is a new text).
    """

    def __init__(self) -> None:
        self.seen = 0  # absolute position in the targets' device log read so far
        # pod UID -> (name, text, devices, its holders' Run UIDs in order, their results texts)
        self.by_uid: dict[str, tuple[str, str, PodDevices | None, tuple[str, ...], tuple[str, ...]]] = {}
        self.uid_of: dict[str, str] = {}  # pod name -> the UID its entry is under

    def catch_up(self, targets: NamespaceTargets) -> None:
        start, log = targets.device_log_start, targets.device_log
        if self.seen < start:
            self.by_uid.clear()
            self.uid_of.clear()
        else:
            for by_uid, key in log[self.seen - start:]:
                uid = key if by_uid else self.uid_of.pop(key, None)
                if uid is not None and (entry := self.by_uid.pop(uid, None)) is not None:
                    self.uid_of.pop(entry[0], None)
        self.seen = start + len(log)

    def keep(self, uid: str, name: str, text: str, devices: PodDevices | None, holders: tuple[str, ...],
             results_texts: tuple[str, ...]) -> None:
        if len(self.by_uid) >= KEPT_LIMIT:
            self.by_uid.clear()
            self.uid_of.clear()
        old = self.by_uid.get(uid)
        if old is not None:
            self.uid_of.pop(old[0], None)
        stale = self.uid_of.get(name)
        if stale is not None:
            self.by_uid.pop(stale, None)
        self.by_uid[uid] = (name, text, devices, holders, results_texts)
        self.uid_of[name] = uid

    def reserved(self, targets: NamespaceTargets, pod: PodInfo, run_uid: str, log_end: int) -> None:
        """Reserve just put `run_uid`'s assumption on `pod`, the targets' one device change since `log_end`:
        the pod's entry becomes the one its holders now give, derived from the kept one and the new
        results, and the change is read. Anything else is left for the log to drop."""
        log = targets.device_log
        if self.seen != log_end or targets.device_log_start + len(log) != log_end + 1 or \
                log[-1] != (True, pod.uid):
            return
        entry = self.by_uid.get(pod.uid)
        target = targets.targets.get(run_uid)
        if entry is None or entry[0] != pod.name or entry[1] != pod.devices or target is None or \
                target.device_results is None or target.pod_uid != pod.uid:
            return
        holders, texts = entry[3], entry[4]
        at = bisect.bisect_left(holders, run_uid)  # (its index is a fresh one: it held nothing here)
        texts = (*texts[:at], target.device_results, *texts[at:])
        self.by_uid[pod.uid] = (pod.name, entry[1], _by_results(entry[1], texts),
                                (*holders[:at], run_uid, *holders[at:]), texts)
        self.seen = log_end + 1


_KEPT: weakref.WeakKeyDictionary[NamespaceTargets, KeptPods] = weakref.WeakKeyDictionary()


def reset_caches() -> None:
    """Forget every kept `PodDevices` and usage id (a cold start, for benchmarks and tests)."""
    _KEPT.clear()
    _LATEST[:] = [None, None]
    _USAGE_IDS.clear()
    _shared_pod_devices.cache_clear()
    _by_results.cache_clear()
    _ENCODED.clear()
    _RECHECKED.clear()


def kept_for(targets: NamespaceTargets) -> KeptPods:
    """The kept `PodDevices` of one namespace's targets, caught up with its log (once per cycle)."""
    ref, kept = _LATEST
    if ref is None or ref() is not targets:  # (a weak key is looked up by making a weak reference)
        kept = _KEPT.get(targets)
        if kept is None:
            kept = _KEPT[targets] = KeptPods()
        _LATEST[:] = [weakref.ref(targets), kept]
    if kept.seen != targets.device_log_start + len(targets.device_log):  # else nothing to read
        kept.catch_up(targets)
    return kept


def reserved(targets: NamespaceTargets, pod: PodInfo, run_uid: str, log_end: int) -> None:
    """After Reserve assumed `run_uid` on `pod` with results: `KeptPods.reserved` (not caught up first)."""
    ref, kept = _LATEST
    if ref is not None and ref() is targets:
        kept.reserved(targets, pod, run_uid, log_end)


_LATEST: list[Any] = [None, None]  # (a weak reference to the latest targets, their KeptPods): cycles repeat it


def log_end(targets: NamespaceTargets) -> int:
    """The absolute position after the targets' latest device change (`KeptPods.reserved`)."""
    return targets.device_log_start + len(targets.device_log)


def careful(targets: NamespaceTargets, exclude_uid: str) -> bool:
    """Whether the excluded Run holds devices itself: then no pod's kept entry may answer for it."""
    target = targets.targets.get(exclude_uid)
    return target is not None and target.device_results is not None


def pod_devices(targets: NamespaceTargets, kept: KeptPods, pod: PodInfo, exclude_uid: str,
                use_kept: bool = True) -> PodDevices | None:
    """What a search needs of ``pod`` (which has an inventory annotation); None when it is malformed.

    ``use_kept`` False (see `careful`) computes it afresh and keeps nothing.
    """
    text: str = pod.devices  # type: ignore[assignment]
    uid = pod.uid
    if use_kept:
        entry = kept.by_uid.get(uid)
        if entry is not None and entry[0] == pod.name and entry[1] == text:
            return entry[2]
    found = _targets_on(targets, pod.name, uid)
    if found is None:  # not the current pod: only the walk answers
        result = _shared_pod_devices(text, tuple(holders_by_pod(targets, exclude_uid).get(uid, [])))
    else:  # keyed by the holders' results texts, whose hashes Python keeps: no holder is hashed
        holders = tuple([u for u in sorted(found) if u != exclude_uid])
        texts = tuple([found[u].device_results for u in holders])
        result = _by_results(text, texts)  # type: ignore[arg-type]
        if use_kept:
            kept.keep(uid, pod.name, text, result, holders, texts)  # type: ignore[arg-type]
    return result


@functools.lru_cache(maxsize=KEPT_LIMIT)
def _by_results(text: str, results_texts: tuple[str, ...]) -> PodDevices | None:
    """`_shared_pod_devices` of the holders these `status.devices` texts give, in this order (`holders_on`'s)."""
    return _shared_pod_devices(text, tuple([h for r in results_texts for h in _holders(r)]))


@functools.lru_cache(maxsize=KEPT_LIMIT)  # pods of one inventory and the same holders (most hold none) share one
def _shared_pod_devices(text: str, holders: tuple[usage.Holder, ...]) -> PodDevices | None:
    inv = inventory_of(text)
    if inv is None:
        return None
    fingerprint = usage.fingerprint(inv, holders)
    usage_key = (inv.digest, fingerprint)
    usage_id = _USAGE_IDS.get(usage_key)
    if usage_id is None:
        if len(_USAGE_IDS) >= KEPT_LIMIT:
            _USAGE_IDS.clear()
        usage_id = _USAGE_IDS[usage_key] = next(_NEXT_ID)
    return PodDevices(inv, holders, fingerprint, usage_id)


def encode(inventory_digest: str, outcome: allocation.Allocation) -> str:
    """`status.devices` as canonical JSON: what the assumption holds and Bind writes."""
    # The Filter hands the same allocation object to every cycle that finds the same search answer
    # (pods of one usage, kept outcomes): encoded once per object, which the entry holds alive.
    known = _ENCODED.get(id(outcome))
    if known is not None and known[0] is outcome and known[1] == inventory_digest:
        return known[2]
    text = inventory_codec.canonical_text(results.encode(inventory_digest, outcome))
    if len(_ENCODED) >= 4096:
        _ENCODED.clear()
    _ENCODED[id(outcome)] = (outcome, inventory_digest, text)
    return text


_ENCODED: dict[int, tuple[allocation.Allocation, str, str]] = {}


def reserve_fits(pod: PodInfo, targets: NamespaceTargets, run: RunInfo, device_results: str | None) -> bool:
    """Reserve's re-check under the cache lock (SPEC §7.6): every result still passes step 3's try rule.

    A Run without a claim has nothing to re-check; one with a claim needs results for this pod's inventory.
    """
    if run.devices is None:
        return True
    if device_results is None or pod.devices is None:
        return False
    if not careful(targets, run.uid):
        # The pod's kept devices: its usage id stands for (inventory, the usage its holders make),
        # which with the claim and the results decides the re-check. Ids are never reused.
        devices = pod_devices(targets, kept_for(targets), pod, run.uid)
        if devices is None:
            return False
        key = (devices.usage_id, run.devices, device_results)
        fits = _RECHECKED.get(key)
        if fits is None:
            fits = _recheck(pod, targets, run, device_results)
            if len(_RECHECKED) >= 4096:
                _RECHECKED.clear()
            _RECHECKED[key] = fits
        return fits
    return _recheck(pod, targets, run, device_results)


_RECHECKED: dict[tuple[int, str, str], bool] = {}


def _recheck(pod: PodInfo, targets: NamespaceTargets, run: RunInfo, device_results: str) -> bool:
    inv = inventory_of(pod.devices)  # type: ignore[arg-type]
    digest, chosen = _results_of(device_results)
    if inv is None or digest != inv.digest:
        return False
    holders = holders_on(targets, pod.name, pod.uid, run.uid)
    return allocation.recheck(inv, holders, claim_of(run.devices), chosen)


@functools.lru_cache(maxsize=4096)  # a Run's results repeat whenever the same devices are free again
def _results_of(text: str) -> tuple[Any, tuple[allocation.Result, ...]]:
    """(inventoryDigest, results) of the `status.devices` text the cycle encoded, as Reserve re-checks them."""
    doc: dict[str, Any] = json.loads(text)
    return doc.get("inventoryDigest"), tuple(
        allocation.Result(r["request"], r["device"], tuple(sorted((k, int(v)) for k, v in r["consumedCapacity"].items()))
                          if "consumedCapacity" in r else None) for r in doc["results"])


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
