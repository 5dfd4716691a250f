"""The replay cache's recorder: every change the cache makes must be the journal's next record.

Replay does not copy records into a cache; it applies the *driving* ones
(mutations, reserves, releases) through the same `ClusterCache` methods the live
scheduler called, and lets the cache derive the rest exactly as it did live:
assumption drops (the hand-off rule) and the moments checkpoints were taken. This
recorder receives what the cache derives and holds it to the journal, record by
record - same LSN, same kind, same content - so a drop that was forged, lost or
reordered is found at its LSN instead of being applied twice or not at all.

The live recorder writes a checkpoint only when the cache reports a whole change
applied (`settled`); this recorder is told at exactly the same points, so comparing
the cache's state when a checkpoint's LSN comes up compares exactly what the live
recorder saw.
"""

from __future__ import annotations

from typing import Any, Callable

from kruntimes.journal import codec
from kruntimes.journal import payloads as journal_payloads
from replay import errors
from replay.source import Record


def describe(kind: str, data: dict[str, Any]) -> str:
    """A change as the cache reports it, in words (for error messages)."""
    if kind == "mutation":
        if data["kind"] in journal_payloads.DEVICE_KINDS:
            fields = data["fields"]
            return f"{data['kind']} {data['event']} {fields.get('name') or str(fields.get('digest'))[:12]}"
        obj = data["object"]
        return f"{data['kind']} {data['event']} {obj.namespace}/{obj.name}"
    if kind == "reserve":
        a = data["assumption"]
        return f"reserve of Run {a.namespace}/{a.run_name} on pod {a.pod_name}"
    return f"{kind} of the assumption of Run uid {data.get('run_uid')} ({data.get('why')})"


def _recorded(record: Record) -> str:
    p = record.payload
    if record.kind == "mutation":
        if p.get("kind") in journal_payloads.DEVICE_KINDS:
            return f"{p.get('kind')} {p.get('event')} {p.get('name') or str(p.get('digest'))[:12]}"
        return f"{p.get('kind')} {p.get('event')} {p.get('namespace')}/{p.get('name')}"
    if record.kind == "reserve":
        a = p.get("assumption") or {}
        return f"reserve of Run {a.get('namespace')}/{a.get('run_name')} on pod {a.get('pod_name')}"
    if record.kind in ("drop", "release"):
        return f"{record.kind} of the assumption of Run uid {p.get('run_uid')} ({p.get('why')})"
    return f"{record.kind} record"


class LockstepRecorder:
    """Numbers the replay cache's changes and checks each against the journal record at that LSN."""

    def __init__(self, lsn: int, on_checkpoint: Callable[[Record], None]) -> None:
        self.lsn = lsn
        self.expected: dict[int, Record] = {}
        self.on_checkpoint = on_checkpoint

    def expect(self, record: Record) -> None:
        self.expected[record.lsn] = record

    def record(self, kind: str, data: dict[str, Any]) -> int:
        lsn = self.lsn + 1
        found = self.expected.get(lsn)
        if found is None or found.kind != kind:
            there = "nothing it has read" if found is None else f"a {_recorded(found)}"
            raise errors.InconsistentHistory(
                lsn, f"applying the records before it makes the cache record a {describe(kind, data)} here, "
                     f"but the journal has {there} at this LSN")
        self._check(kind, data, found)
        del self.expected[lsn]
        self.lsn = lsn
        return self.lsn

    def settled(self) -> int | None:
        """The cache finished a whole change: the live recorder may have checkpointed here."""
        before = self.lsn
        self.settle()
        return self.lsn if self.lsn != before else None

    def advance(self, record: Record) -> None:
        """A record the cache does not make itself (cycle, bind, leader): take its number."""
        self.lsn = record.lsn
        self.settle()

    def settle(self) -> None:
        """Compare the checkpoints the live recorder wrote right after the current record."""
        while (found := self.expected.get(self.lsn + 1)) is not None and found.kind == "checkpoint":
            del self.expected[self.lsn + 1]
            self.on_checkpoint(found)
            self.lsn += 1

    @staticmethod
    def _check(kind: str, data: dict[str, Any], record: Record) -> None:
        p = record.payload
        if kind == "mutation" and data["kind"] in journal_payloads.DEVICE_KINDS:
            same = p == journal_payloads.mutation_payload(data)
        elif kind == "mutation":
            obj = data["object"]
            same = (p.get("kind"), p.get("event")) == (data["kind"], data["event"])
            if same and data["event"] == "DELETED":
                # A deletion records the cache's own projection: it must be the recorded one. (An
                # upsert records the object replay decoded from this very payload.)
                same = p.get("object") == (codec.pod_to(obj) if data["kind"] == "Pod" else codec.run_to(obj))
        elif kind == "reserve":
            same = p.get("assumption") == codec.assumption_to(data["assumption"])
        else:
            same = {k: p.get(k) for k in ("namespace", "run_uid", "why")} == {
                k: data.get(k) for k in ("namespace", "run_uid", "why")}
        if not same:
            raise errors.InconsistentHistory(
                record.lsn, f"the journal records a {_recorded(record)} here, but replaying the records before "
                            f"it produces a {describe(kind, data)} with other content")
