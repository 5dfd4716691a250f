"""A damaged or tampered journal stops replay with an error naming the LSN and what is wrong.

Never a silently wrong replay: each case below edits a journal the real scheduler
wrote (as a tamperer would: with a matching SHA-256, unless the case is about the
hash) and requires the specific error type, the LSN, and words that say what is wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from kruntimes.journal.store.backends import Journal
from replay import errors, source, verify
from tests.replay import journals


@pytest.fixture
def written(journal_url: str, tmp_path: Path) -> journals.Written:
    return journals.scripted(journal_url, tmp_path, checkpoint_every=10)


def _verify(url: str, selection: source.Selection = source.Selection()) -> verify.VerifyReport:
    journal = Journal.open(url)
    try:
        report = verify.verify(journal, selection)
    finally:
        journal.close()
    report.raise_for_problems()  # the first problem, by epoch and LSN
    return report


def _after(url: str, kind: str, lsn: int) -> int:
    return next(n for n in journals.lsns_of(url, kind) if n > lsn)


def test_the_untouched_journal_verifies(written: journals.Written) -> None:
    assert _verify(written.url).ok


def test_a_missing_record_range_is_named_by_its_lsns(written: journals.Written) -> None:
    url = written.url
    first_checkpoint = journals.lsns_of(url, "checkpoint")[0]
    journals.delete_lsns(url, first_checkpoint + 3, first_checkpoint + 6)
    with pytest.raises(errors.RecordGap) as caught:
        _verify(url)
    assert caught.value.lsn == first_checkpoint + 3 and caught.value.last == first_checkpoint + 6
    assert f"LSNs {first_checkpoint + 3}..{first_checkpoint + 6} (4 records) not in the journal" in str(caught.value)


def test_a_missing_record_right_before_the_cycle_is_found_too(written: journals.Written) -> None:
    url = written.url
    cycle = journals.lsns_of(url, "cycle")[-1]
    journals.delete_lsns(url, cycle - 1, cycle - 1)
    with pytest.raises(errors.RecordGap, match=f"LSN {cycle - 1} not in the journal"):
        _verify(url, source.Selection(lsns=(cycle,)))


def test_a_checkpoint_that_disagrees_with_the_records_before_it_is_named_with_the_object(
        written: journals.Written) -> None:
    url = written.url
    checkpoint = journals.lsns_of(url, "checkpoint")[2]

    def more_capacity(payload: dict[str, Any]) -> None:
        payload["pods"][0]["capacity"] = [["runs", 99]]

    journals.rewrite(url, checkpoint, more_capacity)
    pod = journals.payload_of(url, checkpoint)["pods"][0]
    with pytest.raises(errors.CheckpointMismatch) as caught:
        _verify(url)
    assert caught.value.lsn == checkpoint
    assert caught.value.differences == [
        f"pod {pod['namespace']}/{pod['name']}: capacity is [['runs', 99]] in the checkpoint, "
        f"{[list(c) for c in _capacity_before(url, checkpoint, pod['name'])]!r} rebuilt"]


def _capacity_before(url: str, checkpoint: int, name: str) -> list[Any]:
    earlier = max(c for c in journals.lsns_of(url, "checkpoint") if c < checkpoint)
    return next(p["capacity"] for p in journals.payload_of(url, earlier)["pods"] if p["name"] == name)


def test_a_checkpoint_missing_a_run_or_holding_an_extra_assumption_is_named(written: journals.Written) -> None:
    url = written.url
    checkpoint = journals.lsns_of(url, "checkpoint")[3]
    removed: list[str] = []

    def drop_a_run(payload: dict[str, Any]) -> None:
        removed.append(f"{payload['runs'][0]['namespace']}/{payload['runs'][0]['name']}")
        del payload["runs"][0]

    journals.rewrite(url, checkpoint, drop_a_run)
    with pytest.raises(errors.CheckpointMismatch,
                       match=f"LSN {checkpoint}.*Run {removed[0]} is in the rebuilt state but not in the checkpoint"):
        _verify(url)


@pytest.mark.parametrize("kind", ["mutation", "cycle", "checkpoint"])
def test_a_record_with_an_unknown_schema_version_is_refused_by_lsn(written: journals.Written, kind: str) -> None:
    url = written.url
    lsn = journals.lsns_of(url, kind)[-2]
    journals.set_schema_version(url, lsn, 2)
    with pytest.raises(errors.UnsupportedSchema) as caught:
        _verify(url)
    assert caught.value.lsn == lsn
    assert caught.value.epoch == written.incarnation
    assert f"journal epoch {written.incarnation} LSN {lsn}: unknown schema version: {kind} record has schema_version 2; this replay reads 1" \
        in str(caught.value)


def test_a_payload_edited_without_its_hash_is_corrupt(written: journals.Written) -> None:
    url = written.url
    last_cycle = journals.lsns_of(url, "cycle")[-1]
    lsn = [n for n in journals.lsns_of(url, "mutation") if n < last_cycle][-1]
    journals.rewrite(url, lsn, lambda p: p.update(resource_version="edited"), rehash=False)
    with pytest.raises(errors.CorruptRecord, match=f"LSN {lsn}: corrupt record: .*does not match its SHA-256"):
        _verify(url)


Tamper = Callable[[dict[str, Any]], None]


def _first_drop(url: str) -> int:
    return journals.lsns_of(url, "drop")[0]


@pytest.mark.parametrize("kind, tamper, words", [
    ("drop", lambda p: p.update(why="terminal"), "with other content"),
    ("reserve", lambda p: p["assumption"].update(pod_name="stale"), "on pod stale cannot succeed"),
    ("reserve", lambda p: p["assumption"].update(pod_name="nowhere"), "the pod is not there"),
    ("release", lambda p: p.update(run_uid="someone-else"), "which the rebuilt state does not hold"),
], ids=["a drop for another reason than the hand-off rule gives", "a reserve onto a pod the Run cannot fit",
        "a reserve onto a pod that does not exist", "a release of an assumption nobody holds"])
def test_a_record_the_rebuilt_state_cannot_have_produced_is_named(
        written: journals.Written, kind: str, tamper: Tamper, words: str) -> None:
    url = written.url
    lsns = journals.lsns_of(url, kind)
    if not lsns:
        pytest.skip(f"the scripted history has no {kind} record")
    lsn = lsns[0]
    journals.rewrite(url, lsn, tamper)
    with pytest.raises(errors.InconsistentHistory) as caught:
        _verify(url)
    assert caught.value.lsn == lsn and words in str(caught.value)


def test_a_forged_drop_the_cache_never_derives_is_named(written: journals.Written) -> None:
    # Turn a cycle's bind record into a drop: same LSN, plausible content, but nothing produces it.
    url = written.url
    bind = journals.lsns_of(url, "bind")[0]
    from kruntimes import canonical
    import hashlib
    import sqlalchemy as sa

    payload = {"namespace": "ns", "run_uid": "uid-ns-r00", "why": "observed"}
    text = canonical.text(payload)
    journals._rows(url, sa.update(journals.T).where(journals.T.c.lsn == bind).values(
        kind="drop", payload=text, payload_sha256=hashlib.sha256(text.encode()).hexdigest()))
    journals.reseal(url, written.incarnation)  # a consistent chain: only replay can tell
    with pytest.raises(errors.InconsistentHistory, match=f"LSN {bind}: .*drop record here that applying the records "
                                                         "around it does not produce"):
        _verify(url)


def test_a_cycle_whose_snapshot_lsn_falls_inside_one_change_is_refused(written: journals.Written) -> None:
    # A mutation followed by the drop it causes is one change: no cycle can have seen the state between.
    url = written.url
    drop = _first_drop(url)
    assert journals.kind_of(url, drop - 1) == "mutation"
    cycle = _after(url, "cycle", drop)
    journals.rewrite(url, cycle, lambda p: p.update(snapshot_lsn=drop - 1))
    with pytest.raises(errors.InconsistentHistory, match=f"LSN {cycle}: .*snapshot LSN {drop - 1} falls inside one "
                                                         "change"):
        _verify(url)


def test_a_deletion_of_a_pod_the_state_does_not_hold_is_named(written: journals.Written) -> None:
    url = written.url
    lsn = next(n for n in journals.lsns_of(url, "mutation")
               if journals.payload_of(url, n)["kind"] == "Pod" and n > journals.lsns_of(url, "checkpoint")[0])

    def delete_a_ghost(p: dict[str, Any]) -> None:
        p.update(event="DELETED", name="ghost")
        p["object"]["name"] = "ghost"

    journals.rewrite(url, lsn, delete_a_ghost)
    with pytest.raises(errors.InconsistentHistory, match=f"LSN {lsn}: .*deletes pod ns/ghost"):
        _verify(url)


def test_a_journal_without_its_incarnation_record_cannot_say_which_configuration_ran(
        written: journals.Written) -> None:
    url = written.url
    incarnation = journals.lsns_of(url, "incarnation")[0]
    journals.delete_lsns(url, incarnation, incarnation)
    with pytest.raises(errors.MissingStart, match=f"epoch {written.incarnation} LSN {incarnation}: missing start"):
        _verify(url)
