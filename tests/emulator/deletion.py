"""Deletion as the API server and the controllers behind it carry it out.

Pods (the pod registry's graceful delete): the grace period is DeleteOptions'
``gracePeriodSeconds``, else the pod's ``spec.terminationGracePeriodSeconds`` (defaulted
to 30 on create). A pod not bound to a node (no ``spec.nodeName``) or already Succeeded
or Failed is deleted at once - the API server does that itself, since no kubelet would
ever confirm it. Otherwise DELETE only marks the pod: ``deletionTimestamp`` = now + grace,
``deletionGracePeriodSeconds`` = grace; a later DELETE may shorten the period, never
lengthen it, and grace 0 removes the pod at once. There is no kubelet here: the
emulator's ``Controllers`` thread removes the pod when its grace period has elapsed
(scaled by ``Emulator(grace_scale=...)``; ``Emulator.finish_terminating()`` ends every
grace period now).

ownerReferences (the garbage collector, "Garbage Collection" docs): deleting an owner
with the default ``Background`` propagation lets the collector delete, shortly after,
every dependent whose owners are all gone (a dependent with another live owner only
loses the dangling reference); ``Orphan`` strips the reference from the dependents
instead. A dependent created with an owner that does not exist is collected too.
``Foreground`` propagation is not implemented: it is refused with 501, visibly.
Objects with finalizers are only marked, as before; the update that removes the last
finalizer deletes them.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from tests.emulator import deep
from tests.emulator.resources import NAMESPACE, Resource
from tests.emulator.statuses import ApiError

if TYPE_CHECKING:
    from tests.emulator.store import Key, Store

DEFAULT_POD_GRACE = 30
POLL = 0.05
_POLICIES = ("Background", "Orphan", "Foreground")


def delete(store: "Store", resource: Resource, key: "Key", old: dict[str, Any],
           options: dict[str, Any]) -> dict[str, Any]:
    """(Lock held.) A DELETE of the stored ``old``: marked, or removed and collected."""
    policy = options.get("propagationPolicy") or "Background"
    if policy not in _POLICIES:
        raise ApiError(400, "BadRequest", f"propagationPolicy: Unsupported value: \"{policy}\": supported values: "
                                          + ", ".join(f'"{p}"' for p in _POLICIES))
    if policy == "Foreground":
        raise ApiError(501, "NotImplemented", "the API emulator does not implement Foreground propagation")
    meta = old["metadata"]
    grace = pod_grace(old, options) if resource.plural == "pods" else 0
    if meta.get("deletionTimestamp"):
        pending = meta.get("deletionGracePeriodSeconds") or 0
        if grace < pending and (grace > 0 or meta.get("finalizers")):
            return _mark(store, resource, key, old, grace)  # shortened
        if grace > 0 or pending == 0 or meta.get("finalizers"):
            return deep.copy(old)
    elif grace > 0 or meta.get("finalizers"):
        return _mark(store, resource, key, old, grace)
    shown = store.remove(resource, key)
    removed(store, shown, policy)
    return shown


def pod_grace(pod: dict[str, Any], options: dict[str, Any]) -> int:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    asked = options.get("gracePeriodSeconds")
    grace = int(asked) if asked is not None else int(spec.get("terminationGracePeriodSeconds", DEFAULT_POD_GRACE))
    if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
        return 0
    return max(grace, 0)


def _mark(store: "Store", resource: Resource, key: "Key", old: dict[str, Any], grace: int) -> dict[str, Any]:
    new = deep.copy(old)
    new["metadata"]["deletionTimestamp"] = store.timestamp(grace)
    new["metadata"]["deletionGracePeriodSeconds"] = grace
    shown = store.replace_stored(resource, key, new)
    if grace > 0:
        store.controllers.terminate_after(key, shown["metadata"]["uid"], grace)
    return shown


def removed(store: "Store", shown: dict[str, Any], policy: str) -> None:
    """(Lock held.) ``shown`` is gone: its namespace's content, or its dependents, follow."""
    from tests.emulator.store import resource_of  # a cycle at import time otherwise

    if shown["kind"] == NAMESPACE.kind:
        for key in store.keys_in(shown["metadata"]["name"]):
            store.remove(resource_of(key), key)
        return
    uid = shown["metadata"]["uid"]
    for key in store.owned_by(uid):
        if policy == "Orphan":
            _strip(store, key, {uid})
        else:
            store.controllers.collect(key)


def _strip(store: "Store", key: "Key", uids: set[str]) -> None:
    from tests.emulator.store import resource_of

    stored = store.stored(key)
    assert stored is not None
    new = deep.copy(stored)
    kept = [ref for ref in new["metadata"].get("ownerReferences") or [] if ref.get("uid") not in uids]
    if kept:
        new["metadata"]["ownerReferences"] = kept
    else:
        new["metadata"].pop("ownerReferences", None)
    store.replace_stored(resource_of(key), key, new)


class Controllers:
    """What the kubelet and the garbage collector would do, on one thread of the emulator."""

    def __init__(self, store: "Store") -> None:
        self._store = store
        self.grace_scale = 1.0
        self._deadlines: dict["Key", tuple[float, str]] = {}
        self._queue: deque["Key"] = deque()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kube-api-emulator-controllers", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._store.lock:
            self._stopping = True
            self._store.lock.notify_all()
        if self._thread is not None:
            self._thread.join()

    def terminate_after(self, key: "Key", uid: str, grace: int) -> None:
        """(Lock held.) Remove the pod ``key`` (if still ``uid``) ``grace`` seconds (scaled) from now."""
        self._deadlines[key] = (time.monotonic() + grace * self.grace_scale, uid)
        self._store.lock.notify_all()

    def finish_terminating(self) -> None:
        with self._store.lock:
            self._deadlines = {key: (0.0, uid) for key, (_, uid) in self._deadlines.items()}
            self._store.lock.notify_all()

    def collect(self, key: "Key") -> None:
        """(Lock held.) Let the garbage collector look at ``key``'s owners soon."""
        self._queue.append(key)
        self._store.lock.notify_all()

    def _run(self) -> None:
        store = self._store
        with store.lock:
            while not self._stopping:
                now = time.monotonic()
                for key, (deadline, uid) in list(self._deadlines.items()):
                    if deadline <= now:
                        del self._deadlines[key]
                        self._grace_elapsed(key, uid)
                while self._queue:
                    self._collect(self._queue.popleft())
                soonest = min((d for d, _ in self._deadlines.values()), default=now + POLL)
                store.lock.wait(max(0.0, min(POLL, soonest - now)))

    def _grace_elapsed(self, key: "Key", uid: str) -> None:
        from tests.emulator.store import resource_of

        pod = self._store.stored(key)
        if pod is None or pod["metadata"].get("uid") != uid or not pod["metadata"].get("deletionTimestamp"):
            return
        if pod["metadata"].get("finalizers"):  # the kubelet's final delete (grace 0) waits for them
            new = deep.copy(pod)
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            self._store.replace_stored(resource_of(key), key, new)
            return
        removed(self._store, self._store.remove(resource_of(key), key), "Background")

    def _collect(self, key: "Key") -> None:
        from tests.emulator.store import resource_of

        obj = self._store.stored(key)
        refs = (obj or {}).get("metadata", {}).get("ownerReferences") or []
        if obj is None or not refs:
            return
        dangling = {ref.get("uid") for ref in refs if self._store.find_uid(str(ref.get("uid"))) is None}
        if not dangling:
            return
        if len(dangling) < len(refs):
            _strip(self._store, key, dangling)  # type: ignore[arg-type]
            return
        resource = resource_of(key)
        delete(self._store, resource, key, obj, {"propagationPolicy": "Background"})
