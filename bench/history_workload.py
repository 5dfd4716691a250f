"""A busy cluster's journal records, generated: the workload of bench/history.py and bench/journal_append.py.

One namespace, 5 runtimes of 100 Runtime Pods each; Runs arrive about twice a second,
each with the records the scheduler writes for it (ADDED, cycles with 5 candidates and
their rejections, reserve, bind, Scheduled/Running/Succeeded, drop, DELETED); 15% wait
first (1-20 Pending cycles), 2% lose their first bind to a 409, 0.5% of binds are
ambiguous; pods renew their heartbeat every few minutes. Payloads have the shape of the
scheduler's (docs/journal.md, "Payloads by kind"). Only ``records`` is needed, so an
older kruntimes can be measured on the same records.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from kruntimes.journal import records

NS = "prod"
RUNTIMES = ("cpu", "gpu", "batch", "etl", "infer")
PODS_PER_RUNTIME = 100
START = datetime(2026, 11, 23, 0, 0, tzinfo=timezone.utc)
EPOCH = "bench" + "0" * 27
CONFIG_HASH = "c" * 64


def pod_name(runtime: str, i: int) -> str:
    return f"{runtime}-{i:04d}"


def _pod_payload(runtime: str, i: int, at: datetime, rv: int, event: str) -> dict[str, Any]:
    name = pod_name(runtime, i)
    obj = {"namespace": NS, "name": name, "uid": f"uid-{name}", "runtime": runtime, "resource_version": str(rv),
           "ready": True, "terminating": False, "heartbeat": at.isoformat(),
           "capacity": [["cpu", 16000], ["runs", 8]], "capacity_problem": None}
    return {"kind": "Pod", "event": event, "namespace": NS, "name": name, "uid": obj["uid"],
            "resource_version": str(rv), "object": obj}


def _run_payload(run: Run, event: str, phase: str, rv: int, pod: str | None, message: str | None) -> dict[str, Any]:
    obj = {"namespace": NS, "name": run.name, "uid": run.uid, "runtime": run.runtime, "resource_version": str(rv),
           "labels": [["app", run.runtime]], "requests": [["cpu", 2000], ["runs", 1]],
           "affinity": {"required": [], "required_anti": [], "preferred": [], "preferred_anti": []},
           "workspace": None, "phase": phase, "pod_name": pod, "pod_uid": f"uid-{pod}" if pod else None,
           "released": False, "deleting": event == "DELETED", "created": run.created, "pending_message": message,
           "problems": []}
    return {"kind": "Run", "event": event, "namespace": NS, "name": run.name, "uid": run.uid,
            "resource_version": str(rv), "object": obj}


PENDING_MESSAGE = "0/100 runtime pods available: 100 insufficient capacity"


def _cycle_payload(run: Run, at: datetime, snapshot: int, result: str, chosen: str | None,
                   rng: random.Random) -> dict[str, Any]:
    pending = chosen is None
    candidates = []
    if not pending:
        others = rng.sample(range(PODS_PER_RUNTIME), 5)
        pods = [chosen] + [pod_name(run.runtime, i) for i in others if pod_name(run.runtime, i) != chosen][:4]
        for rank, pod in enumerate(pods):
            load = 40 + rank * 5
            candidates.append({"pod": pod, "total": 300 - rank * 10,
                               "scores": [["LeastLoaded", [1, load, 1, load], 100 - rank * 5],
                                          ["PreferredRunAffinity", 0, 0]]})
    status = "unschedulable" if pending else "scheduled"
    return {
        "namespace": NS, "run": run.name, "run_uid": run.uid, "snapshot_lsn": snapshot, "now": at.isoformat(),
        "planner_version": "1", "config_hash": CONFIG_HASH, "status": status, "result": result,
        "chosen": chosen, "chosen_uid": f"uid-{chosen}" if chosen else None,
        "total": candidates[0]["total"] if candidates else None,
        "message": PENDING_MESSAGE if pending else None,
        "pods_evaluated": PODS_PER_RUNTIME, "pods_feasible": 0 if pending else PODS_PER_RUNTIME - 20,
        "rejections": [["RuntimePodAvailability", "insufficient capacity", PODS_PER_RUNTIME if pending else 20]],
        "candidates": candidates, "digest": f"{rng.getrandbits(256):064x}",
        "duration_us": rng.randint(200, 5000) if rng.random() > 0.001 else rng.randint(100_000, 900_000),
    }


@dataclass
class Run:
    name: str
    uid: str
    runtime: str
    created: str
    waits: int  # Pending cycles before it fits
    conflicted: bool
    step: str = "added"
    rv: int = 1
    pod: str | None = None


@dataclass(order=True)
class _Event:
    at: datetime
    seq: int
    run: Run | None = field(compare=False, default=None)
    pod: tuple[str, int] | None = field(compare=False, default=None)


def workload(n_records: int, seed: int = 15) -> Iterator[tuple[datetime, str, dict[str, Any]]]:
    """(recorded_at, kind, payload) of a busy cluster, in time order, until ``n_records``."""
    rng = random.Random(seed)
    queue: list[_Event] = []
    seq = 0

    def later(at: datetime, seconds: float, run: Run | None = None, pod: tuple[str, int] | None = None) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(queue, _Event(at + timedelta(seconds=seconds), seq, run, pod))

    yield START, "incarnation", {"instance": "bench", "version": "0.1.0", "planner_version": "1",
                                 "config": {"workers": 4}, "config_hash": CONFIG_HASH, "top_candidates": 5,
                                 "detail": "summary", "checkpoint_every": 0, "checkpoint_size_ratio": 0}
    made = 1
    for runtime in RUNTIMES:
        for i in range(PODS_PER_RUNTIME):
            yield START, "mutation", _pod_payload(runtime, i, START, 1, "ADDED")
            made += 1
            later(START, rng.uniform(60, 300), pod=(runtime, i))
    later(START, 0.5)  # the next arrival
    runs = 0
    pod_rv = 1
    while made < n_records:
        event = heapq.heappop(queue)
        at = event.at
        out: list[tuple[str, dict[str, Any]]] = []
        if event.pod is not None:
            pod_rv += 1
            out.append(("mutation", _pod_payload(*event.pod, at, pod_rv, "MODIFIED")))
            later(at, rng.uniform(120, 300), pod=event.pod)
        elif event.run is None:
            runs += 1
            runtime = rng.choice(RUNTIMES)
            name = f"{runtime}-job-{runs:08d}"
            waits = rng.randint(1, 20) if rng.random() < 0.15 else 0
            run = Run(name, f"uid-{name}", runtime, at.isoformat(), waits, rng.random() < 0.02)
            out.append(("mutation", _run_payload(run, "ADDED", "Pending", run.rv, None, None)))
            later(at, rng.expovariate(2.0))
            later(at, 0.01, run=run)
        else:
            out += _advance(event.run, at, made, rng, later)
        for kind, payload in out:
            yield at, kind, payload
            made += 1


def _advance(run: Run, at: datetime, lsn: int, rng: random.Random,
             later: Callable[..., None]) -> list[tuple[str, dict[str, Any]]]:
    """The records of a Run's next step, and when its step after that comes."""
    out: list[tuple[str, dict[str, Any]]] = []
    if run.step == "added":
        if run.waits:
            run.waits -= 1
            out.append(("cycle", _cycle_payload(run, at, lsn - 1, "unschedulable", None, rng)))
            if run.rv == 1:
                run.rv += 1
                out.append(("mutation", _run_payload(run, "MODIFIED", "Pending", run.rv, None, PENDING_MESSAGE)))
            later(at, rng.uniform(30, 180), run=run)
            return out
        pod = pod_name(run.runtime, rng.randrange(PODS_PER_RUNTIME))
        if run.conflicted:
            run.conflicted = False
            out.append(("reserve", {"assumption": {"namespace": NS, "run_uid": run.uid, "pod_name": pod,
                                                 "requests": [["cpu", 2000], ["runs", 1]]}}))
            out.append(("bind", {"namespace": NS, "run_uid": run.uid, "result": "conflict"}))
            out.append(("release", {"namespace": NS, "run_uid": run.uid, "why": "bind_conflict"}))
            out.append(("cycle", _cycle_payload(run, at, lsn - 1, "conflict", pod, rng)))
            later(at, rng.uniform(0.5, 5), run=run)
            return out
        run.pod = pod
        out.append(("reserve", {"assumption": {"namespace": NS, "run_uid": run.uid, "pod_name": pod,
                                                 "requests": [["cpu", 2000], ["runs", 1]]}}))
        ambiguous = rng.random() < 0.005
        out.append(("bind", {"namespace": NS, "run_uid": run.uid, "result": "unknown" if ambiguous else "ok",
                             **({"error": "ReadTimeout"} if ambiguous else {})}))
        out.append(("cycle", _cycle_payload(run, at, lsn - 1, "scheduled", pod, rng)))
        run.step = "scheduled"
        later(at, rng.uniform(0.05, 0.5), run=run)
    elif run.step == "scheduled":
        run.rv += 1
        out.append(("mutation", _run_payload(run, "MODIFIED", "Scheduled", run.rv, run.pod, None)))
        out.append(("drop", {"namespace": NS, "run_uid": run.uid, "why": "observed"}))
        run.step = "running"
        later(at, rng.uniform(1, 5), run=run)
    elif run.step == "running":
        run.rv += 1
        out.append(("mutation", _run_payload(run, "MODIFIED", "Running", run.rv, run.pod, None)))
        run.step = "succeeded"
        later(at, rng.expovariate(1 / 600), run=run)
    elif run.step == "succeeded":
        run.rv += 1
        out.append(("mutation", _run_payload(run, "MODIFIED", "Succeeded", run.rv, run.pod, None)))
        run.step = "deleted"
        later(at, rng.uniform(60, 600), run=run)
    else:
        run.rv += 1
        out.append(("mutation", _run_payload(run, "DELETED", "Succeeded", run.rv, run.pod, None)))
    return out


def journal_records(n: int, seed: int = 15) -> list[records.JournalRecord]:
    """The workload's first ``n`` records as JournalRecords, LSN 1 on."""
    return [records.JournalRecord(EPOCH, lsn, at, kind, payload)
            for lsn, (at, kind, payload) in enumerate(workload(n, seed), start=1)]
