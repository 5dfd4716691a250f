"""The web view's HTTP side: a WSGI application with a table of routes, served by the standard library.

Why no framework: five pages, GET only, no sessions, no forms that change anything.
``wsgiref`` with a thread per request is enough for the few people looking at an
incident, and leaves nothing to configure. Every response carries a Content Security
Policy that allows scripts from this server only; Plotly's script comes from the
``plotly`` package installed with kruntimes, never from a CDN (clusters are often
air-gapped).

Only GET and HEAD are answered: the view never changes anything, and the journal is
opened read-only underneath (``queries``). While the history tables trail the records
(a ``--journal-history follow`` scheduler), every page carries a banner saying how far
and which command catches up.
"""

from __future__ import annotations

import logging
import re
import socketserver
import time
from collections.abc import Callable, Iterable
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote
from wsgiref import simple_server

from kruntimes.journal import errors
from kruntimes.journal.history import indexer
from kruntimes.ui import (busy, integrity_page, markup, params, pod_page, queries, run_page, timeline, waits_page,
                          whatif_page)

log = logging.getLogger("kruntimes.ui")

Page = Callable[..., bytes]
MAX_QUERY_FIELDS = 200  # the what-if form, the largest, sends a few per score plugin

#: (pattern, page): the pattern's groups are the page's path arguments, URL-decoded.
ROUTES: tuple[tuple[re.Pattern[str], Page], ...] = (
    (re.compile(r"/"), lambda reader, q: timeline.render(reader, q)),
    (re.compile(r"/timeline"), timeline.render),
    (re.compile(r"/run/([^/]+)/([^/]+)"), run_page.render),
    (re.compile(r"/replay/([0-9]{1,18})"), run_page.render_replay),
    (re.compile(r"/waits"), waits_page.render),
    (re.compile(r"/whatif"), whatif_page.render),
    (re.compile(r"/pod"), pod_page.render_picker),
    (re.compile(r"/pod/([^/]+)/([^/]+)"), pod_page.render),
    (re.compile(r"/integrity"), integrity_page.render),
)

#: Health paths for probes (deploy/ui): answered before the pages, in plain text.
HEALTH = ("/healthz", "/readyz")

SECURITY_HEADERS = [
    ("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                                "img-src 'self' data:; connect-src 'self'; font-src 'self' data:; "
                                "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
]

_STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


def plotly_js() -> bytes:
    """plotly.min.js from the installed ``plotly`` package."""
    return resources.files("plotly").joinpath("package_data", "plotly.min.js").read_bytes()


def _static(name: str) -> bytes | None:
    if name == "plotly.min.js":
        return plotly_js()
    if name in ("ui.js", "ui.css"):
        return resources.files("kruntimes.ui").joinpath("static", name).read_bytes()
    return None


class App:
    """The WSGI application over one ``Reader``."""

    def __init__(self, reader: queries.Reader, *, label: str = "") -> None:
        self.reader = reader
        self.label = label
        self._static_cache: dict[str, bytes] = {}
        self.memory: dict[str, Any] = {}  # what pages keep between requests (the last verify), in memory only

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/") or "/"
        status, headers, body = self.respond(method, path, environ.get("QUERY_STRING", ""))
        start_response(status, headers + SECURITY_HEADERS + [("Content-Length", str(len(body)))])
        return [b"" if method == "HEAD" else body]

    def respond(self, method: str, path: str, query: str) -> tuple[str, list[tuple[str, str]], bytes]:
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", [("Allow", "GET, HEAD"), ("Content-Type", "text/plain")], \
                b"this view is read-only: GET only\n"
        if path in HEALTH:
            return self._health(path)
        if path.startswith("/static/"):
            name = path[len("/static/"):]
            body = self._static_cache.get(name) or _static(name)
            if body is None:
                return "404 Not Found", [("Content-Type", "text/plain")], b"no such asset\n"
            self._static_cache[name] = body
            kind = _STATIC_TYPES[Path(name).suffix]
            return "200 OK", [("Content-Type", kind), ("Cache-Control", "max-age=3600")], body
        for pattern, page in ROUTES:
            match = pattern.fullmatch(path)
            if match:
                return self._page(page, [unquote(g) for g in match.groups()], query)
        return self._error("404 Not Found", f"no page at {path}")

    def _health(self, path: str) -> tuple[str, list[tuple[str, str]], bytes]:
        """``/healthz``: the process answers (liveness: nothing else, so a database away restarts nothing);
        ``/readyz``: the journal answers too (one small query on ``journal_epochs``, as every page's banner)."""
        plain = [("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control", "no-store")]
        if path == "/readyz":
            try:
                self.reader.history_lag()
            except errors.JournalError as exc:
                return "503 Service Unavailable", plain, f"the journal does not answer: {exc}\n".encode()
        return "200 OK", plain, b"ok\n"

    def _page(self, page: Page, args: list[str], query: str) -> tuple[str, list[tuple[str, str]], bytes]:
        started = time.perf_counter()
        try:
            fields = parse_qs(query, keep_blank_values=False, max_num_fields=MAX_QUERY_FIELDS)
        except ValueError:  # more fields than that: no page here takes so many
            return self._error("400 Bad Request", f"more than {MAX_QUERY_FIELDS} query parameters; no page of "
                                                  "this view takes so many")
        q = params.Query(fields, self.memory)
        try:
            body = page(self.reader, q, *args)
        except params.BadParameter as exc:
            return self._error("400 Bad Request", str(exc))
        except busy.Busy as exc:
            status, headers, body = self._error("429 Too Many Requests", str(exc))
            return status, headers + [("Retry-After", str(busy.RETRY_AFTER_SECONDS))], body
        except LookupError as exc:
            return self._error("404 Not Found", str(exc.args[0]) if exc.args else "not found")
        except errors.JournalError as exc:
            return self._error("503 Service Unavailable", str(exc))
        body = self._with_lag(body)
        elapsed = (time.perf_counter() - started) * 1000
        return "200 OK", [("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "no-store"),
                          ("Server-Timing", f"page;dur={elapsed:.1f}")], body

    def _with_lag(self, body: bytes) -> bytes:
        """``body`` with a banner while the history tables trail the records (``--journal-history follow``)."""
        try:
            advice = indexer.advice(self.reader.history_lag())
        except errors.JournalError as exc:  # the page was read: it is worth more than the banner
            log.warning("cannot tell whether the history tables trail the journal: %s", exc)
            return body
        if advice is None:
            return body
        return markup.with_banner(body, markup.h("div", markup.h("strong", "Not up to date: "), advice,
                                                 class_="lag-banner", role="status"))

    def _error(self, status: str, message: str) -> tuple[str, list[tuple[str, str]], bytes]:
        body = markup.page(status.split(" ", 1)[1], markup.h("p", message, class_="error"))
        return status, [("Content-Type", "text/html; charset=utf-8")], body


class _Server(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True


class _Quiet(simple_server.WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class names it so
        log.info("%s " + format, self.address_string(), *args)


def make_server(app: App, host: str, port: int) -> simple_server.WSGIServer:
    server = simple_server.make_server(host, port, app, server_class=_Server, handler_class=_Quiet)
    return server
