"""The emulator's object store: what etcd plus the generic registry do for our resources.

Behaviour pinned by ``test_emulator*.py``, from the Kubernetes API documentation:

- every write takes the next value of ONE global counter as its ``resourceVersion``
  (like an etcd revision); a write that changes nothing is not a write (no new
  resourceVersion, no watch event), as the API server short-circuits no-op updates;
- create sets ``uid``, ``creationTimestamp``, ``generation`` 1; ``generation`` grows when
  anything outside ``metadata`` and ``status`` changes; 409 AlreadyExists on a taken name;
  a namespaced create in a namespace that does not exist is 404 (``namespaces "x" not
  found``), one in a terminating namespace 403 Forbidden;
- update/patch with a ``metadata.resourceVersion`` that is not the stored one is a 409
  Conflict; without one a patch is unconditional, and so is a PUT of a pod or Lease, but
  a PUT of a custom resource is 422 (``validation``);
- with a status subresource, writes to the object keep the stored status and writes to
  ``/status`` keep everything but status (custom resources and pods alike); a write is
  refused only for problems in the part it may change (the rest is the stored, already
  admitted object - as validation ratcheting has it);
- deletion (graceful for pods bound to a node, ownerReferences garbage-collected):
  ``deletion``; ``limit``/``continue`` paging: ``paging``;
- a bounded history of events serves watches from a resourceVersion; asking for one
  older than the history raises ``Gone`` (410). A change a request made reaches
  watches only after that request was answered (``begin_request``/``end_request``), and
  then after the resource's lag, unless the resource is held (``Delivery``).
"""

from __future__ import annotations

import secrets
import threading
import uuid
from collections import deque
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from tests.emulator import admission, deep, deletion, paging, patches, validation
from tests.emulator.resources import LEASE, NAMESPACE, RESOURCES, Resource
from tests.emulator.schema import CustomResourceSchema
from tests.emulator.statuses import ApiError, Event, Gone, conflict, not_found
from tests.emulator.watch_delivery import Delivery

__all__ = ["ApiError", "Event", "Gone", "Store", "conflict", "not_found"]

_STALE = "the object has been modified; please apply your changes to the latest version and try again"
Key = tuple[str, str, str]


class Store:
    """Objects by (resource, namespace, name), the global resourceVersion and the event history."""

    def __init__(self, *, history_size: int = 1000, schemas: dict[tuple[str, str], CustomResourceSchema],
                 clock: Callable[[], datetime] | None = None) -> None:
        mutex = threading.RLock()
        # One lock, three conditions on it: ``lock`` (the deletion controllers' timers),
        # ``advanced`` (a watch waiting for a resourceVersion, notified only while one
        # waits) and the delivery's, one per resource, so that a write wakes only the
        # watches of its own resource.
        self.lock = threading.Condition(mutex)
        self.advanced = threading.Condition(mutex)
        self._rv_waiters = 0
        self._objects: dict[Key, dict[str, Any]] = {}
        self._history: deque[Event] = deque()
        self._history_size = history_size
        # Like etcd, an empty store is already at revision 1: no list ever reports "0",
        # which a watch would read as "from any state".
        self._rv = 1
        self._floor = 1  # every event with rv > floor is still in the history
        self.schemas = schemas
        self.admission = admission.Admission()  # deploy/'s admission policies, as bound here
        self._clock = clock or (lambda: datetime.now(timezone.utc))
        self._request = threading.local()  # warnings and unpublished events of this thread's request
        self.delivery = Delivery(mutex)
        self.controllers = deletion.Controllers(self)

    @property
    def resource_version(self) -> int:
        with self.lock:
            return self._rv

    def take_warnings(self) -> list[str]:
        """The Warning texts of this thread's last write (pruned fields), cleared."""
        warnings = getattr(self._request, "warnings", [])
        self._request.warnings = []
        return warnings

    def begin_request(self, identity: admission.Identity | None = None) -> None:
        """Changes this thread makes from now on wait for ``end_request`` to reach watches; the request
        is ``identity``'s (None: the admin's)."""
        self._request.unpublished = []
        self._request.identity = identity

    def end_request(self) -> None:
        """The request was answered (or abandoned): publish its changes to watches."""
        events, self._request.unpublished = getattr(self._request, "unpublished", None), None
        if events:
            self.delivery.publish(events)

    # --- reads -----------------------------------------------------------------------

    def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        with self.lock:
            return deep.copy(self._current(resource, namespace, name))

    def list(self, resource: Resource, namespace: str | None, keep: Callable[[dict[str, Any]], bool],
             limit: int | None = None, token: str | None = None) -> paging.Page:
        """Matching objects sorted by namespace/name, at one resourceVersion, one page of them."""
        with self.lock:
            return paging.page(self, resource, namespace, keep, limit, token)

    def objects(self, resource: Resource) -> dict[Key, dict[str, Any]]:
        """(Hold ``lock``.) The stored objects of ``resource``, not copied."""
        return {key: obj for key, obj in self._objects.items() if key[0] == resource.qualified}

    def events_after(self, after: int) -> list[Event]:
        """Events with rv > ``after``; ``Gone`` when some of them left the history. Hold ``lock``."""
        if after < self._floor:
            raise Gone(after, self._floor + 1)
        newer: list[Event] = []
        for event in reversed(self._history):  # newest first: cost is the number returned
            if event.rv <= after:
                break
            newer.append(event)
        newer.reverse()
        return newer

    def compact(self) -> None:
        """Forget the whole history, as etcd compaction does: older watches get 410."""
        with self.lock:
            self._history.clear()
            self._floor = self._rv

    # --- writes ----------------------------------------------------------------------

    def create(self, resource: Resource, namespace: str | None, body: Any) -> dict[str, Any]:
        obj = _checked_body(resource, body)
        metadata = obj["metadata"]
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = metadata["generateName"] + "".join(
                secrets.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
        _check_namespace(resource, namespace, metadata)
        validation.metadata(resource, metadata)
        if resource.status_subresource:
            # "PUT/POST/PATCH requests to the custom resource ignore changes to the
            # status stanza"; a pod starts Pending whatever the body says.
            obj.pop("status", None)
            if resource.plural == "pods":
                obj["status"] = {"phase": "Pending"}
        if resource.plural == "pods" and isinstance(obj.get("spec"), dict):
            obj["spec"].setdefault("terminationGracePeriodSeconds", deletion.DEFAULT_POD_GRACE)
        with self.lock:
            if resource.namespaced:
                self._namespace_accepts_creates(namespace or "")
            key = (resource.qualified, namespace or "", metadata["name"])
            if key in self._objects:
                raise ApiError(409, "AlreadyExists", f'{resource.qualified} "{metadata["name"]}" already exists',
                               {"name": metadata["name"], "group": resource.group, "kind": resource.plural})
            self._admit(resource, obj, None, status=False)
            for server_owned in ("resourceVersion", "uid", "deletionTimestamp", "deletionGracePeriodSeconds",
                                 "generation", "selfLink"):
                metadata.pop(server_owned, None)
            metadata["uid"] = str(uuid.uuid4())
            metadata["creationTimestamp"] = self._now()
            if resource.generation:
                metadata["generation"] = 1
            created = self._commit(resource, key, obj, "ADDED", None)
            if metadata.get("ownerReferences"):
                self.controllers.collect(key)  # an owner that does not exist: the collector deletes it
            return created

    def update(self, resource: Resource, namespace: str | None, name: str, body: Any,
               status: bool = False) -> dict[str, Any]:
        new = _checked_body(resource, body)
        validation.update_names_a_version(resource, name, new["metadata"])
        with self.lock:
            old = self._current(resource, namespace or "", name)
            self._check_preconditions(resource, name, old, new["metadata"])
            return self._write(resource, old, new, status)

    def patch(self, resource: Resource, namespace: str | None, name: str, content_type: str, body: Any,
              status: bool = False) -> dict[str, Any]:
        with self.lock:
            old = self._current(resource, namespace or "", name)
            try:
                if content_type == "application/merge-patch+json":
                    new = patches.merge_patch(old, body)
                elif content_type == "application/strategic-merge-patch+json" and not resource.custom:
                    new = patches.strategic_merge_patch(old, body, resource.merge_keys)
                elif content_type == "application/json-patch+json":
                    new = patches.json_patch(old, body)
                else:
                    raise ApiError(415, "UnsupportedMediaType",
                                   f"the body of the request was in an unknown format - accepted media types "
                                   f"include: application/json-patch+json, application/merge-patch+json"
                                   f"{'' if resource.custom else ', application/strategic-merge-patch+json'}")
            except patches.PatchError as exc:
                raise ApiError(exc.code, "Invalid" if exc.code == 422 else "BadRequest", str(exc)) from exc
            new = _checked_body(resource, new)
            # A resourceVersion the patch itself sets is a precondition (optimistic lock).
            self._check_preconditions(resource, name, old, new["metadata"])
            return self._write(resource, old, new, status)

    def delete(self, resource: Resource, namespace: str | None, name: str,
               options: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            old = self._current(resource, namespace or "", name)
            self._check_preconditions(resource, name, old, options.get("preconditions") or {})
            return deletion.delete(self, resource, self._key(resource, old), old, options)

    # --- used by ``deletion`` (hold the lock) ----------------------------------------

    def stored(self, key: Key) -> dict[str, Any] | None:
        return self._objects.get(key)

    def find_uid(self, uid: str) -> Key | None:
        return next((key for key, obj in self._objects.items() if obj["metadata"].get("uid") == uid), None)

    def owned_by(self, uid: str) -> list[Key]:
        """Objects with an ownerReference to ``uid``."""
        return [key for key, obj in self._objects.items()
                if any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or [])]

    def keys_in(self, namespace: str) -> list[Key]:
        return [key for key in self._objects if key[1] == namespace]

    def replace_stored(self, resource: Resource, key: Key, new: dict[str, Any]) -> dict[str, Any]:
        return self._commit(resource, key, new, "MODIFIED", self._objects[key])

    def remove(self, resource: Resource, key: Key) -> dict[str, Any]:
        return self._commit(resource, key, None, "DELETED", self._objects[key])

    def timestamp(self, after_seconds: int = 0) -> str:
        return (self._clock() + timedelta(seconds=after_seconds)).astimezone(timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ")

    # --- internals (hold the lock) ---------------------------------------------------

    def _namespace_accepts_creates(self, namespace: str) -> None:
        found = self._objects.get((NAMESPACE.qualified, "", namespace))
        if found is None:
            raise not_found(NAMESPACE, namespace)
        if found["metadata"].get("deletionTimestamp"):
            raise ApiError(403, "Forbidden", f"unable to create new content in namespace {namespace} because it "
                                             "is being terminated")

    def _write(self, resource: Resource, old: dict[str, Any], new: dict[str, Any], status: bool) -> dict[str, Any]:
        name = old["metadata"]["name"]
        if status:
            if not resource.status_subresource:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            # Everything but status is the stored object's: shared, not copied (stored
            # objects are never changed in place), with a metadata of its own.
            replaced = {key: value for key, value in old.items() if key != "status"}
            replaced["metadata"] = dict(old["metadata"])
            if "status" in new:
                replaced["status"] = new["status"]
            new = replaced
        else:
            if new["metadata"].get("name", name) != name:
                raise ApiError(400, "BadRequest",
                               f"the name of the object ({new['metadata']['name']}) does not match the name "
                               f"on the URL ({name})")
            if resource.status_subresource:
                new.pop("status", None)
                if "status" in old:
                    new["status"] = deep.copy(old["status"])
            metadata = new["metadata"]
            validation.metadata(resource, {**metadata, "name": name})
            for immutable in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                              "deletionGracePeriodSeconds", "generation"):
                if immutable in old["metadata"]:
                    metadata[immutable] = old["metadata"][immutable]
                else:
                    metadata.pop(immutable, None)
        self._admit(resource, new, old, status=status)
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        # A /status write keeps all but status: what generation counts cannot change.
        if resource.generation and not status and _desired(new) != _desired(old):
            new["metadata"]["generation"] = old["metadata"].get("generation", 0) + 1
        if new == old:
            return old  # no-op: no new resourceVersion, no event
        key = self._key(resource, old)
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and not meta.get("deletionGracePeriodSeconds"):
            removed = self._commit(resource, key, None, "DELETED", new)
            deletion.removed(self, removed, "Background")
            return removed
        return self._commit(resource, key, new, "MODIFIED", old)

    def _commit(self, resource: Resource, key: Key, obj: dict[str, Any] | None,
                kind: str, old: dict[str, Any] | None) -> dict[str, Any]:
        self._rv += 1
        source = obj if obj is not None else old
        assert source is not None
        # One object for the store, the event and the answer: stored objects are never
        # changed in place (a write builds a new one; `get` and lists hand out copies),
        # so sharing them is safe, and ``obj`` was built for this write alone.
        shown = {**source, "metadata": {**source["metadata"], "resourceVersion": str(self._rv)}}
        if obj is None:
            self._objects.pop(key, None)
        else:
            self._objects[key] = shown
        event = Event(resource, kind, self._rv, shown, old)
        self._history.append(event)
        while len(self._history) > self._history_size:
            self._floor = self._history.popleft().rv
        unpublished = getattr(self._request, "unpublished", None)
        if unpublished is not None:
            unpublished.append(event)  # published when the request has been answered
        else:
            self.delivery.publish([event])
        if self._rv_waiters:
            self.advanced.notify_all()
        return shown

    def wait_for_version(self, rv: int, stop: Callable[[], bool], timeout: float) -> None:
        """(Hold ``lock``.) Wait until the store reached ``rv`` (or ``stop()``), at most ``timeout``."""
        self._rv_waiters += 1
        try:
            self.advanced.wait_for(lambda: self._rv >= rv or stop(), timeout=timeout)
        finally:
            self._rv_waiters -= 1

    def _admit(self, resource: Resource, obj: dict[str, Any], old: dict[str, Any] | None, status: bool) -> None:
        if resource.plural == "leases":
            validation.lease(resource, obj)
        if resource.plural == "events":
            validation.event(resource, obj, old)
        schema = self.schemas.get((resource.group, resource.plural)) if resource.custom else None
        if schema is None:
            if resource.plural == "pods" and not (obj.get("spec") or {}).get("containers"):
                raise validation.invalid(resource, obj, ["spec.containers: Required value"])
            self._validating_admission(resource, obj, old, status)
            return
        if status and old is not None:
            # Only the part this write may change is judged; the rest is the stored
            # object, admitted when it was written (and not walked again).
            pruned, problems = schema.admit_part(obj, old, "status")
        else:
            pruned, problems = schema.admit(obj, old)
            if old is not None and resource.status_subresource:
                problems = [p for p in problems if not p.startswith("status")]
        self._request.warnings = [f'unknown field "{path}"' for path in pruned]
        if problems:
            raise validation.invalid(resource, obj, problems)
        self._validating_admission(resource, obj, old, status)

    def _validating_admission(self, resource: Resource, obj: dict[str, Any], old: dict[str, Any] | None,
                              status: bool) -> None:
        """deploy/'s admission policies, judged last, as the API server does (``admission``)."""
        meta = (old or obj)["metadata"]
        self.admission.check("UPDATE" if old is not None else "CREATE", resource.group,
                             resource.plural + ("/status" if status else ""), resource.plural, meta.get("name", ""),
                             meta.get("namespace", ""), self.identity(), obj, old,
                             lambda ns, name: self._objects.get((LEASE.qualified, ns, name)))

    def identity(self) -> admission.Identity:
        """Who sent this thread's request (``begin_request``); the admin when it carried no token."""
        return getattr(self._request, "identity", None) or admission.ADMIN

    def _check_preconditions(self, resource: Resource, name: str, old: dict[str, Any],
                             wanted: dict[str, Any]) -> None:
        if wanted.get("uid") and wanted["uid"] != old["metadata"]["uid"]:
            raise conflict(resource, name, f"Precondition failed: UID in precondition: {wanted['uid']}, "
                                           f"UID in object meta: {old['metadata']['uid']}")
        if wanted.get("resourceVersion") and wanted["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise conflict(resource, name, _STALE)

    def _current(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        obj = self._objects.get((resource.qualified, namespace, name))
        if obj is None:
            raise not_found(resource, name)
        return obj

    @staticmethod
    def _key(resource: Resource, obj: dict[str, Any]) -> Key:
        return (resource.qualified, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])

    def _now(self) -> str:
        return self.timestamp()


def resource_of(key: Key) -> Resource:
    return next(r for r in RESOURCES if r.qualified == key[0])


def _desired(obj: dict[str, Any]) -> str:
    return deep.dumps({k: v for k, v in obj.items() if k not in ("metadata", "status")}, sort_keys=True)


def _checked_body(resource: Resource, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the request body is not a JSON object")
    obj = deep.copy(body)
    if obj.get("kind", resource.kind) != resource.kind or \
            obj.get("apiVersion", resource.api_version) != resource.api_version:
        raise ApiError(400, "BadRequest", f"the API version in the data ({obj.get('apiVersion')}) or kind "
                                          f"({obj.get('kind')}) does not match {resource.api_version} {resource.kind}")
    obj["kind"], obj["apiVersion"] = resource.kind, resource.api_version
    if not isinstance(obj.get("metadata"), dict):
        obj["metadata"] = {}
    return obj


def _check_namespace(resource: Resource, namespace: str | None, metadata: dict[str, Any]) -> None:
    if not resource.namespaced:
        metadata.pop("namespace", None)
        return
    if metadata.get("namespace", namespace) != namespace:
        raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the namespace "
                                          "sent on the request")
    metadata["namespace"] = namespace
