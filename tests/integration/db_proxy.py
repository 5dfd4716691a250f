"""A TCP proxy in front of the test PostgreSQL that a test can cut and restore.

Database outages are simulated here, never by stopping the server (other tests and
people share it). The proxy listens on a port of its own and forwards every
connection to the server; ``cut`` makes the database unreachable in one of two ways:

- ``reset``: every open connection is reset (RST) and new ones are refused at
  once, as when the server restarts or its host is gone and says so;
- ``blackhole``: open connections stop passing bytes and new ones are accepted but
  never answered, as when a network partition drops packets: clients find out
  only through their own timeouts;
- ``hold``: open connections still carry what clients send, but the server's answers
  are held until ``restore`` (new ones are accepted and never answered), as a server
  that does the work and answers late: a client that gives up on a commit may find
  it landed.

``restore`` lets connections through again (connections a blackhole held stay dead,
as after a real partition). Threads only: no event loop for the tests to share.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Literal, NamedTuple

import pytest
import sqlalchemy as sa

from kruntimes.journal.store import migrate

from tests.journal.history_journal import fresh_postgres_schema
Mode = Literal["up", "reset", "blackhole", "hold"]
Cut = Literal["reset", "blackhole", "hold"]
POSTGRES_ENV = "KRUNTIMES_TEST_POSTGRES_URL"


class DatabaseProxy:
    def __init__(self, target: tuple[str, int], *, host: str = "127.0.0.1") -> None:
        self.target = target
        self._listener = socket.create_server((host, 0))
        self.host, self.port = self._listener.getsockname()[:2]
        self._mode: Mode = "up"
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket | None]] = []  # (client side, server side)
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self.accepted = 0  # connections accepted, for tests that check a client reconnected
        self._acceptor = threading.Thread(target=self._accept, name="db-proxy-accept", daemon=True)

    # -- what a test calls ------------------------------------------------------------

    def start(self) -> DatabaseProxy:
        self._acceptor.start()
        return self

    @property
    def mode(self) -> Mode:
        return self._mode

    def url(self, database_url: str) -> str:
        """``database_url`` pointed at the proxy instead of the server."""
        return sa.make_url(database_url).set(host=self.host, port=self.port).render_as_string(hide_password=False)

    def cut(self, mode: Cut = "reset") -> None:
        with self._lock:
            self._mode = mode
            pairs = list(self._pairs)
            if mode == "reset":
                self._pairs.clear()
        if mode == "reset":
            for client, server in pairs:
                _reset(client)
                if server is not None:
                    _reset(server)

    @contextlib.contextmanager
    def cut_for(self, mode: Cut = "reset") -> Iterator[None]:
        """Cut inside the ``with``, restore after it (also when it fails)."""
        self.cut(mode)
        try:
            yield
        finally:
            self.restore()

    def restore(self) -> None:
        with self._lock:
            self._mode = "up"
            held = [pair for pair in self._pairs if pair[1] is None]  # accepted in a blackhole, never connected
            self._pairs = [pair for pair in self._pairs if pair[1] is not None]
        for client, _ in held:
            _reset(client)

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close alone does not, on Linux)
        self._listener.close()
        with self._lock:
            pairs, self._pairs = list(self._pairs), []
        for client, server in pairs:
            _reset(client)
            if server is not None:
                _reset(server)
        self._acceptor.join(5)
        for thread in self._threads:
            thread.join(5)

    # -- the proxy's threads ------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # the listener was closed: stop
            self.accepted += 1
            with self._lock:
                mode = self._mode
                if mode in ("blackhole", "hold"):
                    self._pairs.append((client, None))  # held, never answered
                    continue
            if mode == "reset":
                _reset(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                self._pairs.append((client, server))
            thread = threading.Thread(target=self._pump, args=(client, server), name="db-proxy-pump", daemon=True)
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        """Copy bytes both ways until either side closes; in a blackhole, hold them instead."""
        peers = {client: server, server: client}
        try:
            while not self._stopped.is_set():
                holding = self._mode == "hold"  # the client's bytes go on, the server's answers wait
                readable, _, _ = select.select([client] if holding else [client, server], [], [], 0.1)
                if self._mode == "blackhole":
                    self._stopped.wait(0.1)  # bytes wait in the kernel's buffers; nothing gets through
                    continue
                if self._mode == "hold" and server in readable:
                    continue  # the mode changed since the select: look again
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    peers[sock].sendall(data)
        except (OSError, ValueError):
            return  # reset by cut() or by a peer
        finally:
            with self._lock:
                if (client, server) in self._pairs:
                    self._pairs.remove((client, server))
            for sock in (client, server):
                with contextlib.suppress(OSError):
                    sock.close()


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), as a dead server or a firewall's reject does."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


@contextlib.contextmanager
def proxy_for(database_url: str) -> Iterator[DatabaseProxy]:
    """A started proxy in front of ``database_url``'s server, stopped afterwards."""
    url = sa.make_url(database_url)
    proxy = DatabaseProxy((url.host or "127.0.0.1", url.port or 5432)).start()
    try:
        yield proxy
    finally:
        proxy.stop()


class ProxiedJournal(NamedTuple):
    """A migrated PostgreSQL journal of the test's own: ``url`` goes through ``proxy``, ``direct`` does not."""

    url: str
    direct: str
    proxy: DatabaseProxy


@pytest.fixture
def proxied_journal() -> Iterator[ProxiedJournal]:
    """A fresh, migrated PostgreSQL journal schema behind a ``DatabaseProxy`` (needs KRUNTIMES_TEST_POSTGRES_URL)."""
    base = os.environ.get(POSTGRES_ENV)
    if not base:
        pytest.skip(f"needs PostgreSQL: set {POSTGRES_ENV} (CI does)")
    with fresh_postgres_schema(base) as direct, proxy_for(direct) as proxy:
        migrate.upgrade(direct)
        yield ProxiedJournal(proxy.url(direct), direct, proxy)
