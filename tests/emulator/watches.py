"""Watch streams: the part of the emulator's handler that serves ``GET ...?watch=true``.

One thread per watch. It sends the starting events (synthetic ADDED for what exists,
or the history after the requested resourceVersion, or one in-stream ERROR with a
410 Status once that part of the history is gone), then waits on the store's
condition for new events, filters them by namespace and selectors, and writes one
JSON line per event as an HTTP/1.1 chunk. Every ``POLL`` seconds it also looks at its
``timeoutSeconds`` deadline, whether a bookmark is due, whether the client went away,
and whether the test dropped the watches or stopped the emulator.
"""

from __future__ import annotations

import json
import select
import socket
import time
from typing import TYPE_CHECKING, Any, Callable

from tests.emulator import resources, selectors
from tests.emulator.store import ApiError, Event, Gone

if TYPE_CHECKING:
    from tests.emulator.server import Emulator

POLL = 0.05


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
        fields = selectors.parse_fields(query.get("fieldSelector"))
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
                left = json.loads(json.dumps(event.old))
                left["metadata"]["resourceVersion"] = str(event.rv)
                return "DELETED", left
            return (event.type, event.obj) if now else None

        lines: list[dict[str, Any]] = []
        ended = False
        with store.lock:
            epoch = emulator._watch_epoch
            if requested in ("", "0"):
                items, last = store.list(route.resource, route.namespace, wanted)
                lines = [{"type": "ADDED", "object": item} for item in items]
            else:
                last = int(requested)
                try:
                    lines = [{"type": t, "object": o} for t, o in filter(None, map(visible, store.events_after(last)))]
                    last = max(last, store.resource_version)
                except Gone as gone:
                    lines, ended = [{"type": "ERROR", "object": gone.status()}], True
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        with emulator._lock:
            emulator._open_watches += 1
        try:
            self._stream(route.resource, lines, ended, last, epoch, timeout, bookmarks, visible)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with emulator._lock:
                emulator._open_watches -= 1

    def _stream(self, resource: resources.Resource, lines: list[dict[str, Any]], ended: bool, last: int,
                epoch: int, timeout: float | None, bookmarks: bool,
                visible: Callable[[Event], tuple[str, dict[str, Any]] | None]) -> None:
        """Write ``lines``, then every visible event after ``last`` until the watch ends."""
        emulator, store = self.emulator, self.emulator.store
        deadline = None if timeout is None else time.monotonic() + timeout
        next_bookmark = time.monotonic() + emulator.bookmark_interval
        while True:
            for line in lines:
                self._chunk(json.dumps(line).encode() + b"\n")
            if ended:
                break
            with store.lock:
                store.lock.wait_for(lambda: store.resource_version > last or emulator._stopping.is_set()
                                    or emulator._watch_epoch != epoch, timeout=POLL)
                if emulator._watch_epoch != epoch and not emulator._stopping.is_set():
                    if emulator._abrupt:
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    break
                if emulator._stopping.is_set():
                    break
                try:
                    events = store.events_after(last)
                    lines = [{"type": t, "object": o} for t, o in filter(None, map(visible, events))]
                    last = store.resource_version
                except Gone as gone:  # this watcher fell behind the history
                    lines, ended = [{"type": "ERROR", "object": gone.status()}], True
            now = time.monotonic()
            if bookmarks and now >= next_bookmark and not ended:
                lines.append({"type": "BOOKMARK", "object": {
                    "kind": resource.kind, "apiVersion": resource.api_version,
                    "metadata": {"resourceVersion": str(last)}}})
                next_bookmark = now + emulator.bookmark_interval
            if deadline is not None and now >= deadline and not ended:
                for line in lines:
                    self._chunk(json.dumps(line).encode() + b"\n")
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

