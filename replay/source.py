"""Reading the journal for replay: checked records, and the look-ups a replay starts from.

Every record replay uses passes three checks here, so that nothing downstream can
replay a damaged journal silently: its LSN follows the previous one (a gap is a
`RecordGap` naming the missing range), its schema version is one this code reads
(`UnsupportedSchema`), and its payload matches its SHA-256 (`CorruptRecord`).
Payloads are parsed lazily: a walk decodes only the kinds it applies, which is
most of what keeps replaying ten thousand records under a tenth of a second.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from kruntimes.journal.history import order
from kruntimes.journal.store import backends, schema
from kruntimes.journal import errors as journal_errors
from replay import errors, integrity

#: The record schema versions this replay reads. A journal written by a newer
#: scheduler may mean something else by the same fields: refuse, never guess.
SUPPORTED_SCHEMA_VERSIONS = frozenset({1})

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a declared dependency
    _orjson = None  # type: ignore[assignment]


def _loads(text: str) -> Any:
    if _orjson is not None:
        try:
            return _orjson.loads(text)
        except _orjson.JSONDecodeError:
            pass  # e.g. an integer beyond 64 bits: let the stdlib decide
    return json.loads(text)


class Record:
    """One checked journal record; `payload` is parsed on first use."""

    __slots__ = ("lsn", "incarnation", "kind", "schema_version", "text", "_payload")

    def __init__(self, lsn: int, incarnation: str, kind: str, schema_version: int, text: str, sha256: str) -> None:
        self.lsn = lsn
        self.incarnation = incarnation
        self.kind = kind
        self.schema_version = schema_version
        self.text = text
        self._payload: dict[str, Any] | None = None
        if schema_version not in SUPPORTED_SCHEMA_VERSIONS:
            raise errors.UnsupportedSchema(
                lsn, f"{kind} record has schema_version {schema_version}; this replay reads "
                     f"{', '.join(map(str, sorted(SUPPORTED_SCHEMA_VERSIONS)))} - replay it with the kruntimes "
                     "version that wrote it, or a newer one", epoch=incarnation)
        if hashlib.sha256(text.encode("utf-8")).hexdigest() != sha256:
            raise errors.CorruptRecord(lsn, f"the {kind} record's payload does not match its SHA-256 "
                                            "(edited or damaged after it was written)", epoch=incarnation)

    @property
    def payload(self) -> dict[str, Any]:
        if self._payload is None:
            try:
                value = _loads(self.text)
            except ValueError as exc:
                raise errors.CorruptRecord(self.lsn, f"the {self.kind} record's payload is not JSON: {exc}",
                                           epoch=self.incarnation) from exc
            if not isinstance(value, dict):
                raise errors.CorruptRecord(self.lsn, f"the {self.kind} record's payload is not a JSON object",
                                           epoch=self.incarnation)
            self._payload = value
        return self._payload

    def field(self, name: str) -> Any:
        """A payload field the record's kind must have; missing is damage, named."""
        try:
            return self.payload[name]
        except KeyError:
            raise errors.CorruptRecord(self.lsn, f"the {self.kind} record has no {name!r} field",
                                       epoch=self.incarnation) from None

    def __repr__(self) -> str:
        return f"Record(lsn={self.lsn}, kind={self.kind!r}, incarnation={self.incarnation!r})"


@dataclass(frozen=True)
class Selection:
    """Which cycles to replay: by (epoch, LSN), by LSN (of one incarnation), a Run's, or a time range.

    A record's identity is (epoch, LSN): LSNs overlap between epochs begun while the
    database was away, so ``lsns`` without ``incarnation`` may name several epochs'
    records; ``keys`` names each cycle whole.
    """

    lsns: tuple[int, ...] | None = None
    keys: tuple[tuple[str, int], ...] | None = None  # (epoch, LSN) of each cycle
    since: datetime | None = None  # decided at or after
    until: datetime | None = None  # decided before
    incarnation: str | None = None
    run: tuple[str, str] | None = None  # (namespace, name)


def _unavailable(journal: backends.Journal, exc: sa_exc.DBAPIError) -> journal_errors.JournalUnavailable:
    return journal_errors.JournalUnavailable(f"cannot read the journal ({journal.backend}): {exc.orig}")


def _rows(journal: backends.Journal, stmt: sa.Select[Any]) -> Iterator[Record]:
    """Stream checked records; close the generator (or exhaust it) to hand the connection back."""
    try:
        with journal.engine.connect() as conn:
            for row in conn.execution_options(yield_per=1000).execute(stmt):
                yield Record(*row)
    except sa_exc.DBAPIError as exc:
        raise _unavailable(journal, exc) from exc


def _first(journal: backends.Journal, stmt: sa.Select[Any]) -> Record | None:
    with contextlib.closing(_rows(journal, stmt.limit(1))) as rows:
        for row in rows:
            return row
    return None


def _scalar(journal: backends.Journal, stmt: sa.Select[Any]) -> Any:
    try:
        with journal.engine.connect() as conn:
            return conn.execute(stmt).scalar()
    except sa_exc.DBAPIError as exc:
        raise _unavailable(journal, exc) from exc


_T = schema.journal_records
# Not recorded_at: replay never needs it, and parsing it is a tenth of reading a record.
_COLUMNS = (_T.c.lsn, _T.c.incarnation, _T.c.kind, _T.c.schema_version, _T.c.payload, _T.c.payload_sha256)


def stream(journal: backends.Journal, after: int, until: int, incarnation: str) -> Iterator[Record]:
    """Records of `incarnation` (an epoch) with `after` < LSN <= `until`, checked, gap-free."""
    expected = after + 1
    stmt = (sa.select(*_COLUMNS).where(_T.c.incarnation == incarnation, _T.c.lsn > after, _T.c.lsn <= until)
            .order_by(_T.c.lsn))
    # closing(): a replay that stops at damage must hand its connection back at once, not
    # when the traceback is collected (PostgreSQL would hold the table lock until then).
    with contextlib.closing(_rows(journal, stmt)) as rows:
        for record in rows:
            if record.lsn != expected:
                raise errors.RecordGap(expected, record.lsn - 1, _gap(expected, record.lsn - 1))
            expected += 1
            yield record
    if expected <= until:
        raise errors.RecordGap(expected, until, _gap(expected, until))


def _gap(first: int, last: int) -> str:
    span = f"LSN {first}" if first == last else f"LSNs {first}..{last} ({last - first + 1} records)"
    return f"{span} not in the journal; the state after them cannot be rebuilt (deleted or never written?)"


def record_at(journal: backends.Journal, lsn: int, incarnation: str | None = None) -> Record | None:
    """The record at `lsn` (of `incarnation`, when given: LSNs are unique only within an epoch)."""
    stmt = sa.select(*_COLUMNS).where(_T.c.lsn == lsn)
    if incarnation is not None:
        stmt = stmt.where(_T.c.incarnation == incarnation)
    return _first(journal, stmt.order_by(_T.c.incarnation))


def records_at(journal: backends.Journal, lsn: int) -> list[Record]:
    """Every record at `lsn`, whatever its epoch."""
    with contextlib.closing(_rows(journal, sa.select(*_COLUMNS).where(_T.c.lsn == lsn).order_by(_T.c.incarnation))) \
            as rows:
        return list(rows)


def incarnation_record(journal: backends.Journal, incarnation: str) -> Record | None:
    return _first(journal, sa.select(*_COLUMNS).where(_T.c.incarnation == incarnation, _T.c.kind == "incarnation")
                  .order_by(_T.c.lsn))


def latest_checkpoint(journal: backends.Journal, incarnation: str, at_or_before: int) -> int | None:
    """The newest checkpoint of `incarnation` at or before LSN `at_or_before`."""
    stmt = sa.select(sa.func.max(_T.c.lsn)).where(_T.c.kind == "checkpoint", _T.c.lsn <= at_or_before,
                                                   _T.c.incarnation == incarnation)
    found = _scalar(journal, stmt)
    return None if found is None else int(found)


def last_cycle(journal: backends.Journal) -> tuple[str, int] | None:
    """(epoch, LSN) of the newest recorded cycle (`kruntimes replay cycle --last`), or None.

    Newest by the time it was recorded, then by epoch order: LSNs are comparable only within an epoch.
    """
    r = schema.journal_records
    try:
        with journal.engine.connect() as conn:
            newest = order.order(r.c.recorded_at, r.c.incarnation, r.c.lsn,
                                 [s.epoch for s in order.starts(conn)], newest_first=True)
            found = conn.execute(sa.select(r.c.incarnation, r.c.lsn).where(r.c.kind == "cycle")
                                 .order_by(*newest).limit(1)).first()
    except sa_exc.DBAPIError as exc:
        raise _unavailable(journal, exc) from exc
    return None if found is None else (str(found[0]), int(found[1]))


def _oldest_first(journal: backends.Journal) -> list[str]:
    """The epochs that have records, oldest first (``history.order``: by their first records' time)."""
    try:
        with journal.engine.connect() as conn:
            return [s.epoch for s in order.starts(conn)]
    except sa_exc.DBAPIError as exc:
        raise _unavailable(journal, exc) from exc


def resolve_incarnation(journal: backends.Journal, given: str) -> str:
    """An incarnation ID from the full ID or a unique prefix of it."""
    return integrity.resolve([i.incarnation for i in journal.incarnations()], given, "incarnation",
                             " (`kruntimes journal` lists them)")


def cycles(journal: backends.Journal, selection: Selection) -> Iterator[Record]:
    """The cycle records `selection` names, oldest epoch first, each epoch's in LSN order (checked, not yet
    compared)."""
    stmt = sa.select(*_COLUMNS).where(_T.c.kind == "cycle").order_by(
        order.rank(_T.c.incarnation, _oldest_first(journal)), _T.c.lsn)
    if selection.lsns is not None:
        stmt = stmt.where(_T.c.lsn.in_(sorted(set(selection.lsns))))
    if selection.keys is not None:
        stmt = stmt.where(sa.or_(sa.false(), *(sa.and_(_T.c.incarnation == epoch, _T.c.lsn == lsn)
                                               for epoch, lsn in sorted(set(selection.keys)))))
    if selection.since is not None:
        stmt = stmt.where(_T.c.recorded_at >= selection.since)
    if selection.until is not None:
        stmt = stmt.where(_T.c.recorded_at < selection.until)
    if selection.incarnation is not None:
        stmt = stmt.where(_T.c.incarnation == selection.incarnation)
    if selection.run is not None:
        # Canonical JSON has no whitespace: a cheap SQL prefilter, then the exact test.
        ns, name = selection.run
        stmt = stmt.where(_T.c.payload.contains(f'"run":{json.dumps(name)}', autoescape=True))
    with contextlib.closing(_rows(journal, stmt)) as rows:
        for record in rows:
            if selection.run is not None and (record.field("namespace"), record.field("run")) != selection.run:
                continue
            yield record




def lsns(journal: backends.Journal, low: int, high: int, incarnation: str) -> Iterator[tuple[int, str]]:
    """(LSN, kind) of the records of `incarnation` with `low` <= LSN <= `high`, in LSN order, payloads unread."""
    stmt = (sa.select(_T.c.lsn, _T.c.kind).where(_T.c.incarnation == incarnation, _T.c.lsn >= low, _T.c.lsn <= high)
            .order_by(_T.c.lsn))
    try:
        with journal.engine.connect() as conn:
            for lsn, kind in conn.execution_options(yield_per=10000).execute(stmt):
                yield int(lsn), str(kind)
    except sa_exc.DBAPIError as exc:
        raise _unavailable(journal, exc) from exc


def gap(first: int, last: int) -> errors.RecordGap:
    """The error for LSNs `first`..`last` missing."""
    return errors.RecordGap(first, last, _gap(first, last))
