"""Journal records and their one canonical encoding.

A journal record is what the scheduler hands over: an LSN, a kind from a bounded set
and a JSON payload. Replay must read back *exactly* what was written, so a record is
stored as canonical JSON text (sorted keys, no whitespace, unicode kept) plus the
SHA-256 of that text, and the encoding refuses anything that would not survive the
round trip unchanged: floats (inexact), non-str keys (silently stringified by
``json``), tuples (come back as lists), enums and other subclasses.

``encode`` is the single validation point: the writer calls it on its own thread, so
``JournalWriter.append`` stays a cheap buffer push for the scheduler.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Final, NamedTuple

from kruntimes import canonical
from kruntimes.journal import errors

KINDS: Final[frozenset[str]] = frozenset(
    {
        "incarnation",
        "mutation",
        "cycle",
        "reserve",
        "release",
        "bind",
        "drop",
        "leader",
        "checkpoint",
        "end",
    }
)

DEFAULT_MAX_PAYLOAD_BYTES: Final = 4 * 1024 * 1024
MAX_CHECKPOINT_BYTES: Final = 512 * 1024 * 1024  # ~1M cached objects
MAX_LSN: Final = 2**63 - 1  # BIGINT on PostgreSQL, INTEGER on SQLite
MAX_IDENT_CHARS: Final = 64  # String(64) columns: incarnation, version, config_hash


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """One entry of the journal, as the scheduler produces it.

    ``incarnation`` is the record's epoch (one leadership term, SPEC §5); ``lsn`` is
    assigned by the producer under the lock of the change it describes, gap-free
    within the epoch, and a new epoch numbers on from the highest LSN its process
    knows (``JournalWriter.last_lsn()``). ``recorded_at`` is timezone-aware.
    ``payload`` holds only str, int, bool, None, list and dict with str keys.
    Records of kind ``incarnation`` carry ``version`` and ``config_hash`` (str) in
    their payload: they feed the ``journal_incarnations`` table.
    """

    incarnation: str
    lsn: int
    recorded_at: datetime
    kind: str
    payload: Mapping[str, Any]
    schema_version: int = 1


class EncodedRecord(NamedTuple):
    """A validated record in storage form; field order is the column order of inserts."""

    lsn: int
    incarnation: str
    recorded_at: datetime  # always tzinfo is timezone.utc
    kind: str
    schema_version: int
    payload: str  # canonical JSON text
    payload_sha256: str
    #: The record's link in its epoch's chain (``chain.link``); empty until the writer
    #: computes it, and filled from the stored head when the writer did not know it.
    chain_hash: str = ""


def canonical_json(obj: Any) -> str:
    """The canonical JSON text of ``obj``: sorted keys, no whitespace, unicode kept."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def content_hash(text: str) -> str:
    """SHA-256 hex digest of the UTF-8 bytes of ``text``."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_encode_payload = canonical.encode


def encode(record: JournalRecord, *, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
           exact: bool = False) -> EncodedRecord:
    """Validate ``record`` and return its storage form; raise ``RecordRejected`` if it cannot be stored.

    ``exact=True`` skips the walk that proves the payload JSON-exact (the costliest
    check): only for payloads built by ``payloads`` from typed projections, which are
    exact by construction (a test holds every kind to the same text either way).
    """
    if type(record) is not JournalRecord:
        raise errors.RecordRejected(f"expected a JournalRecord, got {type(record).__name__}")
    lsn = record.lsn
    version = record.schema_version
    if type(version) is not int or not 1 <= version < 2**31:
        raise errors.RecordRejected(f"schema_version must be a positive int, got {version!r}",
                                    lsn=lsn if type(lsn) is int else None)
    at = utc_instant(record.recorded_at, lsn)
    payload = record.payload
    if type(payload) is not dict:
        if not isinstance(payload, Mapping):
            raise errors.RecordRejected(f"payload must be a mapping, got {type(payload).__name__}",
                                        lsn=lsn if type(lsn) is int else None)
        payload = dict(payload)
    return encode_fields(record.incarnation, lsn, at, record.kind, payload, schema_version=version,
                         max_payload_bytes=max_payload_bytes, exact=exact)


def utc_instant(at: Any, lsn: Any = None) -> datetime:
    """``at`` as an aware UTC datetime; ``RecordRejected`` unless it is an aware datetime."""
    if not isinstance(at, datetime):
        raise errors.RecordRejected(f"recorded_at must be a datetime, got {type(at).__name__}",
                                    lsn=lsn if type(lsn) is int else None)
    if at.tzinfo is not timezone.utc:
        if at.tzinfo is None or at.utcoffset() is None:
            raise errors.RecordRejected("recorded_at must be timezone-aware (UTC)", lsn=lsn if type(lsn) is int else None)
        at = at.astimezone(timezone.utc)
    return at


def encode_fields(incarnation: str, lsn: int, recorded_at: datetime, kind: str, payload: dict[str, Any], *,
                  schema_version: int = 1, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
                  exact: bool = False) -> EncodedRecord:
    """``encode`` for a record given as its fields, without a JournalRecord to build and take apart.

    ``recorded_at`` must be aware UTC and ``payload`` a dict; the writer builds both
    itself for deferred records, the rest is checked here as in ``encode``.
    """
    if type(lsn) is not int or not 1 <= lsn <= MAX_LSN:
        raise errors.RecordRejected(f"lsn must be an int in [1, 2**63), got {lsn!r}")
    if kind not in KINDS:
        raise errors.RecordRejected(f"kind {kind!r} is not one of {sorted(KINDS)}", lsn=lsn)
    _check_ident("incarnation", incarnation, lsn)
    if not exact:
        _check_payload(payload, lsn)
    try:
        text, data = _encode_payload(payload)
    except (ValueError, TypeError, RecursionError) as exc:  # lone surrogates, huge ints, ...
        raise errors.RecordRejected(f"payload is not encodable as JSON: {exc}", lsn=lsn) from exc
    # A checkpoint is the whole projected cache by design: its size follows the
    # cluster, not any single input, so it gets its own, much larger bound.
    limit = max(max_payload_bytes, MAX_CHECKPOINT_BYTES) if kind == "checkpoint" else max_payload_bytes
    if len(data) > limit:
        raise errors.RecordRejected(
            f"payload is {len(data)} bytes of canonical JSON, the limit is {limit};"
            " record less (e.g. the top candidates only) or raise the limit",
            reason="oversized",
            lsn=lsn,
        )
    if kind == "incarnation":
        for key in ("version", "config_hash"):
            _check_ident(f"payload[{key!r}] of an incarnation record", payload.get(key), lsn)
    return EncodedRecord(lsn, incarnation, recorded_at, kind, schema_version, text, hashlib.sha256(data).hexdigest())


def encode_batch(
    batch: Sequence[Any],
    *,
    max_payload_bytes: int,
    rejected: dict[str, int],
    prepare: Callable[[Any], Any] | None = None,
) -> tuple[list[Any], Exception | None]:
    """``encode`` each JournalRecord of ``batch`` (after ``prepare``); anything else passes as it is.

    A record that cannot be stored becomes None in the result and is counted by reason
    in ``rejected``, so one bad record never costs its batch. Returns the results,
    aligned with ``batch``, and the first error for the log.
    """
    out: list[Any] = []
    first: Exception | None = None
    journal_record = JournalRecord
    for record in batch:
        try:
            if prepare is not None:
                record = prepare(record)
            if type(record) is journal_record:
                record = encode(record, max_payload_bytes=max_payload_bytes)
        except Exception as exc:  # an encoder or builder bug is still this record's problem only
            reason = exc.reason if isinstance(exc, errors.RecordRejected) else "malformed"
            rejected[reason] = rejected.get(reason, 0) + 1
            first = first or exc
            record = None
        out.append(record)
    return out, first


def decode(encoded: EncodedRecord, *, verify: bool = True) -> JournalRecord:
    """Turn a stored record back into a JournalRecord; ``CorruptRecord`` if its hash does not match."""
    if verify and content_hash(encoded.payload) != encoded.payload_sha256:
        raise errors.CorruptRecord(f"record lsn={encoded.lsn}: payload does not match its sha256")
    try:
        payload = json.loads(encoded.payload)
    except ValueError as exc:
        raise errors.CorruptRecord(f"record lsn={encoded.lsn}: payload is not JSON: {exc}") from exc
    return JournalRecord(
        incarnation=encoded.incarnation,
        lsn=encoded.lsn,
        recorded_at=encoded.recorded_at,
        kind=encoded.kind,
        payload=payload,
        schema_version=encoded.schema_version,
    )


def _check_ident(what: str, value: object, lsn: int) -> None:
    # Identifiers land in String(64) columns; PostgreSQL refuses NUL and over-long
    # values, and such a refusal must never surface as a failed batch.
    if type(value) is not str or not 0 < len(value) <= MAX_IDENT_CHARS or not value.isprintable():
        raise errors.RecordRejected(
            f"{what} must be a printable str of 1..{MAX_IDENT_CHARS} characters, got {value!r}", lsn=lsn
        )


def _check_payload(payload: dict[str, Any], lsn: int) -> None:
    """Fast type walk; on failure a second, slow walk names the offending path."""
    try:
        _walk(payload)
    except _NotExact:
        try:
            message = _find_bad(payload, "payload")
        except RecursionError:
            message = None
        message = message or "payload holds a value that is not JSON-exact"
        raise errors.RecordRejected(message, lsn=lsn) from None
    except RecursionError:
        # Also how a payload that contains itself ends.
        raise errors.RecordRejected("payload nests too deeply (or contains itself)", lsn=lsn) from None


class _NotExact(Exception):
    pass


_LEAF_TYPES: Final = frozenset({str, int, bool, type(None)})


def _walk(node: Any) -> None:
    # Exact type checks on purpose: bool, IntEnum and str subclasses would encode,
    # but decode as something else. Measured: ~7 us for a 1 KB cycle payload, about
    # 60% of the JSON encoding itself; a set lookup beats a chain of `is` tests.
    if type(node) is dict:
        for key in node:
            if type(key) is not str:
                raise _NotExact
        values: Any = node.values()
    else:
        values = node
    for value in values:
        t = type(value)
        if t in _LEAF_TYPES:
            continue
        if t is dict or t is list:
            _walk(value)
            continue
        raise _NotExact


def _find_bad(node: Any, path: str) -> str | None:
    t = type(node)
    if t is dict:
        for key, value in node.items():
            if type(key) is not str:
                return f"{path} has key {key!r} of type {type(key).__name__}; keys must be str"
            found = _find_bad(value, f"{path}[{key!r}]")
            if found:
                return found
        return None
    if t is list:
        for i, value in enumerate(node):
            found = _find_bad(value, f"{path}[{i}]")
            if found:
                return found
        return None
    if t is str or t is int or t is bool or node is None:
        return None
    if t is float:
        return (
            f"{path} is the float {node!r}; floats are not exact -- use an int"
            " (e.g. milli-units) or a string such as a Fraction 'p/q'"
        )
    if t is tuple:
        return f"{path} is a tuple; use a list (a tuple would come back as a list)"
    return f"{path} has type {t.__name__}; allowed: str, int, bool, None, list, dict"
