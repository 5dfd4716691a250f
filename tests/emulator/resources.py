"""The resources the emulator serves, and how a request path names one of them.

Only what kruntimes touches: core v1 pods, namespaces and configmaps (the cluster
settings, read by the scheduler and runtimed), coordination.k8s.io/v1
leases, events.k8s.io/v1 events, and the kruntimes.io/v1alpha1 custom resources (RuntimeDeviceClass cluster-scoped). Each entry records the
server behaviours that differ between them (status subresource, generation, what a
DELETE answers, strategic-merge keys) so the store can stay generic.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Resource:
    """One REST resource type (``pods``, ``runs.kruntimes.io``)."""

    plural: str
    kind: str
    group: str = ""
    version: str = "v1"
    namespaced: bool = True
    status_subresource: bool = False
    generation: bool = True
    custom: bool = False
    # DELETE answers with the deleted object (pods, custom resources) or with a
    # Status of Success (leases, namespaces), as the real registry does.
    delete_returns_object: bool = True
    # Strategic merge patch: list path -> merge key (None: a set of scalars).
    # Custom resources do not support strategic merge patch at all (415).
    merge_keys: dict[tuple[str, ...], str | None] = field(default_factory=dict)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """How the API server names the resource in messages: ``runs.kruntimes.io``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


_METADATA_KEYS: dict[tuple[str, ...], str | None] = {
    ("metadata", "finalizers"): None,
    ("metadata", "ownerReferences"): "uid",
}

POD = Resource(
    plural="pods", kind="Pod", status_subresource=True,
    merge_keys={**_METADATA_KEYS,
                ("spec", "containers"): "name", ("spec", "initContainers"): "name",
                ("spec", "volumes"): "name", ("status", "conditions"): "type",
                ("status", "containerStatuses"): "name"},
)
NAMESPACE = Resource(plural="namespaces", kind="Namespace", namespaced=False, generation=False,
                     delete_returns_object=False, merge_keys=dict(_METADATA_KEYS))
CONFIGMAP = Resource(plural="configmaps", kind="ConfigMap", generation=False, merge_keys=dict(_METADATA_KEYS))
LEASE = Resource(plural="leases", kind="Lease", group="coordination.k8s.io", generation=False,
                 delete_returns_object=False, merge_keys=dict(_METADATA_KEYS))
EVENT = Resource(plural="events", kind="Event", group="events.k8s.io", generation=False,
                 delete_returns_object=False, merge_keys=dict(_METADATA_KEYS))
RUN = Resource(plural="runs", kind="Run", group="kruntimes.io", version="v1alpha1",
               status_subresource=True, custom=True)
RUNTIME = Resource(plural="runtimes", kind="Runtime", group="kruntimes.io", version="v1alpha1",
                   status_subresource=True, custom=True)

# SPEC §7.2: cluster-scoped, no status.
DEVICE_CLASS = Resource(plural="runtimedeviceclasses", kind="RuntimeDeviceClass", group="kruntimes.io",
                        version="v1alpha1", namespaced=False, custom=True)

RESOURCES = (POD, NAMESPACE, CONFIGMAP, LEASE, EVENT, RUN, RUNTIME, DEVICE_CLASS)
_BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}


@dataclass(frozen=True)
class Route:
    """What a request path addresses. ``namespace`` None on a namespaced resource: all namespaces."""

    resource: Resource
    namespace: str | None
    name: str | None
    subresource: str | None


def route(path: str) -> Route | None:
    """Parse ``/api/v1/...`` or ``/apis/GROUP/VERSION/...``; None for anything else."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    resource = _BY_PATH.get((group, version, rest[0]))
    if resource is None or (namespace is not None and not resource.namespaced):
        return None
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    if name is not None and resource.namespaced and namespace is None:
        return None
    return Route(resource, namespace, name, subresource)
