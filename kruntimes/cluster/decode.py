"""JSON from the API server, decoded so that one deeply nested object cannot stop a whole list.

Kubernetes accepts objects nested up to 10,000 levels (a Run's free-form
`spec.mode.function`, and the managedFields entry that tracks it), while Python's
`json` gives up with `RecursionError` near 1,000. Decoded naively, one such Run makes
every list and watch of its resource fail, and the informer never syncs (issue 23
item 6). So:

- the fast path is plain `json.loads` (C, what every ordinary body takes);
- when that runs out of recursion, the text is scanned iteratively (no recursion at
  any depth) and every value nested deeper than `MAX_DEPTH` is replaced by the
  `TOO_DEEP` marker string before decoding; the body decodes, each object keeps its
  shallow parts (metadata: name, namespace, resourceVersion), and the caller skips
  the objects that hold the marker (`nested_too_deeply`) with a bounded reason.

A hostile object can at worst make itself skipped (by holding the marker string);
it cannot hide another object.

Every request that can answer with a Run is sent with `_preload_content=False` and
its answer read by `response_value` (never by the client's own parser, which raises
`RecursionError` on such a Run): the informers' lists and watches, the reads that
settle a conflict or an unanswered write, runtimed's start-up probe and `kruntimes
release`. Run writes, whose answer is the whole Run, are read by `drain` and not
decoded at all.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

#: Levels kept when a body had to be scanned; no real Kubernetes object comes close.
MAX_DEPTH = 256
#: What stands in for a value nested deeper than `MAX_DEPTH` (a NUL never starts a real field).
TOO_DEEP = "\u0000kruntimes: nested too deeply"
#: The bounded reason an informer logs and counts for an object it skips.
REASON_TOO_DEEP = "nested too deeply"

# A JSON string (skipped whole, so brackets inside it do not count) or one bracket.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_MARKER = json.dumps(TOO_DEEP)


@dataclass(frozen=True)
class Decoded:
    """A decoded body; `cut` when some value was replaced by `TOO_DEEP`."""

    value: Any
    cut: bool = False


def loads(data: bytes | str) -> Decoded:
    """Decode `data`; never raises `RecursionError` (a malformed body still raises `ValueError`)."""
    try:
        return Decoded(json.loads(data))
    except RecursionError:
        pass
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    cut_text = _cut_below(text, MAX_DEPTH)
    return Decoded(json.loads(cut_text), cut_text is not text)


def response_value(response: Any) -> Any:
    """The decoded body of a raw client answer (`_preload_content=False`); its connection goes back to the pool.

    Decoded by `loads`, so a deeply nested object keeps its shallow parts (metadata,
    status) and the caller never meets `RecursionError`.
    """
    try:
        return loads(response.data).value
    finally:
        response.release_conn()


def drain(response: Any) -> None:
    """Read a raw client answer whose body is not needed, and give its connection back to the pool."""
    try:
        response.data  # noqa: B018 - read whole, so the connection can carry the next request
    finally:
        response.release_conn()


def nested_too_deeply(value: Any) -> bool:
    """Whether `value` (from a cut `Decoded`) holds the `TOO_DEEP` marker anywhere."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif item == TOO_DEEP:
            return True
    return False


def _cut_below(text: str, limit: int) -> str:
    """`text` with every array or object that opens deeper than `limit` replaced by the marker."""
    pieces: list[str] = []
    depth, kept_until, cut_from = 0, 0, -1
    for token in _TOKENS.finditer(text):
        char = token.group()
        if char in "[{":
            depth += 1
            if depth == limit + 1 and cut_from < 0:
                cut_from = token.start()
        elif char in "]}":
            if depth == limit + 1 and cut_from >= 0:
                pieces.append(text[kept_until:cut_from])
                pieces.append(_MARKER)
                kept_until, cut_from = token.end(), -1
            depth -= 1
    if not pieces:
        return text
    pieces.append(text[kept_until:])
    return "".join(pieces)
