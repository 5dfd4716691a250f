"""`/metrics`, `/healthz` and `/readyz` on one port, for Prometheus and the kubelet.

- `/metrics`: the process's registry (scheduler, journal writer, leader gauge);
- `/healthz`: 200 while every thread that must run is running (liveness: a wedged
  informer or elector gets the container restarted);
- `/readyz`: 200 once the caches are synced, on the standby too, so that a rollout
  or a PodDisruptionBudget counts both replicas (deploy/base/deployment.yaml).
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

log = logging.getLogger(__name__)


class ProbeServer:
    def __init__(self, registry: CollectorRegistry, *, healthy: Callable[[], bool], ready: Callable[[], bool],
                 address: str = "0.0.0.0", port: int = 8080) -> None:
        handler = type("ProbeHandler", (_Handler,), {"registry": registry, "healthy": staticmethod(healthy),
                                                     "ready": staticmethod(ready)})
        self._server = ThreadingHTTPServer((address, port), handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> ProbeServer:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="kruntimes-probes", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5.0)


class _Handler(BaseHTTPRequestHandler):
    registry: CollectorRegistry
    healthy: Callable[[], bool]
    ready: Callable[[], bool]

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)
        elif path in ("/healthz", "/livez"):
            self._probe(self.healthy())
        elif path == "/readyz":
            self._probe(self.ready())
        else:
            self._send(404, b"not found\n", "text/plain")

    def _probe(self, ok: bool) -> None:
        self._send(200 if ok else 503, b"ok\n" if ok else b"not ok\n", "text/plain")

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # probes every few seconds would drown the scheduler's own logs
