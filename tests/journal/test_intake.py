"""Intake: the bounded buffer both journal writers take records through."""

from __future__ import annotations

import threading

import pytest

from kruntimes.journal import errors
from kruntimes.journal.write.intake import Intake

WAIT = 10.0


def test_bounded_by_unsettled_records_a_producer_waits_until_the_consumer_settles_some() -> None:
    intake = Intake(2, "block", bound_unsettled=True)
    intake.append("a")
    intake.append("b")
    with intake.lock:
        assert intake.take(10) == ["a", "b"]  # taken but not settled: still counted
    appended = threading.Event()
    producer = threading.Thread(target=lambda: (intake.append("c"), appended.set()))
    producer.start()
    assert not appended.wait(0.2), "taking records must not make room while they are unsettled"
    with intake.lock:
        intake.settle(1)
    assert appended.wait(WAIT)
    producer.join(WAIT)
    assert intake.flush(0.05) is False  # two appended records are not settled yet
    with intake.lock:
        intake.settle(3)
    assert intake.flush(WAIT)


def test_bounded_by_buffered_records_taking_them_makes_room() -> None:
    intake = Intake(2, "block", bound_unsettled=False)
    intake.extend(["a", "b"])
    appended = threading.Event()
    producer = threading.Thread(target=lambda: (intake.append("c"), appended.set()))
    producer.start()
    assert not appended.wait(0.2)
    with intake.lock:
        assert intake.take(1) == ["a"]
    assert appended.wait(WAIT)
    producer.join(WAIT)
    with intake.lock:
        assert intake.take(10) == ["b", "c"]


def test_the_drop_policy_counts_what_does_not_fit_and_keeps_the_order_of_the_rest() -> None:
    intake = Intake(3, "drop", bound_unsettled=True)
    assert intake.extend(list("abcde")) == 2
    assert intake.append("f") is False
    assert list(intake.buffer) == ["a", "b", "c"] and intake.dropped == 3 and intake.appended == 3


def test_settled_never_goes_down_and_stop_releases_a_blocked_producer_with_an_error() -> None:
    intake = Intake(1, "block", bound_unsettled=True)
    intake.append("a")
    with intake.lock:
        intake.settle(1)
        intake.settle(0)
    assert intake.settled == 1
    intake.append("b")
    failed: list[BaseException] = []

    def produce() -> None:
        try:
            intake.append("c")
        except errors.JournalError as exc:
            failed.append(exc)

    producer = threading.Thread(target=produce)
    producer.start()
    intake.stop()
    producer.join(WAIT)
    assert failed and "closed" in str(failed[0])
    with pytest.raises(errors.JournalError):
        intake.append("d")


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        Intake(0, "block", bound_unsettled=True)
    with pytest.raises(ValueError):
        Intake(1, "maybe", bound_unsettled=True)  # type: ignore[arg-type]


def test_a_sealing_consumer_is_handed_the_buffer_every_seal_at_records_appended_or_extended() -> None:
    sealed: list[list[str]] = []
    intake: Intake

    def seal() -> None:  # called with the lock held, like ProcessJournalWriter._seal
        assert intake.lock.locked()
        sealed.append(intake.take(100))

    intake = Intake(100, "block", bound_unsettled=True, seal=seal, seal_at=3)
    for item in "abcde":
        intake.append(item)
    assert sealed == [["a", "b", "c"]]
    assert list(intake.buffer) == ["d", "e"]
    intake.extend(["f", "g"])
    assert sealed == [["a", "b", "c"], ["d", "e", "f", "g"]]
    assert intake.appended == 7 and intake.settled == 0  # sealing is not settling
