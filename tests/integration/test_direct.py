"""The binder's lean write path (`kruntimes.cluster.direct`) keeps every rule the client path keeps.

Each binder-level case runs both ways - through the official client and directly -
and must give the same outcome: 504 ambiguous, 500 an error, never connected an
error, a timeout or a dropped connection ambiguous and sent exactly once, a 409 a
conflict, a 429's Retry-After read. Then what only the direct path has: a kept-alive
connection the server closed while idle is replaced before writing (the write is
neither lost nor ambiguous), and the bearer token is read at most once a second and
again after a 401. The server's hit count proves what was sent.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any, Callable

import kubernetes.client
import pytest
from kubernetes.client import ApiClient

from kruntimes.cluster import client as cluster_client
from kruntimes.cluster import direct, errors
from kruntimes.cluster.binder.kube import KubernetesBinder
from kruntimes.cluster.throttling import Throttling
from kruntimes.scheduler import status as st
from kruntimes.scheduler.projection import RunInfo
from tests.emulator.manifests import GROUP, VERSION, namespace, run
from tests.emulator.server import Emulator

NS = "ns"
WAYS = ("client", "direct")


@pytest.fixture(autouse=True)
def namespace_exists(emulator: Emulator) -> None:
    kubernetes.client.CoreV1Api(emulator.api_client()).create_namespace(namespace(NS))


def binder_for(configuration: kubernetes.client.Configuration, way: str, timeout: float = 30.0) -> KubernetesBinder:
    api = ApiClient(cluster_client.configure(configuration))
    sender = direct.Direct(configuration, api.default_headers) if way == "direct" else None
    return KubernetesBinder(api, timeout=timeout, throttling=Throttling(), sender=sender)


def created(emulator: Emulator, name: str = "r") -> RunInfo:
    obj = kubernetes.client.CustomObjectsApi(emulator.api_client()).create_namespaced_custom_object(
        GROUP, VERSION, NS, "runs", run(name))
    return RunInfo(namespace=NS, name=name, uid=obj["metadata"]["uid"],
                   resource_version=obj["metadata"]["resourceVersion"])


def status_puts(name: str = "r") -> Callable[[str, str], bool]:
    return lambda m, path: m == "PUT" and path.endswith(f"/runs/{name}/status")


def stored_phase(emulator: Emulator, name: str = "r") -> str | None:
    obj: Any = kubernetes.client.CustomObjectsApi(emulator.api_client()).get_namespaced_custom_object(
        GROUP, VERSION, NS, "runs", name)
    return (obj.get("status") or {}).get("phase")


@pytest.mark.parametrize("way", WAYS)
def test_a_write_lands_and_a_stale_one_is_a_conflict(emulator: Emulator, way: str) -> None:
    binder = binder_for(emulator.api_client().configuration, way)
    info = created(emulator)
    binder.update_status(info, {"phase": "Scheduled"})
    assert stored_phase(emulator) == "Scheduled"
    with pytest.raises(st.Conflict):  # the same resourceVersion again: the Run changed since
        binder.update_status(info, {"phase": "Pending"})
    assert (binder.writes, binder.conflicts) == (1, 1)


@pytest.mark.parametrize("way", WAYS)
def test_504_is_ambiguous_500_is_an_error_and_429_hands_back_its_retry_after(emulator: Emulator, way: str) -> None:
    binder = binder_for(emulator.api_client().configuration, way)
    info = created(emulator)
    emulator.answer(504, status_puts())
    with pytest.raises(st.Ambiguous):
        binder.update_status(info, {"phase": "Scheduled"})
    emulator.answer(500, status_puts())
    with pytest.raises(st.ApiError) as caught:
        binder.update_status(info, {"phase": "Scheduled"})
    assert not isinstance(caught.value, st.Ambiguous) and caught.value.code == 500  # type: ignore[attr-defined]
    emulator.throttle(status_puts(), retry_after=7)
    with pytest.raises(errors.ApiError) as throttled:
        binder.update_status(info, {"phase": "Scheduled"})
    assert (throttled.value.code, throttled.value.retry_after) == (429, 7)
    assert emulator.hits_of(status_puts()) == 3 and stored_phase(emulator) is None


@pytest.mark.parametrize("way", WAYS)
def test_a_write_that_times_out_or_whose_connection_drops_is_ambiguous_and_sent_once(
        emulator: Emulator, way: str) -> None:
    binder = binder_for(emulator.api_client().configuration, way, timeout=0.3)
    info = created(emulator)
    emulator.delay(1.0, status_puts())
    with pytest.raises(st.Ambiguous):
        binder.update_status(info, {"phase": "Scheduled"})
    emulator.drop(status_puts())
    with pytest.raises(st.Ambiguous):
        binder.update_status(info, {"phase": "Scheduled"})
    time.sleep(1.0)  # the held write lands
    assert emulator.hits_of(status_puts()) == 2 and binder.ambiguous == 2


@pytest.mark.parametrize("way", WAYS)
def test_a_write_that_never_connected_is_an_error_not_ambiguous(way: str) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    configuration = kubernetes.client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    binder = binder_for(configuration, way)
    with pytest.raises(st.ApiError) as caught:
        binder.update_status(RunInfo(namespace=NS, name="r", uid="u", resource_version="1"), {"phase": "Scheduled"})
    assert not isinstance(caught.value, st.Ambiguous) and binder.failures == 1


def test_writes_reuse_one_kept_alive_connection(emulator: Emulator) -> None:
    info = created(emulator)
    sender = direct.Direct(emulator.api_client().configuration, {"User-Agent": "test"})
    target = direct.path("apis", GROUP, VERSION, "namespaces", NS, "runs", "r", "status")
    version = info.resource_version
    for phase in ("Pending", "Scheduled", "Pending", "Scheduled"):
        body = {"metadata": {"name": "r", "namespace": NS, "resourceVersion": version}, "status": {"phase": phase}}
        answer = sender.request("PUT", target, body, 5.0)
        assert answer.status == 200
        version = json.loads(answer.body)["metadata"]["resourceVersion"]
    assert len(sender._idle) == 1 and stored_phase(emulator) == "Scheduled"  # one connection served all four
    sender.close()


@pytest.mark.parametrize("setting", ["keep_alive", "socket_options", "neither"])
def test_the_connection_gets_the_configuration_s_socket_options_as_the_client_s_pool_does(
        emulator: Emulator, setting: str) -> None:
    info = created(emulator)
    configuration = emulator.api_client().configuration
    if setting == "keep_alive":
        configuration.keep_alive = True  # the client's TCP keep-alive probes
    elif setting == "socket_options":
        configuration.keep_alive = True  # options given win over keep_alive, as in the client
        configuration.socket_options = [(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 7)]
    sender = direct.Direct(configuration, {"User-Agent": "test"})
    body = {"metadata": {"name": "r", "namespace": NS, "resourceVersion": info.resource_version},
            "status": {"phase": "Pending"}}
    answer = sender.request("PUT", direct.path("apis", GROUP, VERSION, "namespaces", NS, "runs", "r", "status"),
                            body, 5.0)
    assert answer.status == 200
    (conn,) = sender._idle
    seen = (conn.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL))
    sender.close()
    with socket.socket() as plain:
        system = plain.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL)
    assert seen == {"keep_alive": (1, 15), "socket_options": (0, 7), "neither": (0, system)}[setting]


class OneAnswerServer:
    """Answers one request per connection with a keep-alive 200, then closes the connection after `linger` s."""

    def __init__(self, linger: float) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)  # accept() looks at `stopping` this often: closing a socket wakes no accept
        self.stopping = threading.Event()
        self.requests = 0
        self.linger = linger
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(5)
        self.listener.close()

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(5.0)
            data = chunk = b"-"
            while chunk and b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                data += chunk
            if not chunk:  # the client left without a whole request
                conn.close()
                continue
            self.requests += 1
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
            time.sleep(self.linger)
            conn.close()


def test_a_kept_connection_the_server_closed_while_idle_is_replaced_before_writing() -> None:
    server = OneAnswerServer(linger=0.0)
    configuration = kubernetes.client.Configuration()
    configuration.host = server.host
    sender = direct.Direct(configuration, {})
    try:
        assert sender.request("PUT", "/a", {}, 5.0).status == 200
        time.sleep(0.2)  # the server closed the kept connection meanwhile
        assert sender.request("PUT", "/a", {}, 5.0).status == 200  # on a new connection: not lost, not ambiguous
        assert server.requests == 2
    finally:
        sender.close()
        server.close()


def test_the_bearer_token_is_read_at_most_once_a_second_and_again_after_a_401(emulator: Emulator) -> None:
    configuration = kubernetes.client.Configuration()
    configuration.host = emulator.host
    configuration.api_key = {"BearerToken": "t"}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    refreshed: list[float] = []
    configuration.refresh_api_key_hook = lambda c: refreshed.append(time.monotonic())
    sender = direct.Direct(configuration, {})
    target = direct.path("apis", GROUP, VERSION, "namespaces", NS, "runs", "missing", "status")
    for _ in range(20):
        sender.request("PUT", target, {}, 5.0)
    assert len(refreshed) == 1
    emulator.answer(401, lambda m, path: m == "PUT")
    assert sender.request("PUT", target, {}, 5.0).status == 401
    sender.request("PUT", target, {}, 5.0)
    assert len(refreshed) == 2  # the 401 made the next request read the token again


def test_a_configuration_with_a_proxy_or_another_certificate_name_keeps_the_client() -> None:
    configuration = kubernetes.client.Configuration()
    configuration.host = "https://api.example:6443"
    assert direct.supports(configuration)
    configuration.assert_hostname = "other.example"
    assert not direct.supports(configuration)
    configuration.assert_hostname = None
    configuration.proxy = "http://proxy.example:3128"
    assert not direct.supports(configuration)
    with pytest.raises(ValueError, match="use the client"):
        direct.Direct(configuration, {})
