"""MemoryApi, the in-memory Run status API the loop binds against: the contract the core relies on."""

from __future__ import annotations

import threading
import time

import pytest

from kruntimes.memory.api import MemoryApi
from kruntimes.scheduler import status as st
from tests.builders import NOW, run


def test_a_status_write_is_guarded_by_the_resource_version_it_was_read_at() -> None:
    api = MemoryApi()
    created = api.create(run("r"))
    api.update_status(created, st.pending_status(None, "waiting", NOW))
    with pytest.raises(st.Conflict):
        api.update_status(created, st.scheduled_status(None, "p", "pu", NOW))
    assert api.get(("ns", "r")).phase == "Pending"


def test_a_write_for_a_run_that_does_not_exist_is_a_conflict() -> None:
    with pytest.raises(st.Conflict):
        MemoryApi().update_status(run("ghost"), st.pending_status(None, "m", NOW))


def test_an_injected_conflict_moves_the_version_on_and_delivers_it() -> None:
    api = MemoryApi(conflict_rate=1.0)
    seen = []
    api.watchers.append(seen.append)
    created = api.create(run("r"))
    with pytest.raises(st.Conflict):
        api.update_status(created, st.scheduled_status(None, "p", "pu", NOW))
    current = api.get(("ns", "r"))
    assert current.phase == "Pending" and current.resource_version != created.resource_version
    assert [r.resource_version for r in seen] == [created.resource_version, current.resource_version]


def test_finish_records_the_terminal_status_through_the_shared_helper() -> None:
    api = MemoryApi()
    created = api.create(run("r"))
    api.update_status(created, st.scheduled_status(None, "p", "pu", NOW))
    done = api.finish(("ns", "r"), "Succeeded", NOW)
    assert (done.phase, done.pod_name, done.pod_uid) == ("Succeeded", "p", "pu")
    status = api.status(("ns", "r"))
    assert status["completionTime"] == "2026-01-01T00:00:00Z"
    assert status["assignment"] == {"podName": "p", "podUID": "pu"}
    assert not done.active


def test_delayed_delivery_keeps_the_order_of_writes_and_close_joins_the_thread() -> None:
    api = MemoryApi(delay=(0.0, 0.002), seed=3)
    seen = []
    api.watchers.append(seen.append)
    r = api.create(run("r"))
    for i in range(20):
        api.update_status(r, st.pending_status(None, f"m{i}", NOW))
        r = api.get(("ns", "r"))
    deadline = time.monotonic() + 5
    while not api.idle() and time.monotonic() < deadline:
        time.sleep(0.001)
    api.close()
    versions = [int(x.resource_version) for x in seen]
    assert versions == sorted(versions) and len(versions) == 21
    assert not [t for t in threading.enumerate() if t.name == "memory-api-watch"]


def test_watchers_see_the_versions_of_one_run_in_write_order_and_a_slow_watcher_holds_up_no_writer() -> None:
    api = MemoryApi()
    seen: list[tuple[str, str]] = []
    writer_delivering = threading.Event()
    finished = threading.Event()
    waits: list[bool] = []

    def slow_first_delivery(r) -> None:
        # The binding worker is preempted right after its write, before its event is out.
        if r.phase == "Scheduled" and threading.current_thread().name == "binder":
            writer_delivering.set()
            waits.append(finished.wait(5))

    api.watchers += [slow_first_delivery, lambda r: seen.append((r.phase, r.resource_version))]
    created = api.create(run("r"))
    binder = threading.Thread(target=api.update_status, name="binder",
                              args=(created, st.scheduled_status(None, "p", "pu", NOW)))
    binder.start()
    assert writer_delivering.wait(5)
    api.finish(("ns", "r"), "Succeeded", NOW)  # runtimed, on another thread, sees Scheduled and finishes
    finished.set()
    binder.join(5)
    assert waits == [True]  # runtimed's write went through while the binder's event was still out
    versions = [int(v) for _, v in seen]
    assert versions == sorted(versions) and [p for p, _ in seen] == ["Pending", "Scheduled", "Succeeded"], seen
