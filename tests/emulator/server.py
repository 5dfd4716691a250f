"""An in-process Kubernetes API server for tests, spoken to by the real ``kubernetes`` client.

``Emulator().start()`` listens on 127.0.0.1 on an ephemeral port (HTTP/1.1, keep-alive);
``api_client()`` gives a ``kubernetes.client.ApiClient`` pointed at it; ``stop()`` closes
every connection and joins every thread it started. Object semantics live in
``store`` (with ``deletion``, ``paging``, ``validation``), the verbs in ``rest``, watch
streams in ``watches`` (their timing in ``watch_delivery``); this module is the HTTP
surface and fault injection:

- watches: see ``watches``; ``lag(plural, s)``, ``hold(plural)``/``release(plural)`` make
  one resource's changes reach watches late; ``bookmark_interval`` (60 s, as the API
  server; the test fixture shortens it), ``bookmark_lead`` and ``fresh_wait`` tune them.
- pods bound to a node are deleted gracefully; the emulator removes them when the grace
  period has elapsed, times ``grace_scale``, or at ``finish_terminating()``.
- an answer the client left before receiving is recorded in ``unanswered``.
- deploy/'s admission policies (``admission``): runtimed's (SPEC §4.1), the controller's
  (§4.2) and the scheduler's term fence (§3.6), judged from their CEL; ``bind_fence(namespace,
  name)`` points the fence's binding at a test's Lease.
- identities: ``identity(admission.service_account(...))`` gives a bearer token the
  emulator takes as that user (``api_client(token)``). A request without one (or with a
  token it did not issue) is the cluster admin's. Only the admission policies read who asks: there is
  no RBAC.
- Faults: ``fail_next(n)`` answers the next n requests with 500, ``set_latency(s)`` delays
  every request; per request (``faults``): ``delay``, ``drop`` (the connection closed
  without an answer, before or after the request was applied), ``throttle`` (429 with
  ``Retry-After``, plain text, as API Priority and Fairness answers), ``answer``
  (any status), ``duplicate`` (applied twice, the second answer sent), ``silence`` (a watch that stays open and says nothing). ``hits_of(match)`` counts every request that arrived, so a request the
  client re-sent on its own shows; ``drop_watches()`` ends every open watch (cleanly, or abruptly with
  ``abrupt=True``, like a broken connection), ``compact()`` forgets the event history.

Known gaps, on purpose: no RBAC, no server-side apply, no Foreground deletion
propagation (refused with 501), no namespace controller (deleting a namespace removes
its content at once).
"""

from __future__ import annotations

import collections
import secrets
import socket
import threading
import time
import traceback
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

import kubernetes.client

from tests.emulator import admission, deep, faults, resources, rest, schema, selectors, watches
from tests.emulator.store import ApiError, Store

_POLL = 0.02  # how often serve_forever looks for shutdown()
#: How long stop() lets woken watches end their responses before it cuts the connections.
WATCH_END_SECONDS = 2.0
_REASONS = {400: "BadRequest", 404: "NotFound", 409: "Conflict", 422: "Invalid", 500: "InternalError",
            503: "ServiceUnavailable", 504: "Timeout"}


class Emulator:
    """The server, its store and the fault-injection hooks."""

    def __init__(self, *, history_size: int = 1000, bookmark_interval: float = 60.0, bookmark_lead: float = 2.0,
                 grace_scale: float = 1.0, fresh_wait: float = 3.0, crd_dir: Path = schema.DEFAULT_CRD_DIR,
                 clock: Callable[[], datetime] | None = None) -> None:
        self.store = Store(history_size=history_size, schemas=schema.load(crd_dir), clock=clock)
        self.store.controllers.grace_scale = grace_scale
        self.bookmark_interval = bookmark_interval
        self.bookmark_lead = bookmark_lead
        self.fresh_wait = fresh_wait
        self.requests: collections.Counter[tuple[str, str, str | None]] = collections.Counter()
        self.errors: list[str] = []  # unexpected exceptions in the emulator itself
        # Answers the client never received (it left first): (method, path, status code or None).
        self.unanswered: list[tuple[str, str, int | None]] = []
        self.faults = faults.Faults()
        self._lock = threading.Lock()
        self._tokens: dict[str, admission.Identity] = {}
        self._failures: list[tuple[int, Callable[[str, str], bool] | None]] = []
        self._latency = 0.0
        self._watch_epoch = 0
        self._abrupt = False
        self._open_watches = 0
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------

    def start(self) -> "Emulator":
        handler = type("Handler", (_Handler,), {"emulator": self})
        self._server = _Server(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": _POLL},
                                        name="kube-api-emulator", daemon=True)
        self._thread.start()
        self.store.controllers.start()
        return self

    def stop(self) -> None:
        """Close every watch and connection and join every thread; idempotent."""
        if self._server is None:
            return
        self._stopping.set()
        with self.store.lock:
            self.store.lock.notify_all()
            self.store.advanced.notify_all()
            self.store.delivery.wake_all()
        self._server.shutdown()
        self.store.controllers.stop()
        # Woken watches end on their own, their last chunk written: give them that moment
        # before the connections are cut, or a client reads a response cut short.
        deadline = time.monotonic() + WATCH_END_SECONDS
        while self.open_watches and time.monotonic() < deadline:
            time.sleep(0.005)
        with self._lock:
            connections = list(self._connections)
        for connection in connections:  # idle keep-alive connections block in a read
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._server.server_close()  # joins the handler threads (block_on_close)
        assert self._thread is not None
        self._thread.join()
        self._server = None

    @property
    def host(self) -> str:
        assert self._server is not None, "start() the emulator first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def api_client(self, token: str | None = None) -> kubernetes.client.ApiClient:
        """A client of the admin, or (``token``) of the identity the token names."""
        configuration = kubernetes.client.Configuration()
        configuration.host = self.host
        if token is not None:
            configuration.api_key = {"authorization": token}
            configuration.api_key_prefix = {"authorization": "Bearer"}
        return kubernetes.client.ApiClient(configuration)

    def identity(self, who: admission.Identity) -> str:
        """A bearer token for ``who`` (``admission.service_account`` builds a ServiceAccount's)."""
        token = secrets.token_hex(16)
        with self._lock:
            self._tokens[token] = who
        return token

    def _identity_of(self, authorization: str | None) -> admission.Identity | None:
        """The identity of a token ``identity`` issued; None (the admin) for any other request."""
        scheme, _, token = (authorization or "").partition(" ")
        with self._lock:
            return self._tokens.get(token) if scheme.lower() == "bearer" else None

    # --- fault injection -------------------------------------------------------------

    def fail_next(self, count: int, code: int = 500, when: Callable[[str, str], bool] | None = None) -> None:
        """Answer the next ``count`` requests (those ``when(method, path)`` accepts) with ``code``."""
        with self._lock:
            self._failures.extend([(code, when)] * count)

    def delay(self, seconds: float, when: faults.Match | None = None, *, count: int = 1,
              apply_first: bool = False) -> None:
        """Hold the next ``count`` matching requests ``seconds`` before handling them, or
        (``apply_first``) handle them at once and answer ``seconds`` later."""
        self.faults.add(faults.Fault("delay", when, seconds=seconds, apply_first=apply_first), count)

    def drop(self, when: faults.Match | None = None, *, count: int = 1, apply_first: bool = False) -> None:
        """Close the connection of the next ``count`` matching requests without answering;
        with ``apply_first`` the request is applied first."""
        self.faults.add(faults.Fault("drop", when, apply_first=apply_first), count)

    def throttle(self, when: faults.Match | None = None, *, count: int = 1, retry_after: int = 1) -> None:
        """Answer the next ``count`` matching requests 429 with ``Retry-After``, unhandled."""
        self.faults.add(faults.Fault("throttle", when, retry_after=retry_after), count)

    def answer(self, code: int, when: faults.Match | None = None, *, count: int = 1) -> None:
        """Answer the next ``count`` matching requests with ``code`` (a Status body), unhandled."""
        self.faults.add(faults.Fault("answer", when, code=code), count)

    def duplicate(self, when: faults.Match | None = None, *, count: int = 1) -> None:
        """Apply the next ``count`` matching requests twice, answering with the second's outcome."""
        self.faults.add(faults.Fault("duplicate", when), count)

    def silence(self, when: faults.Match | None = None, *, count: int = 1) -> None:
        """Answer the next ``count`` matching watches 200, then send nothing (no event, no bookmark)."""
        self.faults.add(faults.Fault("silence", when), count)

    def bind_fence(self, namespace: str, name: str = "kruntimes-scheduler") -> None:
        """Point the scheduler-fence policy's binding at this Lease (SPEC §3.6; deploy's names another)."""
        with self.store.lock:
            self.store.admission.bind_param(admission.FENCE, namespace, name)

    def hits_of(self, match: faults.Match) -> int:
        """Requests that reached the server and ``match`` accepts, faulted or not."""
        return self.faults.hits_of(match)

    def set_latency(self, seconds: float) -> None:
        """Delay every request by ``seconds`` before handling it (0 turns it off)."""
        self._latency = seconds

    def drop_watches(self, abrupt: bool = False) -> None:
        """End every open watch now: cleanly, or (``abrupt``) without ending the chunked body."""
        with self.store.lock:
            self._abrupt = abrupt
            self._watch_epoch += 1
            self.store.delivery.wake_all()

    def compact(self) -> None:
        """Forget the event history: a watch from any older resourceVersion gets 410."""
        self.store.compact()

    def lag(self, plural: str, seconds: float) -> None:
        """Deliver every later change of ``plural`` (``"pods"``, ``"runs"``) to watches ``seconds`` late."""
        self.store.delivery.lag(plural, seconds)

    def hold(self, plural: str) -> None:
        """Keep the changes of ``plural`` from every watch until ``release(plural)``."""
        self.store.delivery.hold(plural)

    def release(self, plural: str) -> None:
        self.store.delivery.release(plural)

    def finish_terminating(self) -> None:
        """End every pending pod grace period now, as a kubelet confirming the pods stopped."""
        self.store.controllers.finish_terminating()

    @property
    def open_watches(self) -> int:
        with self._lock:
            return self._open_watches

    # --- used by the handler ---------------------------------------------------------

    def _before_request(self, method: str, path: str) -> None:
        if self._latency:
            self._stopping.wait(self._latency)
        with self._lock:
            for index, (code, when) in enumerate(self._failures):
                if when is None or when(method, path):
                    del self._failures[index]
                    raise ApiError(code, "InternalError" if code == 500 else "ServiceUnavailable",
                                   "an error on the server (injected by the test) has prevented the request "
                                   "from succeeding")

    def _track(self, connection: socket.socket, add: bool) -> None:
        with self._lock:
            (self._connections.add if add else self._connections.discard)(connection)


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # so that server_close() joins every handler thread
    block_on_close = True


class _Handler(BaseHTTPRequestHandler, watches.WatchStreaming):
    protocol_version = "HTTP/1.1"
    emulator: Emulator

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without this, Nagle's algorithm
        # and the client's delayed ACK add 40 ms to every request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.emulator._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.emulator._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(url.query, keep_blank_values=True).items()}
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._fault = fault = self.emulator.faults.arrived(method, url.path)
        self.emulator.store.begin_request(self.emulator._identity_of(self.headers.get("Authorization")))
        try:
            self._handle_request(method, url, query, raw, fault)
        finally:
            self.emulator.store.end_request()  # its changes reach watches only now
            if fault is not None:
                self.emulator.faults.finish(fault)

    def _handle_request(self, method: str, url: Any, query: dict[str, str], raw: bytes,
                        fault: faults.Fault | None) -> None:
        try:
            if fault is not None and not fault.apply_first:
                if fault.kind == "drop":
                    self._drop()
                    return
                if fault.kind == "delay":
                    self.emulator._stopping.wait(fault.seconds)
                elif fault.kind == "throttle":
                    self._send_throttled(fault.retry_after)
                    return
                elif fault.kind == "answer":
                    self._send(fault.code, ApiError(fault.code, _REASONS.get(fault.code, "InternalError"),
                                                    "injected by the test").status())
                    return
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return
        try:
            self.emulator._before_request(method, url.path)
            if url.path == "/version":
                self._send(200, {"major": "1", "minor": "33", "gitVersion": "v1.33.0-kruntimes-emulator"})
                return
            route = resources.route(url.path)
            if route is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            body = _json_body(raw) if raw else None
            if method == "GET" and route.name is None and query.get("watch") in ("true", "1"):
                self._count("watch", route)
                if fault is not None and fault.kind == "silence":
                    self._silent_watch()
                else:
                    self._watch(route, query)
                return
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            if fault is not None and fault.kind == "duplicate":  # the first copy's answer is lost on its way
                try:
                    rest.dispatch(self.emulator.store, method, route, query, body, content_type,
                                  lambda verb: self._count(verb, route))
                except ApiError:
                    pass
            code, result = rest.dispatch(self.emulator.store, method, route, query, body, content_type,
                                         lambda verb: self._count(verb, route))
            self._send(code, result, self.emulator.store.take_warnings())
        except ApiError as exc:
            self.emulator.store.take_warnings()
            self._send_failure(method, url.path, exc)
        except selectors.SelectorError as exc:
            self._send_failure(method, url.path, ApiError(400, "BadRequest", str(exc)))
        except (BrokenPipeError, ConnectionResetError):
            self._client_left(method, url.path, None)
        except Exception:  # a bug in the emulator: answer 500 and let the fixture fail the test
            self.emulator.errors.append(traceback.format_exc())
            self._send_failure(method, url.path, ApiError(500, "InternalError", "emulator bug; see Emulator.errors"))

    def _send_failure(self, method: str, path: str, error: ApiError) -> None:
        """Answer ``error``; a client that left meanwhile is recorded, not raised."""
        try:
            self._send(error.code, error.status())
        except (BrokenPipeError, ConnectionResetError):
            self._client_left(method, path, error.code)

    def _client_left(self, method: str, path: str, code: int | None) -> None:
        self.close_connection = True
        with self.emulator._lock:
            self.emulator.unanswered.append((method, path, code))

    # --- plumbing --------------------------------------------------------------------

    def _send(self, code: int, body: dict[str, Any], warnings: list[str] | None = None) -> None:
        fault = getattr(self, "_fault", None)
        if fault is not None and fault.apply_first:  # the request has been handled: now misbehave
            self._fault = None
            self.emulator.store.end_request()  # the server answered; only the network is slow or cut
            if fault.kind == "drop":
                self._drop()
                return
            if fault.kind == "delay":
                self.emulator._stopping.wait(fault.seconds)
        data = deep.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for warning in warnings or []:
            self.send_header("Warning", f'299 - "{warning}"')
        self.end_headers()
        self.wfile.write(data)
        self.emulator.store.end_request()

    def _drop(self) -> None:
        """Close the connection without a byte of answer, as a crashed or cut-off server would."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _send_throttled(self, retry_after: int) -> None:
        self.send_response(429)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Retry-After", str(retry_after))
        self.send_header("Content-Length", str(len(faults.THROTTLED_BODY)))
        self.end_headers()
        self.wfile.write(faults.THROTTLED_BODY)

    def _count(self, verb: str, route: resources.Route) -> None:
        with self.emulator._lock:
            self.emulator.requests[(verb, route.resource.plural, route.subresource)] += 1


def _json_body(raw: bytes) -> Any:
    try:
        return deep.loads(raw)
    except deep.TooDeep as exc:
        raise ApiError(400, "BadRequest", f"the request body is not valid JSON: {exc}") from exc
    except ValueError as exc:
        raise ApiError(400, "BadRequest", f"the request body is not valid JSON: {exc}") from exc

