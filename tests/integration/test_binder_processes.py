"""Binder processes on the wire: deadlines kept, answers matched, a dead binder's writes ambiguous.

The scheduling loop hands its status writes to binder processes (`kruntimes.cluster.binder.processes`)
and settles their answers itself. These tests drive the binders directly against the
API emulator, then the whole scheduler with its binder killed mid-write.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, Callable, Iterator

import kubernetes.client
import pytest

from kruntimes.cluster import errors
from kruntimes.cluster.binder.processes import BinderProcesses
from kruntimes.cluster.runner import ClusterScheduler
from kruntimes.scheduler import status as st
from kruntimes.scheduler.projection import RunInfo
from kruntimes.scheduler.writes import NO_DEADLINE
from tests.emulator.faults import status_write
from tests.emulator.manifests import GROUP, VERSION, namespace, run
from tests.emulator.server import Emulator
from tests.integration.cluster import Cluster, wait_for

NS = "binders"
SCHEDULED = {"phase": "Scheduled", "assignment": {"podName": "p", "podUID": "pu"}}


class Answers:
    """Collects the answers of writes, in the order they arrive."""

    def __init__(self) -> None:
        self.got: list[tuple[str, BaseException | None]] = []
        self._lock = threading.Lock()

    def to(self, name: str) -> Callable[[BaseException | None], None]:
        def done(exc: BaseException | None) -> None:
            with self._lock:
                self.got.append((name, exc))
        return done

    def of(self, name: str) -> BaseException | None:
        return next(exc for n, exc in self.got if n == name)


@pytest.fixture
def binders(emulator: Emulator) -> Iterator[Callable[..., BinderProcesses]]:
    kubernetes.client.CoreV1Api(emulator.api_client()).create_namespace(namespace(NS))
    started: list[BinderProcesses] = []

    def start(**kwargs: Any) -> BinderProcesses:
        pool = BinderProcesses(emulator.api_client().configuration, timeout=10.0, **kwargs).start()
        started.append(pool)
        assert pool.wait_ready(60), "the binder process did not come up"
        return pool

    yield start
    for pool in started:
        pool.close()


def created(emulator: Emulator, name: str) -> RunInfo:
    obj = kubernetes.client.CustomObjectsApi(emulator.api_client()).create_namespaced_custom_object(
        GROUP, VERSION, NS, "runs", run(name))
    return RunInfo(namespace=NS, name=name, uid=obj["metadata"]["uid"],
                   resource_version=obj["metadata"]["resourceVersion"])


def phase(emulator: Emulator, name: str) -> str:
    obj = kubernetes.client.CustomObjectsApi(emulator.api_client()).get_namespaced_custom_object(
        GROUP, VERSION, NS, "runs", name)
    return str((obj.get("status") or {}).get("phase") or "Pending")


def test_a_write_whose_deadline_passes_while_it_waits_for_a_binder_is_never_sent(
        emulator: Emulator, binders: Callable[..., BinderProcesses]) -> None:
    pool = binders(concurrency=1)  # the second write waits behind the first
    slow, late = created(emulator, "slow"), created(emulator, "late")
    emulator.delay(1.0, status_write("slow"))
    answers = Answers()
    pool.write(slow, SCHEDULED, NO_DEADLINE, answers.to("slow"))
    pool.write(late, SCHEDULED, time.monotonic() + 0.3, answers.to("late"))
    wait_for(lambda: len(answers.got) == 2, what="both answers")
    assert isinstance(answers.of("late"), st.Late) and answers.of("slow") is None
    assert emulator.hits_of(status_write("late")) == 0 and phase(emulator, "late") == "Pending"
    assert (pool.refused, pool.writes, pool.sent["late"]) == (1, 1, 0)


def test_there_is_room_for_another_write_only_while_fewer_than_the_backlog_are_unanswered(
        emulator: Emulator, binders: Callable[..., BinderProcesses]) -> None:
    pool = binders(concurrency=1, backlog=2)
    first, second = created(emulator, "first"), created(emulator, "second")
    emulator.delay(1.0, status_write("first"))
    answers = Answers()
    assert pool.wait_for_room(0.0)
    pool.write(first, SCHEDULED, NO_DEADLINE, answers.to("first"))
    assert pool.wait_for_room(0.0)
    pool.write(second, SCHEDULED, NO_DEADLINE, answers.to("second"))
    assert not pool.wait_for_room(0.1)  # two unanswered: the loop would wait before planning more
    assert pool.wait_for_room(30.0)  # the first answer makes room
    wait_for(lambda: len(answers.got) == 2, what="both answers")
    assert answers.of("first") is None and answers.of("second") is None


def test_the_default_backlog_is_twice_what_the_binders_send_at_once(emulator: Emulator) -> None:
    pool = BinderProcesses(emulator.api_client().configuration, processes=2, concurrency=8)
    assert pool.backlog == 32
    with pytest.raises(ValueError, match="backlog"):
        BinderProcesses(emulator.api_client().configuration, backlog=0)


def test_a_write_whose_deadline_has_passed_is_refused_before_it_leaves_this_process(
        emulator: Emulator, binders: Callable[..., BinderProcesses]) -> None:
    pool = binders()
    pool.deadline = lambda: time.monotonic() - 1.0  # the fence closed: no lease
    with pytest.raises(errors.NotLeader):
        pool.update_status(created(emulator, "r"), SCHEDULED)
    assert emulator.hits_of(status_write()) == 0 and pool.refused == 1


def test_answers_that_come_back_out_of_order_reach_the_writes_they_answer(
        emulator: Emulator, binders: Callable[..., BinderProcesses]) -> None:
    pool = binders(concurrency=2)
    first, second = created(emulator, "first"), created(emulator, "second")
    stale = RunInfo(namespace=NS, name="second", uid=second.uid, resource_version="1")  # older than it is: 409
    emulator.delay(1.0, status_write("first"))
    answers = Answers()
    pool.write(first, SCHEDULED, NO_DEADLINE, answers.to("first"))
    pool.write(stale, SCHEDULED, NO_DEADLINE, answers.to("second"))
    wait_for(lambda: len(answers.got) == 2, what="both answers")
    assert [name for name, _ in answers.got] == ["second", "first"]
    assert isinstance(answers.of("second"), st.Conflict) and answers.of("first") is None
    assert phase(emulator, "first") == "Scheduled" and phase(emulator, "second") == "Pending"
    assert (pool.writes, pool.conflicts) == (1, 1)


def test_a_killed_binder_answers_its_unanswered_writes_as_ambiguous_and_another_takes_its_place(
        emulator: Emulator, binders: Callable[..., BinderProcesses]) -> None:
    pool = binders()
    held = created(emulator, "held")
    emulator.delay(1.0, status_write("held"))
    answers = Answers()
    pool.write(held, SCHEDULED, NO_DEADLINE, answers.to("held"))
    wait_for(lambda: emulator.hits_of(status_write("held")) == 1, what="the write on the wire")
    (killed,) = pool.pids
    os.kill(killed, signal.SIGKILL)
    wait_for(lambda: answers.got, what="the lost write answered")
    assert isinstance(answers.of("held"), st.Ambiguous) and pool.lost == 1 and pool.ambiguous == 1
    # Ambiguous indeed: the server still applies the write the dead binder sent.
    wait_for(lambda: phase(emulator, "held") == "Scheduled", what="the held write applied")
    assert pool.wait_ready(60) and pool.pids != [killed]
    pool.update_status(created(emulator, "after"), SCHEDULED)  # the replacement sends
    assert phase(emulator, "after") == "Scheduled"


def test_a_scheduler_whose_binder_dies_mid_bind_keeps_the_slot_until_the_run_is_observed(
        emulator: Emulator, cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    cluster_api.add_pod("python-0", runs=1)
    scheduler = start_scheduler()
    emulator.delay(3.0, status_write("a"))
    a = cluster_api.add_run("a")
    wait_for(lambda: emulator.hits_of(status_write("a")) == 1, what="a's bind on the wire")
    (killed,) = scheduler.binder.pids
    os.kill(killed, signal.SIGKILL)
    wait_for(lambda: scheduler.binder.lost == 1, what="the dead binder's write answered as lost")
    # The held write lands 3 s after it arrived: until a read or the watch shows it, a's
    # outcome is unknown and its assumption holds the slot.
    assert (cluster_api.namespace, a["metadata"]["uid"]) in scheduler.cache.assumed
    cluster_api.add_run("b")
    wait_for(lambda: cluster_api.pending_message("b"), what="b Pending")
    wait_for(lambda: cluster_api.placements() == {"a": "python-0"}, what="a placed")
    wait_for(lambda: scheduler.scheduler.queue.idle() and not scheduler.cache.assumed, what="all settled")
    assert cluster_api.overcommit() == 0
    assert cluster_api.pending_message("b") == "0/1 runtime pods available: 1 insufficient capacity (runs)"
    # Every send reached the server once: the lost one, and any deliberate re-send after a read.
    sends = emulator.hits_of(status_write("a"))
    assert sends == scheduler.binder.sent["a"] + 1 and scheduler.binder.pids != [killed]


def test_a_client_configuration_that_refreshes_its_credentials_is_refused_saying_to_pass_a_loader() -> None:
    # In-cluster and exec credentials refresh through a hook that only the process that
    # loaded them can run; a binder process copying it would send with a token that expires.
    configuration = kubernetes.client.Configuration()
    configuration.refresh_api_key_hook = lambda c: None
    with pytest.raises(ValueError, match="loader"):
        BinderProcesses(configuration)
