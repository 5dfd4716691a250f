"""JournalRecorder: the cluster cache's Recorder that writes the journal.

The cache calls `record` under its lock at the moment a change happens; the
recorder assigns the next LSN there, turns the change into a JSON-exact payload
(projections via `codec`, cycle outcomes summarised) and pushes the record into
the writer's buffer, which never blocks on the database. It never reads anything
back: the journal is an audit log, not scheduler state.

A cycle record's size does not grow with the pod count: it carries rejection
counts, the top candidates and a digest of the full outcome; the `full` detail
setting adds every pod's verdict and scores for small clusters or an investigation.
Every `checkpoint_every` records it also writes the full projected cache state and
the assumed cache, so replay never has to start from the beginning.
"""

from __future__ import annotations

import socket
import uuid
from datetime import datetime, timezone
from typing import Any, Callable, Protocol

from kruntimes import __version__, canonical
from kruntimes.journal import codec
from kruntimes.journal.records import JournalRecord
from kruntimes.scheduler.config import PLANNER_VERSION, SchedulerConfig
from kruntimes.scheduler.outcome import CycleOutcome

DETAILS = ("summary", "full")
DEFAULT_TOP_CANDIDATES = 5
#: Records between checkpoints. Replaying one cycle costs restoring its checkpoint
#: plus ~13 us per record after it; at 5,000 the worst case stays under 200 ms on a
#: 1M-record journal (bench/replay.py), at ~240 bytes of checkpoint per record.
DEFAULT_CHECKPOINT_EVERY = 5_000


class Sink(Protocol):
    def append(self, record: JournalRecord) -> Any: ...


class StateSource(Protocol):
    def state(self) -> dict[str, Any]: ...


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def cycle_payload(data: dict[str, Any], detail: str) -> dict[str, Any]:
    o: CycleOutcome = data["outcome"]
    payload: dict[str, Any] = {
        "namespace": o.namespace, "run": o.run_name, "run_uid": o.run_uid,
        "snapshot_lsn": o.snapshot_lsn, "now": o.now.isoformat(),
        "planner_version": PLANNER_VERSION, "config_hash": o.config_digest,
        "status": o.status, "result": data["result"],
        "chosen": o.chosen, "chosen_uid": o.chosen_uid, "total": o.chosen_total, "message": o.message,
        "pods_evaluated": len(o.pods), "pods_feasible": len(o.feasible),
        "rejections": [[p, r, n] for p, r, n in o.rejection_counts()],
        "candidates": [{"pod": c.pod, "total": c.total,
                        "scores": [[plugin, list(raw) if isinstance(raw, tuple) else raw, norm]
                                   for plugin, raw, norm in c.scores]}
                       for c in o.top(data.get("top", DEFAULT_TOP_CANDIDATES))],
        "digest": o.digest(),
        "duration_us": int(data["duration"] * 1_000_000),
    }
    if detail == "full":
        payload["outcome"] = canonical.plain(o.encode())
    return payload


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    return dict(data)


def mutation_payload(data: dict[str, Any]) -> dict[str, Any]:
    obj = data["object"]
    encoded = codec.pod_to(obj) if data["kind"] == "Pod" else codec.run_to(obj)
    return {"kind": data["kind"], "event": data["event"], "namespace": obj.namespace, "name": obj.name,
            "uid": obj.uid, "resource_version": obj.resource_version, "object": encoded}


def checkpoint_payload(state: dict[str, Any]) -> dict[str, Any]:
    return {"pods": [codec.pod_to(p) for p in state["pods"]], "runs": [codec.run_to(r) for r in state["runs"]],
            "assumed": [codec.assumption_to(a) for a in state["assumed"]]}


_PAYLOADS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "mutation": mutation_payload,
    "reserve": lambda d: {"assumption": codec.assumption_to(d["assumption"])},
    "release": _plain,
    "drop": _plain,
    "bind": _plain,
    "leader": _plain,
}


class JournalRecorder:
    """Numbers every change and hands it to the writer. Called under the cache lock."""

    def __init__(self, sink: Sink, *, start_lsn: int, detail: str = "summary",
                 checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
                 clock: Callable[[], datetime] = utc_now, incarnation: str | None = None) -> None:
        if detail not in DETAILS:
            raise ValueError(f"journal detail must be one of {', '.join(DETAILS)}, not {detail!r}")
        if checkpoint_every < 1:
            raise ValueError("checkpoint_every must be >= 1")
        self.sink = sink
        self.lsn = start_lsn or 0  # an empty journal has no last LSN
        self.detail = detail
        self.checkpoint_every = checkpoint_every
        self.clock = clock
        self.incarnation = incarnation or uuid.uuid4().hex
        self.state_source: StateSource | None = None
        self.top_candidates = DEFAULT_TOP_CANDIDATES
        self._since_checkpoint = 0

    def start(self, config: SchedulerConfig, *, top_candidates: int, instance: str | None = None) -> int:
        """The incarnation record: who is scheduling, with which code and configuration."""
        self.top_candidates = top_candidates
        return self._append("incarnation", {
            "instance": instance or socket.gethostname(), "version": __version__,
            "planner_version": PLANNER_VERSION, "config": config.to_dict(), "config_hash": config.digest(),
            "top_candidates": top_candidates, "detail": self.detail, "checkpoint_every": self.checkpoint_every,
        })

    def record(self, kind: str, data: dict[str, Any]) -> int:
        if kind == "cycle":
            # One source for how many candidates a cycle records: the number the
            # incarnation record announces, which is what replay compares against.
            payload = cycle_payload({**data, "top": self.top_candidates}, self.detail)
        else:
            payload = _PAYLOADS[kind](data)
        self._since_checkpoint += 1
        return self._append(kind, payload)

    def settled(self) -> int | None:
        """Called by the cache, under its lock, once a whole change is applied.

        Checkpoints are taken only here - never in the middle of a change that has
        been recorded but not yet applied - so a checkpoint is always exactly the
        state after the record before it. Returns the checkpoint's LSN, if one was taken.
        """
        if self._since_checkpoint >= self.checkpoint_every and self.state_source is not None:
            return self.checkpoint()
        return None

    def checkpoint(self) -> int:
        """The full projected cache state and the assumed cache, as of this LSN."""
        assert self.state_source is not None, "attach the cluster cache first"
        self._since_checkpoint = 0
        return self._append("checkpoint", checkpoint_payload(self.state_source.state()))

    def _append(self, kind: str, payload: dict[str, Any]) -> int:
        self.lsn += 1
        self.sink.append(JournalRecord(incarnation=self.incarnation, lsn=self.lsn, recorded_at=self.clock(),
                                       kind=kind, payload=payload))
        return self.lsn
