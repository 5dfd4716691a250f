"""Canonical JSON: the one encoding that journal records and outcome digests share.

Sorted keys, no whitespace, unicode kept, no NaN. Replay compares digests and
payload hashes computed from this text, so every producer goes through `encode`
(or `text`/`digest`), which uses orjson when installed and the stdlib's C encoder
otherwise - the two write the same text, and a test holds them equal.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any


def _reference(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# Why not json.dumps in the hot path: building a JSONEncoder per call costs ~30% of
# encoding a cycle-sized payload on CPython 3.11. This prebuilt C encoder produces
# the same text as _reference for payloads that passed _check_payload (a test
# holds the two equal). markers=None skips the circular-reference bookkeeping, which
# _check_payload already rules out (a self-containing payload ends in RecursionError).
try:
    from json.encoder import c_make_encoder as _c_make_encoder
    from json.encoder import encode_basestring as _encode_basestring
except ImportError:  # pragma: no cover - only on interpreters without the C accelerator
    _c_make_encoder = None

if _c_make_encoder is not None:
    _c_encoder = _c_make_encoder(None, None, _encode_basestring, None, ":", ",", True, False, False)

    def _canonical_payload(payload: dict[str, Any]) -> str:
        return "".join(_c_encoder(payload, 0))

else:  # pragma: no cover
    _canonical_payload = _reference

# orjson, when installed, writes the same canonical text ~8x faster (1 us instead of
# 7.5 us for a cycle payload); encoding is the writer's largest cost. Whatever orjson
# refuses (ints beyond 64 bits, nesting deeper than 255) goes to the stdlib, so the
# accepted set and the text do not depend on whether it is installed.
try:
    import orjson as _orjson
except ImportError:
    _orjson = None  # type: ignore[assignment]


def encode(payload: Any) -> tuple[str, bytes]:
    """Canonical JSON of `payload` as (text, UTF-8 bytes)."""
    data = encode_bytes(payload)
    return data.decode(), data


def encode_bytes(payload: Any) -> bytes:
    """Canonical JSON of `payload` as UTF-8 bytes only (what a digest needs: no text to decode)."""
    if _orjson is not None:
        try:
            return _orjson.dumps(payload, option=_orjson.OPT_SORT_KEYS)
        except _orjson.JSONEncodeError:
            pass
    return _canonical_payload(payload).encode("utf-8")


# A cycle outcome's digest covers every pod's name, verdict and scores, ~60 KB of text at
# 1,000 pods, yet most of its vectors are the very tuples the last cycle's were: a
# snapshot's pod names, a plugin's scores that did not change. The encoding of such a
# tuple is kept by identity (the entry keeps the tuple alive, so its id stays its own)
# and handed to orjson as a Fragment, which it copies into the text as it is: the
# bytes, and so the digest, are those of encoding everything afresh (a test holds
# them equal). Only tuples: they, and what the outcome puts in them (ints, strings,
# tuples), do not change. Bounded: cleared when full.
_Fragment = getattr(_orjson, "Fragment", None)
_FRAGMENTS: dict[int, tuple[Any, Any]] = {}
FRAGMENTS_KEPT = 32


def _fragment(value: Any) -> Any:
    """``value``, or its canonical encoding as an orjson Fragment when it is a tuple."""
    if type(value) is not tuple:
        return value
    kept = _FRAGMENTS.get(id(value))
    if kept is not None and kept[0] is value:
        return kept[1]
    fragment = _Fragment(_orjson.dumps(value, option=_orjson.OPT_SORT_KEYS))
    if len(_FRAGMENTS) >= FRAGMENTS_KEPT:
        _FRAGMENTS.clear()
    _FRAGMENTS[id(value)] = (value, fragment)
    return fragment


def unchanged(value: Any) -> Any:
    """What it is given: the ``vector`` of a payload built from the values themselves."""
    return value


def digest_of(build: Callable[[Callable[[Any], Any]], Any]) -> str:
    """``digest(build(f))`` where ``f`` returns what it is given; ``build`` passes the tuples it
    puts in the payload through ``f``, which may hand back their encodings kept from before."""
    if _Fragment is not None:
        try:
            return hashlib.sha256(_orjson.dumps(build(_fragment), option=_orjson.OPT_SORT_KEYS)).hexdigest()
        except _orjson.JSONEncodeError:
            pass  # what orjson refuses, the stdlib encodes (encode_bytes), from the values themselves
    return digest(build(unchanged))


def text(payload: Any) -> str:
    return encode(payload)[0]


def digest(payload: Any) -> str:
    """SHA-256 hex of the canonical encoding."""
    return hashlib.sha256(encode_bytes(payload)).hexdigest()


def plain(payload: Any) -> Any:
    """`payload` as plain JSON values (tuples become lists), exactly as it encodes."""
    return json.loads(encode(payload)[1])
