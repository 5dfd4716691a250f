"""A loopback TCP proxy that can hold a request on its way to the API server, then let it land.

The stale-term fence (SPEC §3.6) exists because a status write sent in one leadership
term can reach the server after the next term began: held in a proxy, a load balancer
or a slow API server. The emulator delays a write itself; a real kube-apiserver cannot
be asked to, so the tests put this proxy between one client and the server and hold
that client's bytes there. TLS passes through untouched (the client verifies the API
server's own certificate, which names 127.0.0.1), so the request the server finally
reads is byte for byte the one the client sent, signed by the client's token.

Use: send one request through the proxy first (the connection, its TLS handshake
included, is then pooled by the client), `hold()`, start the write, `wait_held()`,
do what the next term does, `release()`.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class HoldingProxy:
    """Forwards every connection to ``upstream``; while held, bytes from clients wait in the proxy."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._open = threading.Event()
        self._open.set()
        self._held = threading.Event()
        self._stopping = threading.Event()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> "HoldingProxy":
        self._spawn(self._accept, "holding-proxy-accept")
        return self

    def hold(self) -> None:
        """From now on, bytes a client sends stay here until `release`."""
        self._held.clear()
        self._open.clear()

    def wait_held(self, timeout: float) -> bool:
        """Whether a client's bytes arrived and are being held."""
        return self._held.wait(timeout)

    def release(self) -> None:
        self._open.set()

    def stop(self) -> None:
        self._stopping.set()
        self._open.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
        for thread in self._threads:
            thread.join(5)

    # -- forwarding ------------------------------------------------------------------
    def _spawn(self, target: object, name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)  # type: ignore[arg-type]
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                downstream, _ = self._listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                return
            with self._lock:
                self._sockets += [downstream, upstream]
            self._spawn(self._pump, "holding-proxy-up", downstream, upstream, True)
            self._spawn(self._pump, "holding-proxy-down", upstream, downstream, False)

    def _pump(self, source: socket.socket, sink: socket.socket, holdable: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if holdable and not self._open.is_set():
                    self._held.set()
                    self._open.wait()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)
