"""The local spool: an append-only file records spill to while the database is away.

Layout: an 8-byte magic, then frames ``[u32 length][u32 crc32(body)][body]`` (big
endian); a body is one encoded record. A process killed mid-write leaves a torn tail
(a short frame or a CRC mismatch): ``Spool.open`` detects it, logs the offset and
truncates it, so garbage is never replayed. Every ``append`` is one write + fsync.

Records only ever leave the spool all at once (``clear``) after the writer drained
them into the database; a crash between the drain and the clear replays records
already stored, which the drain's ``skip_existing`` insert turns into no-ops.
"""

from __future__ import annotations

import io
import logging
import os
import struct
import time
import zlib
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

from kruntimes.journal import errors, records

log = logging.getLogger(__name__)

MAGIC = b"KRJSPL01"
_FRAME = struct.Struct(">II")  # body length, crc32(body)
# lsn, schema_version, recorded_at (microseconds since the epoch), then the byte
# lengths of incarnation, kind, sha256 and payload.
_HEAD = struct.Struct(">qiqHHHI")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MAX_FRAME_BYTES = 1 << 30  # a length above this can only be a torn or foreign header


def _to_body(r: records.EncodedRecord) -> bytes:
    incarnation, kind, sha = r.incarnation.encode(), r.kind.encode(), r.payload_sha256.encode()
    payload = r.payload.encode()
    micros = (r.recorded_at - _EPOCH) // timedelta(microseconds=1)
    head = _HEAD.pack(r.lsn, r.schema_version, micros, len(incarnation), len(kind), len(sha), len(payload))
    return b"".join((head, incarnation, kind, sha, payload))


def _from_body(body: bytes) -> records.EncodedRecord:
    lsn, version, micros, n_inc, n_kind, n_sha, n_payload = _HEAD.unpack_from(body)
    at = _HEAD.size
    incarnation = body[at : at + n_inc].decode()
    at += n_inc
    kind = body[at : at + n_kind].decode()
    at += n_kind
    sha = body[at : at + n_sha].decode()
    at += n_sha
    payload = body[at : at + n_payload].decode()
    recorded_at = _EPOCH + timedelta(microseconds=micros)
    return records.EncodedRecord(lsn, incarnation, recorded_at, kind, version, payload, sha)


class Spool:
    """An open spool file; one writer process at a time (enforced with flock)."""

    def __init__(self, path: Path, file: io.FileIO, end: int, count: int, last_lsn: int | None) -> None:
        self.path = path
        self._file = file
        self._end = end
        self._count = count
        self._last_lsn = last_lsn

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
                return cls(path, file, len(MAGIC), 0, None)
            with open(path, "rb") as reader:
                magic = reader.read(len(MAGIC))
                end, count, last_lsn = _scan(reader) if magic == MAGIC else (0, 0, None)
            if magic != MAGIC:
                raise errors.JournalError(
                    f"{path} is not a kruntimes journal spool (bad magic); move it away or point the writer elsewhere"
                )
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
            return cls(path, file, end, count, last_lsn)
        except BaseException:
            file.close()
            raise

    def __len__(self) -> int:
        return self._count

    @property
    def last_lsn(self) -> int | None:
        """The LSN of the newest spooled record, or None when the spool is empty."""
        return self._last_lsn

    @property
    def end(self) -> int:
        return self._end

    def append(self, batch: Sequence[records.EncodedRecord]) -> None:
        """Write ``batch`` and fsync; on failure cut the file back and raise ``SpoolUnwritable``."""
        if not batch:
            return
        parts = []
        for r in batch:
            body = _to_body(r)
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
        self._last_lsn = batch[-1].lsn

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
                out.append(_from_body(body))
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
        """Drop every record (they are in the database now)."""
        self._file.truncate(len(MAGIC))
        os.fsync(self._file.fileno())
        self._end, self._count, self._last_lsn = len(MAGIC), 0, None

    def close(self) -> None:
        self._file.close()  # also releases the flock


def _scan(reader: io.BufferedReader) -> tuple[int, int, int | None]:
    """Read frames from after the magic: the offset after the last intact one, their count, the last LSN."""
    offset, count, last_lsn = len(MAGIC), 0, None
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
            last_lsn = _from_body(body).lsn
        except (struct.error, UnicodeDecodeError):
            break
        offset += _FRAME.size + length
        count += 1
    return offset, count, last_lsn


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
