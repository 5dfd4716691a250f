"""One expensive replay at a time, per kind, in the web view (issue 23 item 10).

`/integrity?verify=1` and a submitted what-if replay up to 5,000 cycles each, on a
plain GET: a few browser tabs (or a script) asking at once would each take a core
and the journal's connections, and the page everyone else is reading would wait. So
each kind runs one at a time per view; a request that finds its kind busy is answered
at once with 429 Too Many Requests, a Retry-After and a page that says what is
running and what to do, instead of queueing work nobody may still be waiting for.
The cheap pages are never held back.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, MutableMapping
from typing import Any

VERIFY, WHATIF = "replay verify", "what-if replay"
RETRY_AFTER_SECONDS = 10
_CREATE = threading.Lock()


class Busy(Exception):
    """The expensive work of this kind is already running; the request is answered 429."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"a {kind} is already running in this view (one at a time); try again when it has "
                         f"finished, in about {RETRY_AFTER_SECONDS} s, or run it with `kruntimes replay`, "
                         "which has no such limit")
        self.kind = kind


@contextlib.contextmanager
def one_at_a_time(memory: MutableMapping[str, Any], kind: str) -> Iterator[None]:
    """Hold the view's gate for `kind` while the block runs; `Busy` at once if another request holds it."""
    with _CREATE:
        gate = memory.setdefault(f"busy:{kind}", threading.Lock())
    if not gate.acquire(blocking=False):
        raise Busy(kind)
    try:
        yield
    finally:
        gate.release()
