"""Direct requests: the scheduler's hot writes as one HTTP/1.1 request on a kept-alive connection.

Every bind is a Run status replace and most are followed by an Event. Through the
official client each costs ~450 µs of CPU in our process (parameter validation by
pydantic, urllib3's pool and retry machinery, http.client's header parsing by the
email package, the kubeconfig refresh hook re-resolving proxies from the environment);
on a 2-core machine shared with the API server that is a sixth of a bind's CPU. Here
the request is written out in one piece and the answer parsed by httptools (llhttp,
Node's C parser): ~75 µs, measured against the release's kube-apiserver (bench/README.md).

What is kept from the client: the same `Configuration` (host and base path, TLS
trust as a file or data, client certificate, verification and server name, socket
options, the bearer token with its refresh hook) and the same default headers (its
User-Agent names the field manager the server records). A configuration with a proxy,
or one checking the certificate against another name, is not handled (`supports`):
the caller keeps the client there.

The rule of `client` holds: a request is never re-sent. `NotSent` is raised only
when no byte of it left this process (the connection could not be made); once any
was written, a failure (a timeout, the connection dropped) is an `OSError` meaning
"may have landed". A kept-alive connection the server closed while idle is found
before writing (it reads as ready) and replaced, so a write does not go out on it.
The whole request - connecting, writing, reading - takes `timeout` at most.
"""

from __future__ import annotations

import json
import select
import socket
import ssl
import threading
import time
from typing import Any, NamedTuple
from urllib.parse import quote, urlsplit

import httptools
import kubernetes.client
from kubernetes.client import ApiException
from kubernetes.utils.keepalive import tcp_keepalive_socket_options
from urllib3 import HTTPHeaderDict

#: How long a bearer token read from the configuration is used before its refresh hook runs again.
TOKEN_TTL = 1.0
IDLE_KEPT = 8  # idle connections kept, at most, unless told otherwise


class NotSent(OSError):
    """The request failed before any of it was written: it cannot have landed."""


class Answer(NamedTuple):
    status: int
    reason: str
    headers: HTTPHeaderDict
    body: bytes


def supports(configuration: kubernetes.client.Configuration) -> bool:
    """Whether `Direct` can send for this configuration: an http or https host, no proxy, and no
    certificate check against a name other than the server's (`assert_hostname` as a string)."""
    return (not configuration.proxy and urlsplit(configuration.host).scheme in ("http", "https")
            and not isinstance(configuration.assert_hostname, str))


def path(*segments: str) -> str:
    """An API path from its segments, each quoted as the client quotes path parameters."""
    return "/" + "/".join(quote(s, safe="") for s in segments)


def api_exception(answer: Answer) -> ApiException:
    """The client's exception for an answer that is not a success: `errors.describe` reads its Status."""
    exc = ApiException(status=answer.status, reason=answer.reason)
    exc.body = answer.body.decode("utf-8", "replace")
    exc.headers = answer.headers
    return exc


class Direct:
    """Requests to one API server over kept-alive connections (`keep` of them idle at most); thread-safe."""

    def __init__(self, configuration: kubernetes.client.Configuration, default_headers: dict[str, str],
                 keep: int = IDLE_KEPT) -> None:
        if not supports(configuration):
            raise ValueError("direct requests need an http(s) host without a proxy; use the client")
        url = urlsplit(configuration.host)
        self._tls = url.scheme == "https"
        self._address = (url.hostname or "localhost", url.port or (443 if self._tls else 80))
        self._prefix = url.path.rstrip("/")
        self._configuration = configuration
        # As the client's pool sets them: the configuration's socket options, else TCP
        # keep-alive probes when it asks for them (`keep_alive`), else none.
        if configuration.socket_options is not None:
            self._socket_options = list(configuration.socket_options)
        elif getattr(configuration, "keep_alive", False):
            self._socket_options = tcp_keepalive_socket_options()
        else:
            self._socket_options = []
        self._server_name = configuration.tls_server_name or self._address[0]
        self._context = _tls_context(configuration) if self._tls else None
        host = f"[{self._address[0]}]" if ":" in self._address[0] else self._address[0]
        fixed = {"Host": f"{host}:{self._address[1]}", **default_headers, "Accept": "application/json"}
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in fixed.items() if k.lower() != "content-type")
        self._keep = keep
        self._idle: list[socket.socket] = []
        self._lock = threading.Lock()
        self._token: tuple[float, str] | None = None

    def request(self, method: str, target: str, body: Any, timeout: float,
                content_type: str = "application/json") -> Answer:
        """Send `body` (JSON-encoded) to `target` (a path from `path`); the answer, whatever its status.

        Raises `NotSent` when nothing was written, another `OSError` when the request
        may have landed (timed out or dropped after writing)."""
        deadline = time.monotonic() + timeout
        data = json.dumps(body, separators=(",", ":")).encode()
        head = (f"{method} {self._prefix}{target} HTTP/1.1\r\n{self._fixed}{self._authorization()}"
                f"Content-Type: {content_type}\r\nContent-Length: {len(data)}\r\n\r\n").encode()
        conn = self._take(deadline)
        try:
            conn.settimeout(_left(deadline))
        except TimeoutError as exc:
            conn.close()
            raise NotSent("the request's time was up before it was written") from exc
        try:
            conn.sendall(head + data)
            answer, keep = _receive(conn, deadline)
        except BaseException:
            conn.close()
            raise
        if answer.status == 401:
            self._token = None  # the next request runs the refresh hook
        if keep:
            self._give(conn)
        else:
            conn.close()
        return answer

    def call(self, method: str, target: str, body: Any, timeout: float,
             content_type: str = "application/json") -> Answer:
        """`request`, with an answer that is not a success raised as the client raises it (`api_exception`)."""
        answer = self.request(method, target, body, timeout, content_type)
        if not 200 <= answer.status < 300:
            raise api_exception(answer)
        return answer

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _authorization(self) -> str:
        now = time.monotonic()
        token = self._token
        if token is None or now - token[0] >= TOKEN_TTL:
            setting = self._configuration.auth_settings().get("BearerToken")  # runs the refresh hook
            token = self._token = (now, f"Authorization: {setting['value']}\r\n" if setting else "")
        return token[1]

    def _take(self, deadline: float) -> socket.socket:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect(deadline)
            ready = select.poll()
            ready.register(conn, select.POLLIN)
            if not ready.poll(0):
                return conn
            conn.close()  # readable while idle: the server closed it (or sent what nobody asked for)

    def _give(self, conn: socket.socket) -> None:
        with self._lock:
            if len(self._idle) < self._keep:
                self._idle.append(conn)
                return
        conn.close()

    def _connect(self, deadline: float) -> socket.socket:
        try:
            conn = socket.create_connection(self._address, timeout=_left(deadline))
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for option in self._socket_options:
                conn.setsockopt(*option)
            if self._context is not None:
                conn = self._context.wrap_socket(conn, server_hostname=self._server_name)
        except (OSError, ValueError) as exc:
            raise NotSent(f"could not connect to {self._address[0]}:{self._address[1]}: {exc}") from exc
        return conn


class _Parsed:
    """httptools' callbacks: the headers and body of one answer."""

    def __init__(self) -> None:
        self.headers = HTTPHeaderDict()
        self.reason = ""
        self.body: list[bytes] = []
        self.complete = self.keep_alive = False
        self.parser = httptools.HttpResponseParser(self)

    def on_status(self, reason: bytes) -> None:
        self.reason += reason.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.add(name.decode("latin-1"), value.decode("latin-1"))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()  # asked now: llhttp starts over once the message ends


def _receive(conn: socket.socket, deadline: float) -> tuple[Answer, bool]:
    """Read one answer; (the answer, whether the connection may be used again)."""
    parsed = _Parsed()
    parser = parsed.parser
    while not parsed.complete:
        conn.settimeout(_left(deadline))
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("the API server closed the connection before answering in full")
        try:
            parser.feed_data(chunk)
        except httptools.HttpParserError as exc:
            raise ConnectionError(f"the API server's answer is not HTTP/1.1: {exc}") from exc
    answer = Answer(parser.get_status_code(), parsed.reason, parsed.headers, b"".join(parsed.body))
    return answer, parsed.keep_alive


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the request's time is up")
    return left


def _tls_context(configuration: kubernetes.client.Configuration) -> ssl.SSLContext:
    """TLS as the client sets up urllib3: the CA file, the client certificate, verification on unless turned off."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert, cadata=configuration.ca_cert_data)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif configuration.assert_hostname is False:
        context.check_hostname = False
    return context

