"""The hash chain that makes an epoch's records one tamper-evident sequence (SPEC §5 "Integrity").

Every record's ``chain_hash`` covers the record (its epoch, LSN, time, kind, schema
version and the SHA-256 of its canonical payload text) and the ``chain_hash`` of the
record before it in the same epoch. Editing, deleting, re-ordering or inserting a
record therefore breaks every link after it, and the epoch's head (its last LSN and
``chain_hash``, stored beside the records and published) pins the end, so truncating
the tail is caught too.

Without a key the link is a plain SHA-256: it proves the records are consistent with
each other, but anyone with write access can recompute a consistent chain. With a
key (``KRUNTIMES_JOURNAL_KEY_FILE``, a Secret in ``deploy/``) the link is an
HMAC-SHA256, which cannot be recomputed without the key. ``key_id`` names a key
without revealing it, so ``verify`` can tell "wrong key" from "tampered".

The message is a fixed, unambiguous byte layout (NUL-separated fields, the time in
one canonical text form) so that the writer, the spool and ``verify`` compute the
same link on every machine. Changing it is a new ``ALGORITHMS`` entry, never an edit.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Final

#: The link of the first record of an epoch: there is no record before it.
GENESIS: Final = "0" * 64

PLAIN: Final = "sha256"
KEYED: Final = "hmac-sha256"
ALGORITHMS: Final = frozenset({PLAIN, KEYED})

KEY_FILE_ENV: Final = "KRUNTIMES_JOURNAL_KEY_FILE"
MIN_KEY_BYTES: Final = 32

_DOMAIN: Final = b"kruntimes-journal-chain/1\x00"


class ChainKeyError(ValueError):
    """The configured chain key cannot be used (missing file, too short)."""


@dataclass(frozen=True, slots=True)
class ChainKey:
    """A secret for HMAC links; ``key_id`` identifies it without revealing it."""

    secret: bytes

    @property
    def key_id(self) -> str:
        return hashlib.sha256(b"kruntimes-journal-key-id/1\x00" + self.secret).hexdigest()[:16]

    def __repr__(self) -> str:  # never print the secret
        return f"ChainKey(key_id={self.key_id})"


def load_key(path: str | os.PathLike[str] | None = None) -> ChainKey | None:
    """The key in ``path`` (or ``$KRUNTIMES_JOURNAL_KEY_FILE``); None when neither is set.

    Surrounding whitespace is stripped (a Secret mounted from ``kubectl create secret
    --from-literal`` or an editor's trailing newline must not change the key).
    """
    if path is None:
        path = os.environ.get(KEY_FILE_ENV) or None
    if path is None:
        return None
    try:
        secret = Path(path).read_bytes().strip()
    except OSError as exc:
        raise ChainKeyError(f"cannot read the journal chain key {str(path)!r}: {exc.strerror or exc}") from exc
    if len(secret) < MIN_KEY_BYTES:
        raise ChainKeyError(
            f"the journal chain key in {str(path)!r} is {len(secret)} bytes; use at least {MIN_KEY_BYTES}"
            " (e.g. `head -c 48 /dev/urandom | base64`)"
        )
    return ChainKey(secret)


def algorithm(key: ChainKey | None) -> str:
    return PLAIN if key is None else KEYED


def timestamp_text(at: datetime) -> str:
    """The one text form of a record's time inside a link: UTC, microseconds, ``+00:00``."""
    if at.tzinfo is not timezone.utc:  # stored and encoded records are UTC already: no conversion
        if at.tzinfo is None or at.utcoffset() is None:
            raise ValueError(f"naive datetime {at!r}: journal times are UTC instants")
        at = at.astimezone(timezone.utc)
    return at.isoformat(timespec="microseconds")


_UTF8: Final = "utf-8"
_sha256 = hashlib.sha256


def link(prev: str, epoch: str, lsn: int, recorded_at: datetime, kind: str, schema_version: int,
         payload_sha256: str, key: ChainKey | None = None) -> str:
    """The ``chain_hash`` of one record, given the ``chain_hash`` of the record before it (or GENESIS).

    The message is ``_DOMAIN``, then the fields as UTF-8 text, each after a NUL (the
    writer computes one per record, so it is built as one string and encoded once).
    """
    message = _DOMAIN + (
        f"\x00{epoch}\x00{lsn}\x00{timestamp_text(recorded_at)}\x00{kind}\x00{schema_version}"
        f"\x00{payload_sha256}\x00{prev}"
    ).encode(_UTF8)
    if key is None:
        return _sha256(message).hexdigest()
    return hmac.new(key.secret, message, hashlib.sha256).hexdigest()


def same(a: str, b: str) -> bool:
    """Constant-time comparison of two links."""
    return hmac.compare_digest(a.encode("ascii", "replace"), b.encode("ascii", "replace"))
