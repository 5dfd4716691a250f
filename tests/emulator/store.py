"""The emulator's object store: what etcd plus the generic registry do for our resources.

Behaviour pinned by ``test_emulator.py``, from the Kubernetes API documentation:

- every write takes the next value of ONE global counter as its ``resourceVersion``
  (like an etcd revision); a write that changes nothing is not a write (no new
  resourceVersion, no watch event), as the API server short-circuits no-op updates;
- create sets ``uid``, ``creationTimestamp``, ``generation`` 1; ``generation`` grows when
  anything outside ``metadata`` and ``status`` changes; 409 AlreadyExists on a taken name;
- update/patch with a ``metadata.resourceVersion`` that is not the stored one is a 409
  Conflict; without one it is unconditional;
- with a status subresource, writes to the object keep the stored status and writes to
  ``/status`` keep everything but status (custom resources and pods alike);
- a pod is deleted at once, as a real server does with a pod never bound to a node;
  delete of an object with finalizers only sets ``deletionTimestamp``; the update that
  removes the last finalizer deletes it; DELETE preconditions are honoured;
- a bounded history of events serves watches from a resourceVersion; asking for one
  older than the history raises ``Gone`` (410).
"""

from __future__ import annotations

import copy
import json
import re
import secrets
import threading
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from tests.emulator import patches
from tests.emulator.resources import RESOURCES, Resource
from tests.emulator.schema import CustomResourceSchema

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class ApiError(Exception):
    """An API failure, turned into a ``Status`` body by the server."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> dict[str, Any]:
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            body["details"] = self.details
        return body


class Gone(ApiError):
    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(410, "Expired", f"too old resource version: {requested} ({oldest})")


@dataclass(frozen=True)
class Event:
    """One committed change. ``old`` is the previous state (selectors need both)."""

    resource: Resource
    type: str
    rv: int
    obj: dict[str, Any]
    old: dict[str, Any] | None


def not_found(resource: Resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{resource.qualified} "{name}" not found',
                    {"name": name, "group": resource.group, "kind": resource.plural})


def conflict(resource: Resource, name: str, why: str) -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {resource.qualified} "{name}": {why}',
                    {"name": name, "group": resource.group, "kind": resource.plural})


_STALE = "the object has been modified; please apply your changes to the latest version and try again"


class Store:
    """Objects by (resource, namespace, name), the global resourceVersion and the event history."""

    def __init__(self, *, history_size: int = 1000, schemas: dict[tuple[str, str], CustomResourceSchema],
                 clock: Callable[[], datetime] | None = None) -> None:
        self.lock = threading.Condition()
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._history: deque[Event] = deque()
        self._history_size = history_size
        # Like etcd, an empty store is already at revision 1: no list ever reports "0",
        # which a watch would read as "from any state".
        self._rv = 1
        self._floor = 1  # every event with rv > floor is still in the history
        self._schemas = schemas
        self._clock = clock or (lambda: datetime.now(timezone.utc))
        self._request = threading.local()  # warnings of the write in progress on this thread

    @property
    def resource_version(self) -> int:
        with self.lock:
            return self._rv

    def take_warnings(self) -> list[str]:
        """The Warning texts of this thread's last write (pruned fields), cleared."""
        warnings = getattr(self._request, "warnings", [])
        self._request.warnings = []
        return warnings

    # --- reads -----------------------------------------------------------------------

    def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self._current(resource, namespace, name))

    def list(self, resource: Resource, namespace: str | None,
             keep: Callable[[dict[str, Any]], bool]) -> tuple[list[dict[str, Any]], int]:
        """Matching objects sorted by namespace/name, and the resourceVersion they were read at."""
        with self.lock:
            items = [copy.deepcopy(obj) for (plural, ns, _), obj in sorted(self._objects.items())
                     if plural == resource.qualified and namespace in (None, ns) and keep(obj)]
            return items, self._rv

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
        _validate_metadata(resource, metadata)
        if resource.status_subresource:
            # "PUT/POST/PATCH requests to the custom resource ignore changes to the
            # status stanza"; a pod starts Pending whatever the body says.
            obj.pop("status", None)
            if resource.plural == "pods":
                obj["status"] = {"phase": "Pending"}
        with self.lock:
            key = (resource.qualified, namespace or "", metadata["name"])
            if key in self._objects:
                raise ApiError(409, "AlreadyExists", f'{resource.qualified} "{metadata["name"]}" already exists',
                               {"name": metadata["name"], "group": resource.group, "kind": resource.plural})
            self._admit(resource, obj, None)
            for server_owned in ("resourceVersion", "uid", "deletionTimestamp", "generation", "selfLink"):
                metadata.pop(server_owned, None)
            metadata["uid"] = str(uuid.uuid4())
            metadata["creationTimestamp"] = self._now()
            if resource.generation:
                metadata["generation"] = 1
            return self._commit(resource, key, obj, "ADDED", None)

    def update(self, resource: Resource, namespace: str | None, name: str, body: Any,
               status: bool = False) -> dict[str, Any]:
        new = _checked_body(resource, body)
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
               preconditions: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            old = self._current(resource, namespace or "", name)
            self._check_preconditions(resource, name, old, preconditions)
            if old["metadata"].get("finalizers"):
                if old["metadata"].get("deletionTimestamp"):
                    return copy.deepcopy(old)
                new = copy.deepcopy(old)
                new["metadata"]["deletionTimestamp"] = self._now()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                return self._commit(resource, self._key(resource, old), new, "MODIFIED", old)
            removed = self._commit(resource, self._key(resource, old), None, "DELETED", old)
            if resource.plural == "namespaces":
                for key in [k for k in self._objects if k[1] == name]:
                    self._commit_delete_of(key)
            return removed

    # --- internals (hold the lock) ---------------------------------------------------

    def _write(self, resource: Resource, old: dict[str, Any], new: dict[str, Any], status: bool) -> dict[str, Any]:
        name = old["metadata"]["name"]
        if status:
            if not resource.status_subresource:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            replaced = copy.deepcopy(old)
            replaced.pop("status", None)
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
                    new["status"] = copy.deepcopy(old["status"])
            metadata = new["metadata"]
            _validate_metadata(resource, {**metadata, "name": name})
            for immutable in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                              "deletionGracePeriodSeconds", "generation"):
                if immutable in old["metadata"]:
                    metadata[immutable] = old["metadata"][immutable]
                else:
                    metadata.pop(immutable, None)
        self._admit(resource, new, old)
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if resource.generation and _desired(new) != _desired(old):
            new["metadata"]["generation"] = old["metadata"].get("generation", 0) + 1
        if new == old:
            return copy.deepcopy(old)  # no-op: no new resourceVersion, no event
        key = self._key(resource, old)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            return self._commit(resource, key, None, "DELETED", new)
        return self._commit(resource, key, new, "MODIFIED", old)

    def _commit(self, resource: Resource, key: tuple[str, str, str], obj: dict[str, Any] | None,
                kind: str, old: dict[str, Any] | None) -> dict[str, Any]:
        self._rv += 1
        shown = copy.deepcopy(obj if obj is not None else old)
        assert shown is not None
        shown["metadata"]["resourceVersion"] = str(self._rv)
        if obj is None:
            self._objects.pop(key, None)
        else:
            self._objects[key] = copy.deepcopy(shown)
        self._history.append(Event(resource, kind, self._rv, copy.deepcopy(shown), copy.deepcopy(old)))
        while len(self._history) > self._history_size:
            self._floor = self._history.popleft().rv
        self.lock.notify_all()
        return shown

    def _commit_delete_of(self, key: tuple[str, str, str]) -> None:
        resource = next(r for r in RESOURCES if r.qualified == key[0])
        self._commit(resource, key, None, "DELETED", self._objects[key])

    def _admit(self, resource: Resource, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        schema = self._schemas.get((resource.group, resource.plural)) if resource.custom else None
        if schema is None:
            if resource.plural == "pods" and not (obj.get("spec") or {}).get("containers"):
                raise _invalid(resource, obj, ["spec.containers: Required value"])
            return
        pruned, problems = schema.admit(obj, old)
        self._request.warnings = [f'unknown field "{path}"' for path in pruned]
        if problems:
            raise _invalid(resource, obj, problems)

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
    def _key(resource: Resource, obj: dict[str, Any]) -> tuple[str, str, str]:
        return (resource.qualified, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])

    def _now(self) -> str:
        return self._clock().astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _desired(obj: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in obj.items() if k not in ("metadata", "status")}, sort_keys=True)


def _checked_body(resource: Resource, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the request body is not a JSON object")
    obj = copy.deepcopy(body)
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


def _validate_metadata(resource: Resource, metadata: dict[str, Any]) -> None:
    name = metadata.get("name")
    problems = []
    pattern, what = (_DNS_LABEL, "RFC 1123 label") if not resource.namespaced else (_SUBDOMAIN, "RFC 1123 subdomain")
    if not name:
        problems.append("metadata.name: Required value: name or generateName is required")
    elif not isinstance(name, str) or len(name) > 253 or not pattern.match(name):
        problems.append(f'metadata.name: Invalid value: "{name}": a lowercase {what} must consist of lower case '
                        "alphanumeric characters, '-' or '.'")
    for key, value in (metadata.get("labels") or {}).items():
        prefix, _, label = key.rpartition("/")
        if (prefix and not _SUBDOMAIN.match(prefix)) or not _LABEL_NAME.match(label) or len(label) > 63:
            problems.append(f'metadata.labels: Invalid value: "{key}": name part must consist of alphanumeric '
                            "characters, '-', '_' or '.'")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            problems.append(f'metadata.labels: Invalid value: "{value}": a valid label must be an empty string '
                            "or consist of alphanumeric characters, '-', '_' or '.'")
    if problems:
        raise _invalid(resource, {"metadata": metadata}, problems)


def _invalid(resource: Resource, obj: dict[str, Any], problems: list[str]) -> ApiError:
    name = (obj.get("metadata") or {}).get("name") or ""
    kind = f"{resource.kind}.{resource.group}" if resource.group and resource.custom else resource.kind
    causes = [{"reason": "FieldValueInvalid", "message": p, "field": p.split(":", 1)[0]} for p in problems]
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {"; ".join(problems)}',
                    {"name": name, "group": resource.group, "kind": resource.kind, "causes": causes})

