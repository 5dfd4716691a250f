"""What each journal record says: the JSON payload built from a change's data.

The cache hands the recorder a change as Python values (projections, a
`CycleOutcome`, a few strings); this module turns them into the JSON-exact payload
of SPEC §5. It is kept apart from the recorder because the work can happen later
and elsewhere: the recorder numbers a change under the cache lock and may hand the
data over as a `DeferredRecord`, whose payload the journal writer builds on its own
thread or in its own process, off the scheduler's path. The data is immutable
(frozen projections and outcomes, dicts built for the record), so building it later
gives the same payload; replay builds the cycle and checkpoint payloads it compares
with these same functions.

A cycle payload's size does not grow with the pod count: rejection counts, the top
candidates and a digest of the full outcome; the `full` detail adds every pod.
"""

from __future__ import annotations

import logging
import operator
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, NamedTuple

from kruntimes import canonical
from kruntimes.journal import codec, errors, records
from kruntimes.journal.records import EncodedRecord, JournalRecord
from kruntimes.scheduler.outcome import CycleOutcome

log = logging.getLogger("kruntimes.journal.writer")  # its lines were always the writer's

DETAILS = ("summary", "full")
DEFAULT_TOP_CANDIDATES = 5
#: Kinds whose payload `build` assembles field by field from typed projections and
#: outcomes: JSON-exact by construction, so the writer need not walk them again.
#: The others pass the recorded dict through and are checked like any payload.
EXACT_KINDS = frozenset({"mutation", "cycle", "reserve", "checkpoint"})


class DeferredRecord(NamedTuple):
    """A numbered change whose payload is still to be built (`realize`)."""

    incarnation: str
    lsn: int
    recorded_at: datetime | int  # an aware datetime, or microseconds since the Unix epoch (UTC)
    kind: str
    data: Any  # what `build` takes for `kind`
    detail: str
    top: int


def cycle_payload(data: dict[str, Any], detail: str) -> dict[str, Any]:
    o: CycleOutcome = data["outcome"]
    payload: dict[str, Any] = {
        "namespace": o.namespace, "run": o.run_name, "run_uid": o.run_uid,
        "snapshot_lsn": o.snapshot_lsn, "now": o.now.isoformat(),
        "planner_version": o.planner_version, "config_hash": o.config_digest,
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
    if o.devices is not None:  # SPEC §7.8: the chosen results and the steps charged (a device claim only)
        payload["devices"] = {"steps": o.devices.steps, "chosen": o.devices.chosen}
    if detail == "full":
        payload["outcome"] = canonical.plain(o.encode())
    return payload


#: Mutations that are no pod or Run (SPEC §7.8): an inventory text once per digest, a RuntimeDeviceClass
#: change. Their data is already the payload's fields, JSON-exact (`device_journal` builds it).
DEVICE_KINDS = frozenset({"DeviceInventory", "DeviceClass"})


def mutation_payload(data: dict[str, Any]) -> dict[str, Any]:
    if data["kind"] in DEVICE_KINDS:
        return {"kind": data["kind"], "event": data["event"], **data["fields"]}
    obj = data["object"]
    encoded = codec.pod_to(obj) if data["kind"] == "Pod" else codec.run_to(obj)
    return {"kind": data["kind"], "event": data["event"], "namespace": obj.namespace, "name": obj.name,
            "uid": obj.uid, "resource_version": obj.resource_version, "object": encoded}


_BY_NAME = operator.attrgetter("namespace", "name")
_BY_RUN_UID = operator.attrgetter("namespace", "run_uid")


def checkpoint_payload(state: dict[str, Any]) -> dict[str, Any]:
    """The cache's objects in key order (``ClusterCache.state``'s), however the state lists them."""
    payload = {"pods": [codec.pod_to(p) for p in sorted(state["pods"], key=_BY_NAME)],
               "runs": [codec.run_to(r) for r in sorted(state["runs"], key=_BY_NAME)],
               "assumed": [codec.assumption_to(a) for a in sorted(state["assumed"], key=_BY_RUN_UID)]}
    # SPEC §7.8: the inventory texts the pods' digests name and the RuntimeDeviceClasses, only when
    # there are any, so a checkpoint without devices is the one journals always held.
    if state.get("inventories"):
        payload["inventories"] = [[digest, text] for digest, text in sorted(state["inventories"].items())]
    if state.get("classes"):
        payload["classes"] = [dict(c) for c in sorted(state["classes"], key=lambda c: c["name"])]
    return payload


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    return dict(data)


_BUILDERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "mutation": mutation_payload,
    "reserve": lambda d: {"assumption": codec.assumption_to(d["assumption"])},
    "checkpoint": checkpoint_payload,
    "release": _plain,
    "drop": _plain,
    "bind": _plain,
    "leader": _plain,
    "incarnation": _plain,
    "end": _plain,
}


def build(kind: str, data: Any, *, detail: str, top: int) -> dict[str, Any]:
    """The payload of a `kind` record for `data`; KeyError for a kind nothing builds."""
    if kind == "cycle":
        # One source for how many candidates a cycle records: the number the
        # incarnation record announces, which is what replay compares against.
        return cycle_payload({**data, "top": top}, detail)
    return _BUILDERS[kind](data)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def realize(record: DeferredRecord) -> JournalRecord:
    """The JournalRecord a deferred record stands for."""
    payload = build(record.kind, record.data, detail=record.detail, top=record.top)
    return JournalRecord(incarnation=record.incarnation, lsn=record.lsn, recorded_at=_instant(record.recorded_at),
                         kind=record.kind, payload=payload)


def encoded(record: DeferredRecord, *, max_payload_bytes: int) -> EncodedRecord:
    """``records.encode(realize(record))`` without the JournalRecord in between: what the writer stores.

    The payloads of `EXACT_KINDS` are not walked again (they are exact by
    construction); everything else about the record is checked as for any record.
    """
    return encoded_with_payload(record, max_payload_bytes=max_payload_bytes)[0]


def encoded_with_payload(record: DeferredRecord, *, max_payload_bytes: int) -> tuple[EncodedRecord, dict[str, Any]]:
    """``encoded`` and the payload dict it encoded (the history tables are derived from the dict)."""
    kind = record.kind
    if kind not in records.KINDS:
        raise errors.RecordRejected(f"kind {kind!r} is not one of {sorted(records.KINDS)}", lsn=record.lsn)
    payload = build(kind, record.data, detail=record.detail, top=record.top)
    row = records.encode_fields(record.incarnation, record.lsn, _instant(record.recorded_at), kind, payload,
                                max_payload_bytes=max_payload_bytes, exact=kind in EXACT_KINDS)
    return row, payload


def _instant(at: datetime | int) -> datetime:
    return _EPOCH + timedelta(microseconds=at) if type(at) is int else records.utc_instant(at)


def encode_batch(batch: list[Any], max_payload_bytes: int,
                 rejected: dict[str, int]) -> tuple[list[EncodedRecord], list[Any]]:
    """The journal writer's batch in its stored form (rejected records counted by reason and left
    out), with each record's payload dict (None for one that came encoded).

    The payload dicts go with the rows to the journal, which derives the history tables
    from them without parsing the JSON again.
    """
    rows: list[EncodedRecord] = []
    built: list[Any] = []
    first: Exception | None = None
    deferred, journal_record = DeferredRecord, JournalRecord
    for record in batch:
        try:
            if type(record) is deferred:
                row, payload = encoded_with_payload(record, max_payload_bytes=max_payload_bytes)
            elif type(record) is journal_record:
                row, payload = records.encode(record, max_payload_bytes=max_payload_bytes), record.payload
            else:
                row, payload = record, None
        except Exception as exc:  # an encoder or builder bug is still this record's problem only
            reason = exc.reason if isinstance(exc, errors.RecordRejected) else "malformed"
            rejected[reason] = rejected.get(reason, 0) + 1
            first = first or exc
            continue
        rows.append(row)
        built.append(payload)
    if first is not None:
        log.error("journal writer rejected %d record(s) of a batch of %d; first: %s",
                  len(batch) - len(rows), len(batch), first)
    return rows, built
