"""The local spool: an append-only file records spill to while the database is away.

Layout: an 8-byte magic, then frames ``[u32 length][u32 crc32(body)][body]`` (big
endian); a body is one encoded record with its chain link (format 2, ``KRJSPL02``;
format 1, ``KRJSPL01``, had no link: such a spool still opens and drains, its links
are computed at drain time from the stored head). A process killed mid-write leaves
a torn tail (a short frame or a CRC mismatch): ``Spool.open`` detects it, logs the
offset and truncates it, so garbage is never replayed. Every ``append`` is one
write + fsync.

A spool may hold records of several epochs (a term that ended while the database was
away, then the next one); ``heads`` is each one's newest spooled record, so a writer
restarting on the spool knows where every epoch in it stopped.

Records only ever leave the spool all at once (``clear``) after the writer drained
them into the database; a crash between the drain and the clear replays records
already stored, which the drain's ``skip_existing`` insert turns into no-ops. The
same file format holds the quarantine (``quarantine``): records a drain refused to
store, kept for a person to look at.
"""

from __future__ import annotations

import io
import logging
import os
import struct
import time
import zlib
from collections.abc import Iterator, Sequence
from typing import NamedTuple
from datetime import datetime, timedelta, timezone
from pathlib import Path

from kruntimes.journal import errors, records

log = logging.getLogger("kruntimes.journal.spool")  # the name operators' log configuration knows

MAGIC = b"KRJSPL02"
MAGIC_V1 = b"KRJSPL01"
_FRAME = struct.Struct(">II")  # body length, crc32(body)
# lsn, schema_version, recorded_at (microseconds since the epoch), then the byte
# lengths of incarnation, kind, sha256, chain_hash (format 2 only) and payload.
_HEAD = struct.Struct(">qiqHHHHI")
_HEAD_V1 = struct.Struct(">qiqHHHI")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MAX_FRAME_BYTES = 1 << 30  # a length above this can only be a torn or foreign header


def _to_body(r: records.EncodedRecord, version: int = 2) -> bytes:
    incarnation, kind, sha = r.incarnation.encode(), r.kind.encode(), r.payload_sha256.encode()
    payload = r.payload.encode()
    micros = (r.recorded_at - _EPOCH) // timedelta(microseconds=1)
    if version == 1:
        head = _HEAD_V1.pack(r.lsn, r.schema_version, micros, len(incarnation), len(kind), len(sha), len(payload))
        return b"".join((head, incarnation, kind, sha, payload))
    link = r.chain_hash.encode()
    head = _HEAD.pack(r.lsn, r.schema_version, micros, len(incarnation), len(kind), len(sha), len(link), len(payload))
    return b"".join((head, incarnation, kind, sha, link, payload))


def _from_body(body: bytes, version: int = 2) -> records.EncodedRecord:
    if version == 1:
        lsn, schema_version, micros, n_inc, n_kind, n_sha, n_payload = _HEAD_V1.unpack_from(body)
        n_link, at = 0, _HEAD_V1.size
    else:
        lsn, schema_version, micros, n_inc, n_kind, n_sha, n_link, n_payload = _HEAD.unpack_from(body)
        at = _HEAD.size
    incarnation = body[at : at + n_inc].decode()
    at += n_inc
    kind = body[at : at + n_kind].decode()
    at += n_kind
    sha = body[at : at + n_sha].decode()
    at += n_sha
    link = body[at : at + n_link].decode()
    at += n_link
    payload = body[at : at + n_payload].decode()
    if at + n_payload != len(body):
        raise struct.error("body length does not match its fields")
    recorded_at = _EPOCH + timedelta(microseconds=micros)
    return records.EncodedRecord(lsn, incarnation, recorded_at, kind, schema_version, payload, sha, link)


class Head(NamedTuple):
    """The newest spooled record of one epoch."""

    lsn: int
    chain_hash: str  # empty in a format 1 spool
    kind: str


class Spool:
    """An open spool file; one writer process at a time (enforced with flock)."""

    def __init__(self, path: Path, file: io.FileIO, end: int, count: int, heads: dict[str, Head],
                 version: int = 2) -> None:
        self.path = path
        self._file = file
        self._end = end
        self._count = count
        self.heads = heads
        self.version = version
        self._last_lsn = max((h.lsn for h in heads.values()), default=None)

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, wait: float = 0.0) -> Spool:
        """Open (or create) the spool at ``path``, truncating a torn tail.

        Another writer holding the spool is an error at once, or after ``wait``
        seconds (a killed scheduler's writer process may still be storing its last records).
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        # 0600: the spool holds every record the database has not taken yet (Run and pod
        # names, arguments); only the writer's user reads it. An existing file keeps its mode.
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        file = os.fdopen(descriptor, "a+b", buffering=0)  # noqa: SIM115 - kept open for the writer's lifetime
        try:
            _lock(file, path, wait)
            size = os.fstat(file.fileno()).st_size
            if size == 0:
                file.write(MAGIC)
                os.fsync(file.fileno())
                return cls(path, file, len(MAGIC), 0, {})
            with open(path, "rb") as reader:
                magic = reader.read(len(MAGIC))
                version = {MAGIC: 2, MAGIC_V1: 1}.get(magic)
                if version is None:
                    raise errors.JournalError(
                        f"{path} is not a kruntimes journal spool (bad magic); move it away or point the writer"
                        " elsewhere"
                    )
                end, count, heads = _scan(reader, version)
            if end < size:
                log.error(
                    "journal spool %s: torn tail at offset %d (%d bytes, %d intact records before it);"
                    " truncating it -- the records in it were never acknowledged as durable",
                    path,
                    end,
                    size - end,
                    count,
                )
                file.truncate(end)
                os.fsync(file.fileno())
            if count == 0 and version != 2:  # nothing to keep: start the current format
                file.truncate(0)
                file.write(MAGIC)
                os.fsync(file.fileno())
                version, end = 2, len(MAGIC)
            return cls(path, file, end, count, heads, version)
        except BaseException:
            file.close()
            raise

    def __len__(self) -> int:
        return self._count

    @property
    def last_lsn(self) -> int | None:
        """The highest LSN spooled (of any epoch), or None when the spool is empty."""
        return self._last_lsn

    @property
    def end(self) -> int:
        return self._end

    def append(self, batch: Sequence[records.EncodedRecord]) -> None:
        """Write ``batch`` and fsync; on failure cut the file back and raise ``SpoolUnwritable``."""
        if not batch:
            return
        parts = []
        version = self.version
        for r in batch:
            body = _to_body(r, version)
            parts.append(_FRAME.pack(len(body), zlib.crc32(body)))
            parts.append(body)
        data = b"".join(parts)
        try:
            written = self._file.write(data)
            if written != len(data):
                raise OSError(f"short write ({written} of {len(data)} bytes)")
            os.fsync(self._file.fileno())
        except OSError as exc:
            try:  # leave no half-written frames behind for the next append
                self._file.truncate(self._end)
            except OSError:
                pass  # Spool.open cuts a torn tail anyway
            raise errors.SpoolUnwritable(f"cannot write the journal spool {self.path}: {exc}") from exc
        self._end += len(data)
        self._count += len(batch)
        heads = self.heads
        for r in batch:
            heads[r.incarnation] = Head(r.lsn, r.chain_hash if version == 2 else "", r.kind)
            if self._last_lsn is None or r.lsn > self._last_lsn:
                self._last_lsn = r.lsn

    def read(self, offset: int, max_records: int) -> tuple[list[records.EncodedRecord], int]:
        """Up to ``max_records`` records from ``offset`` (0 = the first), and the offset after them."""
        offset = max(offset, len(MAGIC))
        out: list[records.EncodedRecord] = []
        with open(self.path, "rb") as reader:
            reader.seek(offset)
            while len(out) < max_records and offset < self._end:
                length, crc = _FRAME.unpack(reader.read(_FRAME.size))
                body = reader.read(length)
                if zlib.crc32(body) != crc:  # only if the file changed under us
                    raise errors.JournalError(f"journal spool {self.path}: bad CRC at offset {offset}")
                out.append(_from_body(body, self.version))
                offset += _FRAME.size + length
        return out, offset

    def records(self) -> Iterator[records.EncodedRecord]:
        offset = 0
        while True:
            batch, offset = self.read(offset, 1000)
            if not batch:
                return
            yield from batch

    def clear(self) -> None:
        """Drop every record (they are in the database now); an emptied format 1 spool becomes format 2."""
        if self.version == 2:
            self._file.truncate(len(MAGIC))
        else:
            self._file.truncate(0)
            self._file.write(MAGIC)
            self.version = 2
        os.fsync(self._file.fileno())
        self._end, self._count, self._last_lsn = len(MAGIC), 0, None
        self.heads = {}

    def close(self) -> None:
        self._file.close()  # also releases the flock


def _scan(reader: io.BufferedReader, version: int) -> tuple[int, int, dict[str, Head]]:
    """Read frames from after the magic: the offset after the last intact one, their count, each epoch's head."""
    offset, count, heads = len(MAGIC), 0, {}
    while True:
        header = reader.read(_FRAME.size)
        if len(header) < _FRAME.size:
            break
        length, crc = _FRAME.unpack(header)
        if length > MAX_FRAME_BYTES:
            break
        body = reader.read(length)
        if len(body) < length or zlib.crc32(body) != crc:
            break
        try:
            r = _from_body(body, version)
        except (struct.error, UnicodeDecodeError):
            break
        heads[r.incarnation] = Head(r.lsn, r.chain_hash, r.kind)
        offset += _FRAME.size + length
        count += 1
    return offset, count, heads


def quarantine(path: str | os.PathLike[str], rows: Sequence[records.EncodedRecord]) -> None:
    """Append ``rows`` to the quarantine spool at ``path`` (created if needed), fsync'd."""
    q = Spool.open(path)
    try:
        q.append(rows)
    finally:
        q.close()


def _lock(file: io.FileIO, path: Path, wait: float) -> None:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX: no cross-process guard
        return
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError as exc:
            if time.monotonic() >= deadline:
                raise errors.JournalError(f"journal spool {path} is in use by another writer") from exc
            time.sleep(0.05)
