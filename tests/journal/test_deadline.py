"""Deadline: each call answers within the bound or is given up on, on one long-lived thread.

The writer's database calls run on a thread of the ``Deadline``'s (SPEC §5 "Availability"):
not one started per call, which cost the writer process ~8% of its CPU, but one that
takes the calls one after another. What the bound means must not change with that: a
late call fails with ``JournalTimeout``, later calls fail at once until it returns, and
then calls go on; ``close`` ends the thread (the autouse fixture fails a test that
leaves one running).
"""

from __future__ import annotations

import threading
import time

import pytest

from kruntimes.journal import errors
from kruntimes.journal.store import deadline


def test_calls_return_their_values_and_raise_their_errors_on_one_thread_that_close_ends() -> None:
    bound = deadline.Deadline(None, 5.0)
    threads = {bound.call("read", threading.get_ident) for _ in range(3)}
    assert len(threads) == 1 and threading.get_ident() not in threads
    assert bound.call("write", lambda a, *, b: a + b, 1, b=2) == 3
    with pytest.raises(KeyError, match="missing"):
        bound.call("read", {}.__getitem__, "missing")
    bound.close()
    assert [t for t in threading.enumerate() if t.name == "kruntimes-journal-call"] == []


def test_a_late_call_is_given_up_on_and_later_calls_fail_at_once_until_it_returns() -> None:
    bound = deadline.Deadline(None, 0.05)
    release = threading.Event()
    with pytest.raises(errors.JournalTimeout, match="did not answer a write within"):
        bound.call("write", release.wait, 10.0)
    assert bound.timeouts == 1
    with pytest.raises(errors.JournalTimeout, match="not yet answered a call given up on"):
        bound.call("write", lambda: "never run")
    release.set()
    for _ in range(100):  # the stuck call returns on its own
        try:
            assert bound.call("write", lambda: "after") == "after"
            break
        except errors.JournalTimeout:
            time.sleep(0.01)
    else:
        pytest.fail("calls did not go on once the call given up on returned")
    assert bound.timeouts == 1
    bound.close()


def test_close_waits_for_a_stuck_call_bounded_and_ends_the_thread_once_it_returns() -> None:
    bound = deadline.Deadline(None, 0.05)
    release = threading.Event()
    with pytest.raises(errors.JournalTimeout):
        bound.call("write", release.wait, 10.0)
    threading.Timer(0.1, release.set).start()
    bound.close(timeout=5.0)
    assert [t for t in threading.enumerate() if t.name == "kruntimes-journal-call" and t.is_alive()] == []
