"""Projections to and from journal payloads.

The journal records exactly the projections the planner uses - never a full pod
spec, env or secrets - and replay must rebuild them bit-for-bit. Every function
pair here is an exact inverse (`decode(encode(x)) == x`, a property test holds it),
using only JSON-exact values: lists for tuples, RFC 3339 strings for times.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Mapping

from kruntimes.scheduler.projection import (Affinity, Assumption, PodInfo, Requirement, RunInfo, Selector, Term,
                                            WeightedTerm)


def _pairs(items: tuple[tuple[str, Any], ...]) -> list[list[Any]]:
    return list(map(list, items))


def _tuples(items: list[list[Any]]) -> tuple[tuple[Any, Any], ...]:
    return tuple((k, v) for k, v in items)


def _time(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat()


def _parse_time(s: str | None) -> datetime | None:
    return None if s is None else datetime.fromisoformat(s)


def selector_to(sel: Selector | None) -> dict[str, Any] | None:
    if sel is None:
        return None
    return {"match_labels": _pairs(sel.match_labels),
            "match_expressions": [[r.key, r.operator, list(r.values)] for r in sel.match_expressions]}


def selector_from(d: dict[str, Any] | None) -> Selector | None:
    if d is None:
        return None
    return Selector(match_labels=_tuples(d["match_labels"]),
                    match_expressions=tuple(Requirement(k, op, tuple(v)) for k, op, v in d["match_expressions"]))


_NO_AFFINITY: dict[str, Any] = {"required": [], "required_anti": [], "preferred": [], "preferred_anti": []}


def affinity_to(a: Affinity) -> dict[str, Any]:
    if a.empty:
        # Most Runs have no affinity: one shared value, only ever read by the encoder.
        return _NO_AFFINITY
    return {
        "required": [selector_to(t.selector) for t in a.required],
        "required_anti": [selector_to(t.selector) for t in a.required_anti],
        "preferred": [[w.weight, selector_to(w.term.selector)] for w in a.preferred],
        "preferred_anti": [[w.weight, selector_to(w.term.selector)] for w in a.preferred_anti],
    }


def affinity_from(d: dict[str, Any]) -> Affinity:
    return Affinity(
        required=tuple(Term(selector_from(s)) for s in d["required"]),
        required_anti=tuple(Term(selector_from(s)) for s in d["required_anti"]),
        preferred=tuple(WeightedTerm(w, Term(selector_from(s))) for w, s in d["preferred"]),
        preferred_anti=tuple(WeightedTerm(w, Term(selector_from(s))) for w, s in d["preferred_anti"]),
    )


def inventory_digest(text: str) -> str:
    """SPEC §7.1's `inventoryDigest`: SHA-256 of the `kruntimes.io/devices` text, the key a pod record carries."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def pod_to(p: PodInfo) -> dict[str, Any]:
    encoded = {"namespace": p.namespace, "name": p.name, "uid": p.uid, "runtime": p.runtime,
               "resource_version": p.resource_version, "ready": p.ready, "terminating": p.terminating,
               "heartbeat": _time(p.heartbeat), "capacity": _pairs(p.capacity),
               "capacity_problem": p.capacity_problem}
    if p.devices is not None:
        # SPEC §7.8: a pod record carries only the digest; the text is a `DeviceInventory` record of its
        # own, once per digest per epoch and in checkpoints. Absent for a pod without devices, so the
        # records of journals written before devices read (and hash) as they always did.
        encoded["devices_digest"] = inventory_digest(p.devices)
    return encoded


def pod_from(d: dict[str, Any], inventories: Mapping[str, str] | None = None) -> PodInfo:
    """The pod a record holds; `inventories` (digest → text) resolves its `devices_digest` (KeyError: unknown)."""
    digest = d.get("devices_digest")
    return PodInfo(namespace=d["namespace"], name=d["name"], uid=d["uid"], runtime=d["runtime"],
                   resource_version=d["resource_version"], ready=d["ready"], terminating=d["terminating"],
                   heartbeat=_parse_time(d["heartbeat"]), capacity=_tuples(d["capacity"]),
                   capacity_problem=d["capacity_problem"],
                   devices=None if digest is None else (inventories or {})[digest])


def run_to(r: RunInfo) -> dict[str, Any]:
    return {"namespace": r.namespace, "name": r.name, "uid": r.uid, "runtime": r.runtime,
            "resource_version": r.resource_version, "labels": _pairs(r.labels), "requests": _pairs(r.requests),
            "affinity": affinity_to(r.affinity), "workspace": r.workspace, "phase": r.phase,
            "pod_name": r.pod_name, "pod_uid": r.pod_uid, "released": r.released, "deleting": r.deleting,
            "created": r.created, "pending_message": r.pending_message, "problems": list(r.problems),
            **({"end_reason": r.end_reason, "end_message": r.end_message} if r.end_reason is not None else {}),
            # SPEC §7.8: the claim and the observed allocation, as the canonical JSON text the cache holds;
            # absent when None, so Runs without devices encode as before devices existed.
            **({"devices": r.devices} if r.devices is not None else {}),
            **({"device_results": r.device_results} if r.device_results is not None else {})}


def run_from(d: dict[str, Any]) -> RunInfo:
    return RunInfo(namespace=d["namespace"], name=d["name"], uid=d["uid"], runtime=d["runtime"],
                   resource_version=d["resource_version"], labels=_tuples(d["labels"]),
                   requests=_tuples(d["requests"]), affinity=affinity_from(d["affinity"]),
                   workspace=d["workspace"], phase=d["phase"], pod_name=d["pod_name"], pod_uid=d["pod_uid"],
                   released=d["released"], deleting=d["deleting"], created=d["created"],
                   pending_message=d["pending_message"], problems=tuple(d["problems"]),
                   # Journals written before a Run's end was projected have neither key.
                   end_reason=d.get("end_reason"), end_message=d.get("end_message"),
                   devices=d.get("devices"), device_results=d.get("device_results"))


def assumption_to(a: Assumption) -> dict[str, Any]:
    return {"namespace": a.namespace, "run_uid": a.run_uid, "run_name": a.run_name, "pod_name": a.pod_name,
            "pod_uid": a.pod_uid, "requests": _pairs(a.requests), "labels": _pairs(a.labels),
            "affinity": affinity_to(a.affinity), "workspace": a.workspace,
            **({"device_results": a.device_results} if a.device_results is not None else {})}


def assumption_from(d: dict[str, Any]) -> Assumption:
    return Assumption(namespace=d["namespace"], run_uid=d["run_uid"], run_name=d["run_name"],
                      pod_name=d["pod_name"], pod_uid=d["pod_uid"], requests=_tuples(d["requests"]),
                      labels=_tuples(d["labels"]), affinity=affinity_from(d["affinity"]),
                      workspace=d["workspace"], device_results=d.get("device_results"))
