"""Rebuilding the cluster cache from the journal: the state a cycle saw, at its snapshot LSN.

A `Rebuilder` owns one fresh `ClusterCache`, configured with the incarnation's
recorded configuration and a `LockstepRecorder`. It starts either from an
incarnation's first record (an empty cache, as every incarnation's cache starts)
or from a checkpoint (`ClusterCache.restore`), then `walk` applies every later
record in LSN order through the same cache methods the live scheduler called:

- mutations: `upsert_pod`/`delete_pod`/`upsert_run`/`delete_run`;
- reserve: re-reserve the recorded assumption - it must fit, as it did live;
- release: `release`;
- drops and checkpoints: never applied; the cache derives them and the recorder
  checks them against the journal;
- cycle, bind, leader, end: they change nothing; the cache only takes their LSN.

`walk` yields at every point where a live snapshot could have been taken (after
each whole change), with `lsn` the state's position: that is where a cycle whose
snapshot LSN equals `lsn` is planned.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kruntimes.journal import codec
from kruntimes.journal import payloads as journal_payloads
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import ConfigError, SchedulerConfig
from kruntimes.scheduler.projection import RunInfo
from replay import errors
from replay.lockstep import LockstepRecorder
from replay.source import Record

#: Records the cache derives while applying another one; they are checked, not applied.
DERIVED = frozenset({"drop", "checkpoint"})
#: Records that change nothing in the cache; it only takes their LSN. (`end` closes an epoch.)
INERT = frozenset({"cycle", "bind", "leader", "end"})


class Incarnation:
    """What an incarnation record says about every cycle after it: configuration and recording detail."""

    def __init__(self, record: Record) -> None:
        if record.kind != "incarnation":
            raise errors.InconsistentHistory(record.lsn, f"expected an incarnation record, found a {record.kind}")
        self.id = record.incarnation
        self.lsn = record.lsn
        self.record = record
        self.planners: dict[str, Any] = {}  # configuration digest -> Planner, filled by `reproduce`
        payload = record.payload
        try:
            self.config = SchedulerConfig.from_dict(payload["config"])
            self.top_candidates = int(payload["top_candidates"])
            self.detail = str(payload.get("detail", "summary"))
            self.planner_version = str(payload.get("planner_version", ""))
            # SPEC §7.8: the CEL engine and step budgets the device cycles ran with (absent: written before).
            self.device_config = payload.get("devices")
            recorded_hash = payload["config_hash"]
        except (KeyError, TypeError, ValueError, ConfigError) as exc:
            raise errors.CorruptRecord(record.lsn, f"the incarnation's configuration cannot be read: {exc!r}") from exc
        if self.config.digest() != recorded_hash:
            raise errors.CorruptRecord(
                record.lsn, f"the recorded configuration hashes to {self.config.digest()[:12]}, the record says "
                            f"{str(recorded_hash)[:12]}: configuration and hash do not belong together")


def state_of(record: Record) -> dict[str, Any]:
    """A checkpoint's payload as projections."""
    try:
        inventories = {str(digest): str(text) for digest, text in record.payload.get("inventories", [])}
        for digest, text in inventories.items():
            if codec.inventory_digest(text) != digest:
                raise ValueError(f"the inventory text under digest {digest[:12]} hashes otherwise")
        return {"pods": [codec.pod_from(d, inventories) for d in record.field("pods")],
                "runs": [codec.run_from(d) for d in record.field("runs")],
                "assumed": [codec.assumption_from(d) for d in record.field("assumed")],
                "inventories": inventories,
                "classes": [{"name": c["name"], "generation": c["generation"], "spec": c["spec"]}
                            for c in record.payload.get("classes", [])]}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise errors.CorruptRecord(record.lsn, f"the checkpoint's state cannot be decoded: {exc!r}") from exc


class Rebuilder:
    """One incarnation's cache, rebuilt record by record."""

    def __init__(self, incarnation: Incarnation) -> None:
        self.incarnation = incarnation
        self.recorder = LockstepRecorder(incarnation.lsn, self._compare_checkpoint)
        self.cache = ClusterCache(incarnation.config, self.recorder)
        self.cache.lsn = incarnation.lsn
        self.checkpoints_compared = 0
        self.warnings: list[str] = []

    @property
    def lsn(self) -> int:
        """The position of the rebuilt state: every record up to here is applied."""
        return self.recorder.lsn

    # -- starting points -----------------------------------------------------------------
    def restore(self, checkpoint: Record) -> None:
        """Start from `checkpoint`: the live recorder takes one only between whole
        changes, so it is exactly the state after the record before it."""
        self.cache.restore(state_of(checkpoint), checkpoint.lsn)
        self.recorder.lsn = checkpoint.lsn

    # -- the walk ------------------------------------------------------------------------
    def walk(self, records: Iterator[Record]) -> Iterator[tuple[int, Record | None]]:
        """Apply `records` in order; yield the state's LSN at every point a snapshot could be taken.

        With it comes the record just applied (None for the starting point), so a
        caller sees every cycle record as the walk passes it.
        """
        pending = _Peekable(records)
        recorder = self.recorder
        self._register_derived(pending)
        self._check_behind(recorder.lsn + 1)
        self.cache.lsn = recorder.lsn
        yield recorder.lsn, None
        for record in pending:
            kind = record.kind
            if kind in DERIVED:
                recorder.expect(record)  # only at the very start; later ones are registered in advance
                continue
            if kind in INERT:
                self._check_behind(record.lsn)
                self._register_derived(pending)
                recorder.advance(record)
                self.cache.lsn = recorder.lsn
                yield recorder.lsn, record
                continue
            if kind == "incarnation":
                raise errors.InconsistentHistory(record.lsn, "a second incarnation record inside one incarnation")
            recorder.expect(record)
            self._register_derived(pending)
            if kind == "mutation":
                self._mutate(record)
            elif kind == "reserve":
                self._reserve(record)
            elif kind == "release":
                self._release(record)
            else:
                raise errors.CorruptRecord(record.lsn, f"unknown record kind {kind!r}")
            if recorder.lsn < record.lsn:
                raise errors.InconsistentHistory(
                    record.lsn, f"applying this {kind} record changed nothing in the rebuilt state")
            self._check_behind(record.lsn)
            yield recorder.lsn, record

    def _register_derived(self, pending: _Peekable) -> None:
        while (following := pending.peek()) is not None and following.kind in DERIVED:
            self.recorder.expect(next(pending))

    def _check_behind(self, lsn: int) -> None:
        """Every derived record before `lsn` must have been produced by now."""
        expected = self.recorder.expected
        if expected and min(expected) < lsn:  # usually empty; at most a few entries
            first = expected[min(expected)]
            raise errors.InconsistentHistory(
                first.lsn, f"the journal has a {first.kind} record here that applying the records around it "
                           "does not produce (forged, or a record it follows from is missing)")

    # -- applying driving records --------------------------------------------------------------
    def _mutate(self, record: Record) -> None:
        p = record.payload
        try:
            kind, event = p["kind"], p["event"]
            if kind in journal_payloads.DEVICE_KINDS:
                return self._mutate_devices(record, kind, event, p)
            obj = p["object"]
            if kind == "Pod":
                if event == "DELETED":
                    self._require(self.cache.pod((obj["namespace"], obj["name"])) is not None, record,
                                  f"deletes pod {obj['namespace']}/{obj['name']}, which the rebuilt state does not hold")
                    self.cache.delete_pod(obj["namespace"], obj["name"])
                else:
                    digest = obj.get("devices_digest")
                    self._require(digest is None or digest in self.cache.device_journal.recorded, record,
                                  f"pod {obj['namespace']}/{obj['name']} names device inventory {str(digest)[:12]}, "
                                  "which no DeviceInventory record or checkpoint of this epoch before it holds")
                    self.cache.upsert_pod(codec.pod_from(obj, self.cache.device_journal.recorded), event=event)
            elif kind == "Run":
                if event == "DELETED":
                    self._require(self.cache.run((obj["namespace"], obj["name"])) is not None, record,
                                  f"deletes Run {obj['namespace']}/{obj['name']}, which the rebuilt state does not hold")
                    self.cache.delete_run(obj["namespace"], obj["name"])
                else:
                    self.cache.upsert_run(codec.run_from(obj), event=event)
            else:
                raise errors.CorruptRecord(record.lsn, f"mutation of unknown object kind {kind!r}")
        except (KeyError, TypeError, AttributeError) as exc:
            raise errors.CorruptRecord(record.lsn, f"the mutation cannot be decoded: {exc!r}") from exc

    def _mutate_devices(self, record: Record, kind: str, event: str, p: dict[str, Any]) -> None:
        """A DeviceInventory text or a RuntimeDeviceClass change (SPEC §7.8), through the cache as live."""
        if kind == "DeviceInventory":
            text = p["text"]
            if type(text) is not str or codec.inventory_digest(text) != p["digest"]:
                raise errors.CorruptRecord(record.lsn, "the DeviceInventory text does not hash to its digest")
            self._require(self.cache.note_inventory(text), record,
                          f"records device inventory {str(p['digest'])[:12]} again in the same epoch")
        elif event == "DELETED":
            self._require(self.cache.delete_device_class(p["name"]), record,
                          f"deletes RuntimeDeviceClass {p['name']}, which the rebuilt state does not hold")
        else:
            self._require(self.cache.upsert_device_class(p["name"], p["generation"], p["spec"]), record,
                          f"changes RuntimeDeviceClass {p['name']} to what the rebuilt state already holds")

    def _require(self, condition: bool, record: Record, message: str) -> None:
        if not condition:
            raise errors.InconsistentHistory(record.lsn, message)

    def _reserve(self, record: Record) -> None:
        try:
            a = codec.assumption_from(record.field("assumption"))
        except (KeyError, TypeError, AttributeError) as exc:
            raise errors.CorruptRecord(record.lsn, f"the assumption cannot be decoded: {exc!r}") from exc
        run = self.cache.run((a.namespace, a.run_name))
        if run is None or run.uid != a.run_uid or \
                self.cache.reserve_waking(run, a.pod_name, a.pod_uid, a.device_results) is None:
            why = _why_not(self.cache, run, a) or "the cache refuses it"
            raise errors.InconsistentHistory(
                record.lsn, f"reserving Run {a.namespace}/{a.run_name} on pod {a.pod_name} cannot succeed on the "
                            f"state the records before it build: {why}")

    def _release(self, record: Record) -> None:
        ns, uid = record.field("namespace"), record.field("run_uid")
        if self.cache.assumed.get((ns, uid)) is None:
            raise errors.InconsistentHistory(
                record.lsn, f"releases the assumption of Run uid {uid} in {ns}, which the rebuilt state does not hold")
        self.cache.release(ns, uid, record.field("why"))

    # -- checkpoints ---------------------------------------------------------------------------
    def _compare_checkpoint(self, record: Record) -> None:
        # `checkpoint_state`, as the live recorder took it: inventories are recorded anew after it (§7.8).
        rebuilt = journal_payloads.checkpoint_payload(self.cache.checkpoint_state())
        recorded = record.payload
        if rebuilt != recorded:
            raise errors.CheckpointMismatch(record.lsn, state_differences(recorded, rebuilt))
        self.checkpoints_compared += 1


def _why_not(cache: ClusterCache, run: RunInfo | None, a: Any) -> str | None:
    """Why reserving the recorded assumption would fail, in words; None when it should succeed."""
    if run is None or run.uid != a.run_uid:
        return "the Run (with that uid) is not there"
    if not run.eligible:
        return f"the Run is {run.phase}{' and being deleted' if run.deleting else ''}, not Pending"
    if (a.namespace, a.run_uid) in cache.assumed:
        return "the Run is already assumed"
    view = cache.pod_view(a.namespace, a.pod_name)
    if view is None:
        return "the pod is not there"
    if view.info.uid != a.pod_uid:
        return f"the pod of that name is uid {view.info.uid}, the assumption names uid {a.pod_uid}"
    short = [f"{r} needs {q}, {view.free.get(r, 0)} free" for r, q in run.requests if view.free.get(r, -1) < q]
    if not short and run.devices is not None:
        return "its devices do not pass Reserve's re-check on that pod (SPEC §7.6)"
    return "; ".join(short) if short else None


_IDENTITY = {"pods": ("namespace", "name"), "runs": ("namespace", "name"), "assumed": ("namespace", "run_uid")}
_NOUN = {"pods": "pod", "runs": "Run", "assumed": "assumption of Run uid"}


def state_differences(recorded: dict[str, Any], rebuilt: dict[str, Any]) -> list[str]:
    """Object by object, field by field: how a checkpoint differs from the rebuilt state."""
    found: list[str] = []
    for part, key_fields in _IDENTITY.items():
        left = {tuple(o.get(k) for k in key_fields): o for o in recorded.get(part) or [] if isinstance(o, dict)}
        right = {tuple(o.get(k) for k in key_fields): o for o in rebuilt.get(part) or []}
        for key in sorted(set(left) | set(right), key=str):
            name = f"{_NOUN[part]} {'/'.join(map(str, key))}"
            if key not in right:
                found.append(f"{name} is in the checkpoint but not in the rebuilt state")
            elif key not in left:
                found.append(f"{name} is in the rebuilt state but not in the checkpoint")
            elif left[key] != right[key]:
                fields = sorted(f for f in set(left[key]) | set(right[key]) if left[key].get(f) != right[key].get(f))
                found.extend(f"{name}: {f} is {left[key].get(f)!r} in the checkpoint, "
                             f"{right[key].get(f)!r} rebuilt" for f in fields)
    extra = sorted(set(recorded) - set(_IDENTITY))
    if extra:
        found.append(f"the checkpoint has unknown parts {extra}")
    return found or ["the checkpoint's encoding differs (ordering or duplicates)"]


class _Peekable:
    def __init__(self, it: Iterator[Record]) -> None:
        self._it = it
        self._next: Record | None = None

    def __iter__(self) -> _Peekable:
        return self

    def __next__(self) -> Record:
        if self._next is not None:
            found, self._next = self._next, None
            return found
        return next(self._it)

    def peek(self) -> Record | None:
        if self._next is None:
            self._next = next(self._it, None)
        return self._next
