"""`kruntimes simulate`: "where would these Runs go?" without a cluster.

Reads Kubernetes YAML (Runtime Pods as v1 Pods, Runs as kruntimes.io/v1alpha1, and
the cluster settings ConfigMap `kruntimes-settings` that the scheduler and runtimed
read, for the default runs capacity: SPEC §2.3, Runtimes, which become their
``replicas`` pods as the controller, kubelet and runtimed would make them, with their
device inventory, and cluster-scoped RuntimeDeviceClasses: SPEC §7.8), loads them
into a cluster cache exactly as the informers would, then schedules every Pending Run
once, in creation order, through the same planner and the same reserve/assume path as
the live scheduler - each Run sees the assumptions of the Runs before it, devices
included. Nothing is bound and nothing is written.

Creation order is the order of instants (then namespace, then name), whatever form the
timestamp takes: RFC 3339 text with any offset or fraction (as ``metav1.Time`` reads it),
or the datetime PyYAML makes of an unquoted timestamp. The input is a user's file, not
an API server's answer, so what the API server would guarantee is checked here, with an
error naming the document: one object per kind/namespace/name, one per uid, metadata
and status of the types the planner's ingest reads (SPEC §2.2: a malformed *spec* is
the Run's own Failed outcome; a malformed *file* is the user's error). Files are read
through ``bounded_yaml``, so a hostile file is an error too, never a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any, Iterable

from kruntimes import bounded_yaml
from kruntimes.api import cluster_settings, ingest, models
from kruntimes.api.quantity import describe_input
from kruntimes.controller import reading, reconcile
from kruntimes.devices import results
from kruntimes.scheduler import device_state, outcome as out
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.planner import Planner
from kruntimes.scheduler.projection import RunInfo


#: The most Runtime Pods one Runtime may expand into here: a bound on what a file can make us build.
MAX_REPLICAS = 10_000
KINDS = (("v1", "Pod"), (models.API_VERSION, "Run"), (models.API_VERSION, "Runtime"),
         (models.API_VERSION, "RuntimeDeviceClass"))
# A Run without a creationTimestamp sorts first: Go's zero metav1.Time, as kube would read it.
ZERO_TIME = datetime.min.replace(tzinfo=timezone.utc)
_BEYOND_MICROSECONDS = re.compile(r"\.[0-9]{6}([0-9]+)")


class InputError(ValueError):
    """A document that cannot be read; the message names the file and document."""


@dataclass(frozen=True)
class Placement:
    namespace: str
    name: str
    phase: str          # Scheduled, Pending or Failed
    pod: str | None
    reason: str | None
    # SPEC §7 (a Run with a claim, once placed): request name ("req", or "req/alt" for a firstAvailable
    # alternative) → device names in result order, and where capacity was consumed, request → device →
    # capacity name → quantity. None: no claim, or not placed.
    devices: dict[str, list[str]] | None = None
    consumed: dict[str, dict[str, dict[str, str]]] | None = None

    def as_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"namespace": self.namespace, "name": self.name, "phase": self.phase,
                                 "pod": self.pod, "reason": self.reason}
        if self.devices is not None:
            found["devices"] = self.devices
        if self.consumed:
            found["consumed"] = self.consumed
        return found


def load_documents(sources: Iterable[tuple[str, str]]) -> list[tuple[str, dict[str, Any]]]:
    """(where, object) for every non-empty document of every (name, text) source."""
    documents = []
    for name, text in sources:
        try:
            for i, doc in bounded_yaml.load_all(name, text):
                if doc is None:
                    continue
                where = f"{name} document {i}"
                if not isinstance(doc, dict):
                    raise InputError(f"{where}: expected a Kubernetes object (a mapping), got {type(doc).__name__}")
                documents.append((where, doc))
        except bounded_yaml.Unreadable as exc:
            raise InputError(str(exc)) from exc
    return documents


def simulate(documents: list[tuple[str, dict[str, Any]]], now: datetime,
             config: SchedulerConfig | None = None) -> list[Placement]:
    config = config or SchedulerConfig()
    settings = [(where, doc) for where, doc in documents if cluster_settings.is_settings(doc)]
    if len(settings) > 1:
        raise InputError(f"{settings[1][0]}: a second {cluster_settings.CONFIGMAP} ConfigMap; give one")
    for where, doc in settings:  # the cluster's settings, as the scheduler and runtimed read them (SPEC §2.3)
        try:
            shared = cluster_settings.from_configmap(doc)
        except cluster_settings.SettingsError as exc:
            raise InputError(f"{where}: {exc}") from exc
        config = dataclasses.replace(config, default_runs_capacity=shared.default_runs_capacity)
    documents = [(where, doc) for where, doc in documents if not cluster_settings.is_settings(doc)]
    cache = ClusterCache(config)
    planner = Planner(config)
    runs: list[RunInfo] = []
    created: dict[tuple[str, str], tuple[datetime, Fraction]] = {}
    seen: dict[tuple[str, ...], str] = {}  # (kind, namespace, name) and (kind, uid) -> where
    for where, doc in _with_runtime_pods(documents, now):
        kind, api_version = doc.get("kind"), doc.get("apiVersion")
        if (api_version, kind) not in KINDS:
            raise InputError(f"{where}: unsupported object {_plain(api_version)}/{_plain(kind)}; "
                             f"expected v1/Pod, {models.API_VERSION}/Run, {models.API_VERSION}/Runtime, "
                             f"{models.API_VERSION}/RuntimeDeviceClass or the v1/ConfigMap {cluster_settings.CONFIGMAP}")
        meta = _metadata(where, doc)
        if kind == "RuntimeDeviceClass":  # cluster-scoped: one per name, judged as the informer's (SPEC §7.2)
            _once(seen, (kind, meta["name"]), where, f"RuntimeDeviceClass {_plain(meta['name'])} is already in")
            cache.upsert_device_class(meta["name"], meta.get("generation"), doc.get("spec") or {})
            continue
        namespace, name = meta.get("namespace") or "default", meta["name"]
        uid = meta.get("uid") or f"{namespace}/{name}"
        shown = f"{kind} {_plain(namespace)}/{_plain(name)}"
        _once(seen, (kind, namespace, name), where, f"{shown} is already in")
        _once(seen, (kind, "uid", uid), where, f"{shown} has uid {describe_input(uid, 63)}, as does")
        _status(where, doc)
        if kind == "Runtime":
            continue  # its pods follow it (`_with_runtime_pods`)
        if kind == "Pod":
            pod = ingest.pod_info({**doc, "metadata": {**meta, "uid": uid}})
            if pod is None:
                raise InputError(f"{where}: pod {_plain(name)} has no {models.RUNTIME_LABEL} label, "
                                 "so it is not a Runtime Pod")
            cache.upsert_pod(pod, now=now)
        else:
            instant = _creation_time(where, meta.get("creationTimestamp"))
            run = ingest.run_info({**doc, "metadata": {**meta, "uid": uid, "creationTimestamp": _rfc3339(instant[0])}})
            created[run.key] = instant
            cache.upsert_run(run)
            runs.append(run)
    results: dict[tuple[str, str], Placement] = {}
    for run in sorted((r for r in runs if r.eligible), key=lambda r: (created[r.key], r.namespace, r.name)):
        with cache.lock:
            outcome = planner.plan(cache.snapshot(run, now))
            found = planner.device_results(run, outcome.chosen) if outcome.chosen is not None else None
        results[run.key] = _placement(cache, run, outcome, None if found is None else device_state.encode(*found))
    return [results.get(r.key) or Placement(r.namespace, r.name, r.phase, r.pod_name, None) for r in runs]


def _with_runtime_pods(documents: list[tuple[str, dict[str, Any]]],
                       now: datetime) -> Iterable[tuple[str, dict[str, Any]]]:
    """Every document, each Runtime followed by the Runtime Pods the controller would make of it (SPEC §4.2).

    The pods are the controller's own bodies (``reconcile.pod_body``: template, label,
    the capacity annotation), named ``<runtime>-<i>`` where the API server would add a
    random suffix, and - as kubelet and runtimed would make them - Ready with a fresh
    heartbeat at ``now``. A Runtime whose capacity the controller refuses is an error here:
    it would get no pods, and every Run of it would wait for nothing.
    """
    for where, doc in documents:
        yield where, doc
        if (doc.get("apiVersion"), doc.get("kind")) != (models.API_VERSION, "Runtime"):
            continue
        runtime = reading.runtime_view({**doc, "metadata": _metadata(where, doc)})
        if runtime.capacity is None:
            raise InputError(f"{where}: Runtime {_plain(runtime.name)}: {runtime.capacity_problem} "
                             "(the controller creates no pods for it)")
        if runtime.replicas > MAX_REPLICAS:
            raise InputError(f"{where}: Runtime {_plain(runtime.name)}: spec.replicas {runtime.replicas} is more "
                             f"than simulate expands ({MAX_REPLICAS:,})")
        for i in range(runtime.replicas):
            body = reconcile.pod_body(runtime, runtime.capacity, reconcile.PodDefaults())
            meta = body["metadata"]
            del meta["generateName"], meta["ownerReferences"]
            meta["name"] = f"{runtime.name}-{i}"
            meta["annotations"][models.HEARTBEAT_ANNOTATION] = _rfc3339(now)
            body["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
            yield f"{where} (Runtime Pod {i + 1} of {runtime.replicas})", body


def _plain(value: Any) -> str:
    """A short string as it is; anything else as a bounded rendering."""
    return value if isinstance(value, str) and len(value) <= 63 else describe_input(value, 63)


def _metadata(where: str, doc: dict[str, Any]) -> dict[str, Any]:
    """metadata with the types the API server guarantees; name is required."""
    meta = doc.get("metadata")
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise InputError(f"{where}: metadata must be a mapping, got {describe_input(meta)}")
    if not meta.get("name"):
        raise InputError(f"{where}: metadata.name is required")
    for field in ("name", "namespace", "uid"):
        if meta.get(field) is not None and not isinstance(meta[field], str):
            raise InputError(f"{where}: metadata.{field} must be a string, got {describe_input(meta[field])}")
    for field in ("labels", "annotations"):
        if meta.get(field) is not None and not isinstance(meta[field], dict):
            raise InputError(f"{where}: metadata.{field} must be a mapping, got {describe_input(meta[field])}")
    return meta


def _status(where: str, doc: dict[str, Any]) -> None:
    status = doc.get("status")
    if status is None:
        return
    if not isinstance(status, dict):
        raise InputError(f"{where}: status must be a mapping, got {describe_input(status)}")
    if status.get("conditions") is not None and not isinstance(status["conditions"], list):
        raise InputError(f"{where}: status.conditions must be a list, got {describe_input(status['conditions'])}")


def _once(seen: dict[tuple[str, ...], str], key: tuple[str, ...], where: str, problem: str) -> None:
    """Each object once: an API server holds one object per key, so a second is a mistake."""
    if key in seen:
        raise InputError(f"{where}: {problem} {seen[key]}; each object may appear once")
    seen[key] = where


def _creation_time(where: str, value: Any) -> tuple[datetime, Fraction]:
    """The instant a Run was created: RFC 3339 text, or a timestamp PyYAML has already read.

    As (the instant to the microsecond, the seconds beyond it): RFC 3339 allows any
    number of fractional digits and a datetime keeps six, so `.0000001` must still
    sort after `.0`.
    """
    if value is None:
        return ZERO_TIME, Fraction(0)
    if isinstance(value, datetime):
        # YAML 1.1 would read a zoneless timestamp as UTC, but no API server holds one: it
        # is refused as the RFC 3339 text it stands for would be (SPEC §2.2 wants instants).
        parsed: datetime | None = value if value.tzinfo is not None else None
    else:
        parsed = ingest.parse_time(value) if isinstance(value, str) else None
    if parsed is None:
        raise InputError(f"{where}: metadata.creationTimestamp {describe_input(value)} is not an RFC 3339 "
                         "time with a zone (e.g. 2026-11-29T10:00:00Z)")
    beyond = _BEYOND_MICROSECONDS.search(value) if isinstance(value, str) else None
    rest = Fraction(int(beyond.group(1)), 10 ** (len(beyond.group(1)) + 6)) if beyond else Fraction(0)
    try:
        return parsed.astimezone(timezone.utc), rest
    except OverflowError:  # 0001-01-01T00:30:00+01:00 is before the first instant Python can hold
        raise InputError(f"{where}: metadata.creationTimestamp {describe_input(value)} is outside "
                         "the years 1 to 9999 in UTC") from None


def _rfc3339(instant: datetime) -> str:
    return "" if instant == ZERO_TIME else instant.isoformat().replace("+00:00", "Z")


def _placement(cache: ClusterCache, run: RunInfo, outcome: out.CycleOutcome, devices: str | None) -> Placement:
    if outcome.status == out.SCHEDULED and outcome.chosen is not None:
        # Reserved with its devices, as the live loop does, so the Runs after it see them taken (§7.6).
        if cache.reserve_waking(run, outcome.chosen, None, devices) is not None:
            return Placement(run.namespace, run.name, "Scheduled", outcome.chosen, None, *_shown(devices))
        return Placement(run.namespace, run.name, "Pending", None, "reservation conflict")
    if outcome.status == out.INVALID:
        return Placement(run.namespace, run.name, "Failed", None, outcome.message)
    return Placement(run.namespace, run.name, "Pending", None, outcome.message)


def _shown(devices: str | None) -> tuple[dict[str, list[str]] | None, dict[str, dict[str, dict[str, str]]] | None]:
    """`status.devices` as `-o json|yaml` shows it: devices per request in result order, and consumed capacity."""
    if devices is None:
        return None, None
    doc = json.loads(devices)
    consumed: dict[str, dict[str, dict[str, str]]] = {}
    for result in doc["results"]:
        if result.get("consumedCapacity"):
            consumed.setdefault(result["request"], {})[result["device"]] = dict(result["consumedCapacity"])
    return results.by_request(doc), consumed or None


__all__ = ["InputError", "Placement", "load_documents", "simulate"]
