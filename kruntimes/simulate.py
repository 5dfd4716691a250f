"""`kruntimes simulate`: "where would these Runs go?" without a cluster.

Reads Kubernetes YAML (Runtime Pods as v1 Pods, Runs as kruntimes.io/v1alpha1),
loads them into a cluster cache exactly as the informers would, then schedules
every Pending Run once, in creation order, through the same planner and the same
reserve/assume path as the live scheduler - each Run sees the assumptions of the
Runs before it. Nothing is bound and nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable

import yaml

from kruntimes.api import ingest, models
from kruntimes.scheduler import outcome as out
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.framework import Planner
from kruntimes.scheduler.projection import RunInfo


class InputError(ValueError):
    """A document that cannot be read; the message names the file and document."""


@dataclass(frozen=True)
class Placement:
    namespace: str
    name: str
    phase: str          # Scheduled, Pending or Failed
    pod: str | None
    reason: str | None

    def as_json(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "phase": self.phase,
                "pod": self.pod, "reason": self.reason}


def load_documents(sources: Iterable[tuple[str, str]]) -> list[tuple[str, dict[str, Any]]]:
    """(where, object) for every non-empty document of every (name, text) source."""
    documents = []
    for name, text in sources:
        try:
            loaded = list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" line {mark.line + 1}" if mark is not None else ""
            raise InputError(f"{name}{at}: not valid YAML ({getattr(exc, 'problem', None) or exc})") from exc
        for i, doc in enumerate(loaded, start=1):
            if doc is None:
                continue
            where = f"{name} document {i}"
            if not isinstance(doc, dict):
                raise InputError(f"{where}: expected a Kubernetes object (a mapping), got {type(doc).__name__}")
            documents.append((where, doc))
    return documents


def simulate(documents: list[tuple[str, dict[str, Any]]], now: datetime,
             config: SchedulerConfig | None = None) -> list[Placement]:
    config = config or SchedulerConfig()
    cache = ClusterCache(config)
    planner = Planner(config)
    runs: list[RunInfo] = []
    for where, doc in documents:
        kind, api_version = doc.get("kind"), doc.get("apiVersion")
        meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
        if (api_version, kind) not in (("v1", "Pod"), (models.API_VERSION, "Run")):
            raise InputError(f"{where}: unsupported object {api_version}/{kind}; "
                             f"expected v1/Pod or {models.API_VERSION}/Run")
        if not meta.get("name"):
            raise InputError(f"{where}: metadata.name is required")
        uid = meta.get("uid") or f"{meta.get('namespace') or 'default'}/{meta['name']}"
        doc = {**doc, "metadata": {**meta, "uid": uid}}
        if kind == "Pod":
            pod = ingest.pod_info(doc)
            if pod is None:
                raise InputError(f"{where}: pod {meta['name']} has no {models.RUNTIME_LABEL} label, "
                                 "so it is not a Runtime Pod")
            cache.upsert_pod(pod, now=now)
        else:
            run = ingest.run_info(doc)
            cache.upsert_run(run)
            runs.append(run)
    results: dict[tuple[str, str], Placement] = {}
    for run in sorted((r for r in runs if r.eligible), key=lambda r: (r.created, r.namespace, r.name)):
        with cache.lock:
            outcome = planner.plan(cache.snapshot(run, now))
        results[run.key] = _placement(cache, run, outcome)
    return [results.get(r.key) or Placement(r.namespace, r.name, r.phase, r.pod_name, None) for r in runs]


def _placement(cache: ClusterCache, run: RunInfo, outcome: out.CycleOutcome) -> Placement:
    if outcome.status == out.SCHEDULED and outcome.chosen is not None:
        if cache.reserve(run, outcome.chosen):
            return Placement(run.namespace, run.name, "Scheduled", outcome.chosen, None)
        return Placement(run.namespace, run.name, "Pending", None, "reservation conflict")
    if outcome.status == out.INVALID:
        return Placement(run.namespace, run.name, "Failed", None, outcome.message)
    return Placement(run.namespace, run.name, "Pending", None, outcome.message)


__all__ = ["InputError", "Placement", "load_documents", "simulate"]
