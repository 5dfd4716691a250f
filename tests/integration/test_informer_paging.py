"""The informer's paged list (``limit``/``continue``), against a server that pages as the API server does.

"API Concepts", retrieving large results sets in chunks: each page but the last carries
a ``continue`` token; a token whose resourceVersion was compacted away answers 410 Gone
(Expired), and the client must start the list again. The informer must deliver every
object exactly once either way. Needs the emulator (it compacts the history on cue).
"""

from __future__ import annotations

import threading
from typing import Any

from kubernetes.client import ApiClient

from kruntimes.cluster import sources
from kruntimes.cluster.backoff import Backoff
from kruntimes.cluster.informer import Informer
from tests.emulator.server import Emulator
from tests.integration.cluster import Cluster


class Delivered:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.upserts: list[str] = []

    def upsert(self, obj: dict[str, Any], event: str) -> None:
        with self.lock:
            self.upserts.append(obj["metadata"]["name"])

    def delete(self, namespace: str, name: str) -> None:
        raise AssertionError(f"nothing was deleted, yet {name} was delivered as deleted")


def test_a_list_larger_than_a_page_is_read_page_by_page_and_delivered_once(
        emulator: Emulator, kube_api: ApiClient, cluster_api: Cluster) -> None:
    for index in range(5):
        cluster_api.add_run(f"r{index}")
    delivered = Delivered()
    informer = Informer(sources.runs(kube_api, cluster_api.namespace), delivered, page_size=2).start()
    try:
        assert informer.wait_synced(30)
    finally:
        informer.stop()
    assert sorted(delivered.upserts) == [f"r{i}" for i in range(5)]
    assert emulator.requests[("list", "runs", None)] == 3


def test_an_expired_continue_token_starts_the_list_again_and_loses_nothing(
        emulator: Emulator, kube_api: ApiClient, cluster_api: Cluster) -> None:
    for index in range(3):
        cluster_api.add_run(f"r{index}")
    plain = sources.runs(kube_api, cluster_api.namespace)
    compacted = threading.Event()

    def call(**kwargs: Any) -> Any:
        if kwargs.get("_continue") and not compacted.is_set():  # between the first and second page
            compacted.set()
            cluster_api.add_run("late")
            emulator.compact()
        return plain.call(**kwargs)
    delivered = Delivered()
    informer = Informer(sources.Source("Run", call), delivered, page_size=2, backoff=Backoff(0.01, 0.05)).start()
    try:
        assert informer.wait_synced(30)
    finally:
        informer.stop()
    assert sorted(delivered.upserts) == ["late", "r0", "r1", "r2"]
    assert informer.stats.errors == 1 and informer.stats.lists == 1
