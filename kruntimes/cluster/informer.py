"""An informer: list + watch of one resource, delivering every change exactly once to a handler.

One thread per resource. It lists (in pages), hands the handler what changed, then
watches from the list's resourceVersion with bookmarks, and keeps going:

- a watch that ends cleanly (its `timeoutSeconds`, a server restart) is resumed from
  the last resourceVersion seen, which bookmarks keep fresh while nothing changes;
- a broken connection or a server error is resumed the same way after an
  exponential backoff with jitter, reset by the next successful list or watch;
- 410 Gone (the resourceVersion fell out of the server's history, sent in-stream as
  an ERROR event or as the HTTP status) relists;
- a watch that hears nothing, not even a bookmark, for twice the server's bookmark
  interval is stalled (a connection kept open by a proxy or a wedged server): it is
  ended and resumed from the last resourceVersion at once, with a log line and a
  metric (issue 23 item 7), instead of waiting out its `timeoutSeconds`.

One object the informer cannot take (nested deeper than Python's parser goes, see
`decode`) is skipped with a bounded reason, a log line and a metric; it never stops
the list or the watch that carries it, so the rest still arrives (issue 23 item 6).

A relist is diffed against what this informer already delivered - it remembers each
object's resourceVersion, nothing else - so an unchanged object is not delivered
again, a changed one is delivered once, and one that vanished while the watch was
down is delivered as a delete. Watch events are deduplicated the same way. So the
handler (and the journal behind it) sees neither losses nor duplicates, however
often the connection drops.

`resync()` asks for a relist from another thread and waits for it: a new leader
uses it to make sure it plans on everything written before it took the lease.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Protocol

from kubernetes.client import ApiException
from kubernetes.watch.watch import iter_resp_lines
from urllib3.exceptions import ReadTimeoutError

from kruntimes.cluster import decode, errors
from kruntimes.cluster.backoff import Backoff
from kruntimes.cluster.informer_metrics import SILENT, InformerMetrics
from kruntimes.cluster.sources import Source

log = logging.getLogger(__name__)

Key = tuple[str, str]
PAGE_SIZE = 500
CONNECT_TIMEOUT = 10.0
READ_SLACK = 30.0  # a watch's socket may idle this much longer than its timeoutSeconds
#: The API server's bookmark period (its watch cache sends one about every minute).
BOOKMARK_INTERVAL = 60.0


class Handler(Protocol):
    """Receives one resource's changes, in order, on the informer's thread."""

    def upsert(self, obj: dict[str, Any], event: str) -> None: ...

    def delete(self, namespace: str, name: str) -> None: ...


@dataclass
class InformerStats:
    """Counters for tests, logs and the benchmark (ints only: read without a lock)."""

    lists: int = 0        # complete lists, the first one included
    watches: int = 0      # watch requests the server accepted
    events: int = 0       # changes delivered to the handler
    duplicates: int = 0   # watch or list entries skipped because already delivered
    bookmarks: int = 0
    gone: int = 0         # 410s that forced a relist
    errors: int = 0       # failures that were retried with backoff
    skipped: int = 0      # objects that could not be taken (see `decode`)
    stalls: int = 0       # watches restarted because they stayed silent


class Informer:
    def __init__(self, source: Source, handler: Handler, *, watch_timeout: int = 300,
                 request_timeout: float = 30.0, backoff: Backoff | None = None, page_size: int = PAGE_SIZE,
                 bookmark_interval: float = BOOKMARK_INTERVAL, metrics: InformerMetrics | None = None) -> None:
        self.source = source
        self.handler = handler
        self.watch_timeout = watch_timeout
        self.request_timeout = request_timeout
        self.backoff = backoff or Backoff(0.2, 30.0)
        self.page_size = page_size
        # Silent this long (no event, no bookmark), a watch is stalled; never longer than
        # the request's own end, which a live server marks with a bookmark too.
        self.silence_limit = min(2 * bookmark_interval, watch_timeout + READ_SLACK)
        self.metrics = metrics
        self.stats = InformerStats()
        self.resource_version: str | None = None
        self._known: dict[Key, str] = {}  # what the handler has been given: key -> resourceVersion
        self._skipped: dict[Key, str] = {}  # versions skipped (never given to the handler): key -> resourceVersion
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Condition()
        self._response: Any = None
        self._resync_requested = 0
        self._resync_served = 0
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> Informer:
        self._thread = threading.Thread(target=self._run, name=f"kruntimes-informer-{self.source.kind.lower()}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """End the watch now (closing its connection) and join the thread."""
        self._stopping.set()
        self._abort_request()
        with self._lock:
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.error("informer %s did not stop within %.1fs", self.source.kind, timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def synced(self) -> bool:
        """True once the first list has been delivered."""
        return self._synced.is_set()

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    def resync(self, timeout: float) -> bool:
        """Relist now (diffed, like any relist) and wait until it was delivered; False on timeout."""
        with self._lock:
            self._resync_requested += 1
            wanted = self._resync_requested
        self._abort_request()  # end the current watch so the thread gets to the list at once
        with self._lock:
            return self._lock.wait_for(lambda: self._resync_served >= wanted or self._stopping.is_set(), timeout) \
                and self._resync_served >= wanted

    def __len__(self) -> int:
        """Objects currently known (delivered and not deleted)."""
        return len(self._known)

    # -- the loop -------------------------------------------------------------------------
    def _run(self) -> None:
        must_list = True
        while not self._stopping.is_set():
            try:
                with self._lock:
                    resync = self._resync_requested
                if must_list or resync > self._resync_served:
                    self._relist()
                    must_list = False
                    self.backoff.reset()
                    with self._lock:
                        self._resync_served = max(self._resync_served, resync)
                        self._lock.notify_all()
                self._watch()
            except errors.Gone as exc:
                self.stats.gone += 1
                must_list = True
                log.info("%s watch expired (%s); relisting", self.source.kind, exc)
            except Exception as exc:  # noqa: BLE001 - any failure: back off, then resume or relist
                if self._stopping.is_set():
                    break
                self.stats.errors += 1
                # A throttling server (429) says when to come back; the client never sleeps on it.
                asked_wait = errors.retry_after(exc) or errors.retry_after(exc.__cause__ or exc) or 0.0
                delay = max(self.backoff.next(), asked_wait)
                log.warning("%s informer: %s; retrying in %.2fs", self.source.kind, errors.describe(exc), delay)
                with self._lock:  # stop, or a new resync request (a new leader waiting), cuts it short
                    asked = self._resync_requested
                    self._lock.wait_for(lambda: self._stopping.is_set() or self._resync_requested > asked, delay)

    def _relist(self) -> None:
        """List everything, deliver the difference to what was delivered, and remember the list's version."""
        items, version, cut = self._list()
        listed = {_key(obj): obj for obj in items}
        # Deletes first: capacity a vanished Run held is free before the Runs this
        # relist brings are planned.
        for key in sorted(set(self._known) - set(listed)):
            del self._known[key]
            self._deliver_delete(key)
        for key in set(self._skipped) - set(listed):
            del self._skipped[key]
        for key, obj in listed.items():
            rv = _rv(obj)
            known = self._known.get(key)
            if known == rv or self._skipped.get(key) == rv:
                self.stats.duplicates += 1
                continue
            if cut and decode.nested_too_deeply(obj):
                self._skip(key, rv, decode.REASON_TOO_DEEP)
                continue
            self._known[key] = rv
            self._skipped.pop(key, None)
            self._deliver_upsert(obj, "ADDED" if known is None else "MODIFIED")
        self.resource_version = version
        self.stats.lists += 1
        self._synced.set()

    def _list(self) -> tuple[list[dict[str, Any]], str, bool]:
        """Every item, the list's resourceVersion, and whether a page had to be cut (see `decode`)."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        version = ""
        cut = False
        while True:
            kwargs: dict[str, Any] = {"limit": self.page_size, "_request_timeout": self.request_timeout}
            if token:
                kwargs["_continue"] = token
            decoded = decode.loads(self._read_all(self.source.request(**kwargs)))
            body, cut = decoded.value, cut or decoded.cut
            meta = body.get("metadata") or {}
            if not token:
                version = str(meta.get("resourceVersion") or "")
            items.extend(i for i in body.get("items") or [] if isinstance(i, dict))
            token = meta.get("continue") or None
            if not token:
                return items, version, cut

    def _watch(self) -> None:
        """One watch request, events delivered as they come; returns when the server ends it."""
        try:
            # The read timeout is the silence limit: every event and bookmark resets it.
            response = self.source.request(
                watch=True, resource_version=self.resource_version, allow_watch_bookmarks=True,
                timeout_seconds=self.watch_timeout, _request_timeout=(CONNECT_TIMEOUT, self.silence_limit))
        except ApiException as exc:
            if errors.status_code(exc) == 410:
                raise errors.Gone(errors.describe(exc)) from exc
            raise
        except ReadTimeoutError:
            self._stalled()
            return
        with self._lock:
            if self._stopping.is_set() or self._resync_requested > self._resync_served:
                _close(response)
                return
            self._response = response
        self.stats.watches += 1
        self.backoff.reset()
        try:
            for event in _events(response):
                self._apply(*event)
        except errors.ClusterError:
            raise
        except ReadTimeoutError:
            if not (self._stopping.is_set() or self._resync_wanted()):
                self._stalled()
        except Exception:
            if self._stopping.is_set() or self._resync_wanted():
                return  # we closed the connection ourselves
            raise
        finally:
            with self._lock:
                self._response = None
            _close(response)

    def _stalled(self) -> None:
        """The watch was silent past the limit: the caller resumes it from the last resourceVersion now."""
        self.stats.stalls += 1
        if self.metrics is not None:
            self.metrics.watch_restarts.labels(self.source.kind, SILENT).inc()
        log.warning("%s watch silent for %.0fs (no event, no bookmark); restarting it from resourceVersion %s",
                    self.source.kind, self.silence_limit, self.resource_version)

    def _skip(self, key: Key, rv: str, reason: str) -> None:
        """Leave one object out: the handler keeps what it had of it (if anything), the rest goes on."""
        self._skipped[key] = rv
        self.stats.skipped += 1
        if self.metrics is not None:
            self.metrics.skipped.labels(self.source.kind, reason).inc()
        log.warning("%s %s/%s (resourceVersion %s) skipped: %s", self.source.kind, *key, rv, reason)

    def _apply(self, event: dict[str, Any], cut: bool = False) -> None:
        kind, obj = event.get("type"), event.get("object")
        if not isinstance(obj, dict):
            raise errors.WatchError(f"{self.source.kind} watch event without an object: {kind}")
        if kind == "ERROR":
            code = obj.get("code")
            message = f"{obj.get('reason')}: {obj.get('message')}"
            if code == 410:
                raise errors.Gone(message)
            raise errors.WatchError(f"{self.source.kind} watch error {code} {message}",
                                    code if isinstance(code, int) else None)
        rv = _rv(obj)
        if kind == "BOOKMARK":
            self.stats.bookmarks += 1
        elif kind in ("ADDED", "MODIFIED"):
            key = _key(obj)
            if self._known.get(key) == rv or self._skipped.get(key) == rv:
                self.stats.duplicates += 1
            elif cut and decode.nested_too_deeply(obj):
                self._skip(key, rv, decode.REASON_TOO_DEEP)
            else:
                self._known[key] = rv
                self._skipped.pop(key, None)
                self._deliver_upsert(obj, kind)
        elif kind == "DELETED":
            key = _key(obj)
            self._skipped.pop(key, None)
            if key in self._known:
                del self._known[key]
                self._deliver_delete(key)
            else:
                self.stats.duplicates += 1
        else:
            log.warning("%s watch: ignoring an event of unknown type %r", self.source.kind, kind)
            return
        if rv:
            self.resource_version = rv

    def _resync_wanted(self) -> bool:
        with self._lock:
            return self._resync_requested > self._resync_served

    # A handler that raises has a bug; the object stays delivered (retrying the same
    # event would fail the same way) and the informer goes on with the next one.
    def _deliver_upsert(self, obj: dict[str, Any], event: str) -> None:
        self.stats.events += 1
        try:
            self.handler.upsert(obj, event)
        except Exception:  # noqa: BLE001
            log.exception("%s handler failed on %s %s/%s", self.source.kind, event, *_key(obj))

    def _deliver_delete(self, key: Key) -> None:
        self.stats.events += 1
        try:
            self.handler.delete(*key)
        except Exception:  # noqa: BLE001
            log.exception("%s handler failed on DELETED %s/%s", self.source.kind, *key)

    def _read_all(self, response: Any) -> bytes:
        with self._lock:
            if self._stopping.is_set():
                _close(response)
                raise errors.ClusterError("stopping")
            self._response = response
        try:
            return bytes(response.data)
        finally:
            with self._lock:
                self._response = None
            _close(response)

    def _abort_request(self) -> None:
        """Shut the socket of the request in flight, so a blocked read returns now."""
        with self._lock:
            response = self._response
        if response is not None:
            try:
                response.shutdown()
            except Exception:  # noqa: BLE001 - already closed, or an older urllib3
                pass


def _events(response: Any) -> Iterator[tuple[dict[str, Any], bool]]:
    """Each event of a watch, and whether it had to be cut (see `decode`)."""
    for line in iter_resp_lines(response):
        if line.strip():
            decoded = decode.loads(line)
            yield decoded.value, decoded.cut


def _close(response: Any) -> None:
    try:
        response.close()
        response.release_conn()
    except Exception:  # noqa: BLE001 - closing a broken connection may fail again
        pass


def _key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _rv(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
