"""Watch streams: the part of the emulator's handler that serves ``GET ...?watch=true``.

One thread per watch, reading the store's shared history through its own cursor (the
last resourceVersion it sent), so each watch is its own queue. It sends the starting
events (synthetic ADDED for what exists, or the history after the requested
resourceVersion, or one in-stream ERROR with a 410 Status once that part of the history
is gone), then the changes of its resource as they become due (``watch_delivery``:
after the write was answered, plus the resource's lag), in resourceVersion order,
filtered by namespace and selectors, one JSON line per event as an HTTP/1.1 chunk.

As the API server's watch cache ("API Concepts", watch bookmarks; the cacher):

- with ``allowWatchBookmarks`` a BOOKMARK (only ``metadata.resourceVersion``) comes
  about every ``bookmark_interval`` seconds (60 on a real server) and once shortly
  (``bookmark_lead``, 2 s) before the ``timeoutSeconds`` deadline, so a watcher can
  resume from a fresh version;
- a watch from a resourceVersion the server has not reached yet waits ``fresh_wait``
  seconds (3 on a real server) for it, then answers one ERROR event with a 504
  Timeout Status ("Too large resource version", cause ``ResourceVersionTooLarge``);
- an object that starts or stops matching the selector arrives as ADDED or DELETED.

Every ``POLL`` seconds it also looks at its deadline, whether the client went away,
and whether the test dropped the watches or stopped the emulator.
"""

from __future__ import annotations

import select
import socket
import time
from typing import TYPE_CHECKING, Any, Callable

from tests.emulator import deep, resources, rest, selectors
from tests.emulator.store import ApiError, Event, Gone

if TYPE_CHECKING:
    from tests.emulator.server import Emulator

POLL = 0.05
GATHER = 0.002  # far below any watch latency a client could rely on; the API server's is milliseconds too


class WatchStreaming:
    """Mixed into the request handler; uses its ``connection``, ``wfile`` and ``emulator``."""

    emulator: "Emulator"
    connection: socket.socket
    wfile: Any
    close_connection: bool

    if TYPE_CHECKING:  # provided by BaseHTTPRequestHandler; declared for type checkers only
        path: str

        def send_response(self, code: int, message: str | None = None) -> None: ...
        def send_header(self, keyword: str, value: str) -> None: ...
        def end_headers(self) -> None: ...

    def _watch(self, route: resources.Route, query: dict[str, str]) -> None:
        emulator, store = self.emulator, self.emulator.store
        labels = selectors.parse_labels(query.get("labelSelector"))
        fields = rest.field_selector(store, route.resource, query.get("fieldSelector"))
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        requested = query.get("resourceVersion", "")
        if requested not in ("", "0") and not requested.isdigit():
            raise ApiError(400, "BadRequest", f'invalid resource version "{requested}"')

        def wanted(obj: dict[str, Any]) -> bool:
            return (route.namespace in (None, obj["metadata"].get("namespace"))
                    and selectors.matches(labels, obj) and selectors.fields_match(fields, obj))

        def visible(event: Event) -> tuple[str, dict[str, Any]] | None:
            if event.resource is not route.resource:
                return None
            now, before = wanted(event.obj), event.old is not None and wanted(event.old)
            if event.type == "MODIFIED" and now != before:
                if now:
                    return "ADDED", event.obj
                # Left the selection: DELETED with the previous state at the new version.
                assert event.old is not None
                left = deep.copy(event.old)
                left["metadata"]["resourceVersion"] = str(event.rv)
                return "DELETED", left
            return (event.type, event.obj) if now else None

        lines: list[dict[str, Any]] = []
        ended = False
        with store.lock:
            if requested not in ("", "0") and int(requested) > store._rv:
                store.wait_for_version(int(requested), emulator._stopping.is_set, emulator.fresh_wait)
            epoch, seen = emulator._watch_epoch, store.delivery.publications_of(route.resource.plural)
            if requested in ("", "0"):
                page = store.list(route.resource, route.namespace, wanted)
                lines, last = [{"type": "ADDED", "object": item} for item in page.items], page.resource_version
            elif int(requested) > store._rv:
                lines, ended, last = [{"type": "ERROR", "object": too_large(int(requested), store._rv)}], True, 0
            else:
                try:
                    lines, last = due(store.events_after(int(requested)), int(requested), route.resource, visible)
                except Gone as gone:
                    lines, ended, last = [{"type": "ERROR", "object": gone.status()}], True, 0
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        with emulator._lock:
            emulator._open_watches += 1
        try:
            self._stream(route.resource, lines, ended, last, epoch, seen, timeout, bookmarks, visible)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with emulator._lock:
                emulator._open_watches -= 1

    def _silent_watch(self) -> None:
        """A watch that is answered and then says nothing until the client leaves or the emulator stops."""
        emulator = self.emulator
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        with emulator._lock:
            emulator._open_watches += 1
        try:
            while not emulator._stopping.wait(POLL) and not self._client_gone():
                pass
        finally:
            with emulator._lock:
                emulator._open_watches -= 1

    def _stream(self, resource: resources.Resource, lines: list[dict[str, Any]], ended: bool, last: int,
                epoch: int, seen: int, timeout: float | None, bookmarks: bool,
                visible: Callable[[Event], tuple[str, dict[str, Any]] | None]) -> None:
        """Write ``lines``, then every visible event after ``last`` until the watch ends."""
        emulator, store = self.emulator, self.emulator.store
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        next_bookmark = started + emulator.bookmark_interval
        before_deadline = None if deadline is None else deadline - emulator.bookmark_lead
        while True:
            for line in lines:
                self._chunk(deep.dumps(line).encode() + b"\n")
            lines = []
            if ended:
                break
            # Let the changes of the next moment gather: one wake-up then carries them
            # all, instead of one per write (each wake-up of a waiting thread costs the
            # writer a lock hand-over while it holds the interpreter).
            time.sleep(GATHER)
            with store.lock:
                delivery, plural = store.delivery, resource.plural
                delivery.changed(plural).wait_for(
                    lambda: delivery.publications_of(plural) != seen or emulator._stopping.is_set()
                    or emulator._watch_epoch != epoch, timeout=POLL)
                seen = delivery.publications_of(plural)
                if emulator._watch_epoch != epoch and not emulator._stopping.is_set():
                    if emulator._abrupt:
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    break
                if emulator._stopping.is_set():
                    break
                try:
                    lines, last = due(store.events_after(last), last, resource, visible)
                except Gone as gone:  # this watcher fell behind the history
                    lines, ended = [{"type": "ERROR", "object": gone.status()}], True
            now = time.monotonic()
            bookmark_due = now >= next_bookmark or (before_deadline is not None and now >= before_deadline)
            if bookmarks and bookmark_due and not ended:
                lines.append({"type": "BOOKMARK", "object": {
                    "kind": resource.kind, "apiVersion": resource.api_version,
                    "metadata": {"resourceVersion": str(last)}}})
                next_bookmark = now + emulator.bookmark_interval
                if before_deadline is not None and now >= before_deadline:
                    before_deadline = None  # one before the deadline is enough
            if deadline is not None and now >= deadline and not ended:
                for line in lines:
                    self._chunk(deep.dumps(line).encode() + b"\n")
                break
            if self._client_gone():
                return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True


def due(events: list[Event], last: int, resource: resources.Resource,
        visible: Callable[[Event], tuple[str, dict[str, Any]] | None]) -> tuple[list[dict[str, Any]], int]:
    """The lines of the events after ``last`` that are due, in order, and the new cursor.

    Stops at the first change of ``resource`` not yet due, so a lagging or held change
    is never overtaken by a later one; other resources' changes only move the cursor.
    """
    now = time.monotonic()
    lines = []
    for event in events:
        if event.resource is resource:
            if event.visible_at is None or event.visible_at > now:
                break
            shown = visible(event)
            if shown is not None:
                lines.append({"type": shown[0], "object": shown[1]})
        last = event.rv
    return lines, last


def too_large(requested: int, current: int) -> dict[str, Any]:
    """The Status of a watch from a resourceVersion the server has not reached."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": f"Timeout: Too large resource version: {requested}, current: {current}",
            "reason": "Timeout", "code": 504,
            "details": {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                        "retryAfterSeconds": 1}}
