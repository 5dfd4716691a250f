"""Forged prunes (SPEC §5 Retention, amended 2026-12-04): a prune record is chained and keyed like every record,
and `verify` accepts only cuts a real prune can make, after any number of prunes.

Three epochs without cycles: `a` and `b` ended, `c` the newest and open, each with a
checkpoint every 10 records. Someone with write access (and our code, but not the
key) deletes records and writes a prune record for them, its link computed without the
key. Each case says what verify finds in a journal without a key ("plain"), in a keyed
journal verified with the key ("hmac"), and in a plain journal with every epoch's head
published before the tampering ("head"); docs/journal.md's tamper matrix is this
table. Both backends.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable

import pytest
import sqlalchemy as sa

from kruntimes.journal import chain, prune, prune_record, records
from kruntimes.journal.store import engines, schema
from kruntimes.journal.store.backends import Journal
from replay import errors, integrity, source, verify
from tests.replay import journals

T = schema.journal_records
E = schema.journal_epochs
KEY = chain.ChainKey(b"f" * 48)
AT = datetime(2026, 10, 1, tzinfo=timezone.utc)
STARTS = {"a": (1, AT), "b": (100, AT + timedelta(hours=1)), "c": (200, AT + timedelta(hours=2))}
COUNT = 40


def epoch(name: str, first: int, at: datetime, *, ended: bool) -> list[records.JournalRecord]:
    rows = [records.JournalRecord(name, first, at, "incarnation", {"version": "test", "config_hash": "c" * 64})]
    for i in range(1, COUNT):
        kind = "checkpoint" if i % 10 == 0 else "bind"
        payload = {"pods": [], "runs": [], "assumed": []} if kind == "checkpoint" else {
            "namespace": "ns", "run_uid": f"uid-{i}", "result": "ok"}
        rows.append(records.JournalRecord(name, first + i, at + timedelta(seconds=i), kind, payload))
    if ended:
        rows.append(records.JournalRecord(name, first + COUNT, at + timedelta(seconds=COUNT), "end",
                                          {"reason": "shutdown"}))
    return rows


@dataclass(frozen=True)
class Journal3:
    url: str
    key: chain.ChainKey | None
    heads: tuple[integrity.PublishedHead, ...]  # every epoch's head, as published before any tampering


def write(url: str, key: chain.ChainKey | None) -> Journal3:
    journal = Journal.open(url)
    try:
        for name, (first, at) in STARTS.items():
            journal.append_batch(epoch(name, first, at, ended=name != "c"), key=key)
        heads = tuple(integrity.PublishedHead(e.epoch, e.head_lsn, e.head_hash) for e in journal.epochs().values())
    finally:
        journal.close()
    return Journal3(url, key, heads)


def _verify(j: Journal3, *, key: chain.ChainKey | None = None,
            published: tuple[integrity.PublishedHead, ...] = ()) -> verify.VerifyReport:
    journal = Journal.open(j.url)
    try:
        return verify.verify(journal, source.Selection(), key=key, published=published)
    finally:
        journal.close()


def _row(url: str, name: str, lsn: int) -> tuple[datetime, str, str]:
    return journals._rows(url, sa.select(T.c.recorded_at, T.c.payload_sha256, T.c.chain_hash)
                          .where(T.c.incarnation == name, T.c.lsn == lsn))[0]


def _removed(url: str, name: str) -> dict[str, object]:
    """Delete an epoch whole, as a prune would, and say what a prune record says of it."""
    first, at = STARTS[name]
    head = journals._rows(url, sa.select(E.c.head_lsn, E.c.head_hash, E.c.end_reason).where(E.c.epoch == name))[0]
    last = journals._rows(url, sa.select(sa.func.max(T.c.recorded_at)).where(T.c.incarnation == name))[0][0]
    journals._rows(url, sa.delete(T).where(T.c.incarnation == name))
    journals._rows(url, sa.delete(E).where(E.c.epoch == name))
    return {"epoch": name, "first_lsn": first, "head_lsn": int(head[0]), "head_hash": head[1],
            "end_reason": head[2], "started_at": chain.timestamp_text(at), "last_at": chain.timestamp_text(last)}


def forge(url: str, *, cut: str | None = None, removed: tuple[str, ...] = (), before: datetime | None = None,
          removed_head_back: int = 0) -> None:
    """Delete what a prune would (a prefix of `cut` up to its second checkpoint; `removed` whole) and write a
    prune record for it with a link computed without the key - everything but the key is at hand."""
    gone = [_removed(url, name) for name in removed]
    for entry in gone[:1]:
        entry["head_lsn"] = int(str(entry["head_lsn"])) - removed_head_back
    payload: dict[str, object] = {
        "by": "mallory@db", "deleted": 0, "removed_epochs": gone, "newest": "c",
        "epoch": None, "checkpoint_lsn": None, "checkpoint_sha256": None, "checkpoint_link": None,
        "link_before": None, "incarnation_lsns": []}
    if cut is not None:
        first = STARTS[cut][0]
        checkpoint = first + 20
        at, sha, link = _row(url, cut, checkpoint)
        link_before = _row(url, cut, checkpoint - 1)[2]
        journals._rows(url, sa.delete(T).where(T.c.incarnation == cut, T.c.lsn > first, T.c.lsn < checkpoint))
        before = before or at + timedelta(seconds=1)
        payload.update(epoch=cut, checkpoint_lsn=checkpoint, checkpoint_sha256=sha, checkpoint_link=link,
                       link_before=link_before, incarnation_lsns=[first])
    assert before is not None
    payload.update(before=chain.timestamp_text(before), pruned_at=chain.timestamp_text(AT + timedelta(days=1)))
    journal = Journal.open(url)
    try:
        with journal.engine.begin() as conn:
            prune_record.append(conn, payload, AT + timedelta(days=1), None)
    finally:
        journal.close()


CAUGHT, PASSES = True, False
Forgery = Callable[[str], None]

#: case -> (the forgery, caught plain, caught with the key (hmac), caught with the published heads (head))
CASES: dict[str, tuple[Forgery, bool, bool, bool]] = {
    "the newest epoch's prefix deleted while older epochs stay whole": (
        lambda url: forge(url, cut="c"), CAUGHT, CAUGHT, CAUGHT),
    "an older epoch's prefix deleted while the epoch before it stays whole": (
        lambda url: forge(url, cut="b"), CAUGHT, CAUGHT, CAUGHT),
    "the oldest epoch's prefix deleted (no cycle needed it, it was not the newest)": (
        lambda url: forge(url, cut="a"), CAUGHT, CAUGHT, CAUGHT),
    "a middle epoch deleted whole while an older one stays whole": (
        lambda url: forge(url, removed=("b",), before=STARTS["b"][1] + timedelta(minutes=5)),
        CAUGHT, CAUGHT, CAUGHT),
    "an epoch deleted whole that had records after the cut-off": (
        lambda url: forge(url, removed=("a", "b"), before=STARTS["b"][1] + timedelta(seconds=5)),
        CAUGHT, CAUGHT, CAUGHT),
    "the oldest epoch deleted whole, its true head listed": (
        lambda url: forge(url, removed=("a",), before=STARTS["a"][1] + timedelta(minutes=5)),
        PASSES, CAUGHT, PASSES),
    "the oldest epoch deleted whole, listed with a head behind the published one": (
        lambda url: forge(url, removed=("a",), before=STARTS["a"][1] + timedelta(minutes=5), removed_head_back=5),
        PASSES, CAUGHT, CAUGHT),
}


@pytest.mark.parametrize("mode", ["plain", "hmac", "head"])
@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_a_forged_prune_is_caught_as_the_tamper_matrix_says(journal_url: str, case: tuple[Forgery, bool, bool, bool],
                                                            mode: str) -> None:
    forgery, plain, hmac, head = case
    j = write(journal_url, KEY if mode == "hmac" else None)
    assert _verify(j, key=j.key).ok
    forgery(j.url)
    report = _verify(j, key=j.key, published=j.heads if mode == "head" else ())
    caught = {"plain": plain, "hmac": hmac, "head": head}[mode]
    assert (not report.ok) == caught, [str(p) for p in report.problems]


def test_a_real_prune_of_a_keyed_journal_is_keyed_and_verifies_with_the_key_only(journal_url: str) -> None:
    j = write(journal_url, KEY)
    journal = Journal.open(journal_url)
    try:
        for dry in (True, False):  # refused before anything is shown or deleted
            with pytest.raises(prune_record.PruneKeyError, match="give its key"):
                prune.prune(journal, STARTS["c"][1] + timedelta(seconds=25), dry_run=dry)
        with pytest.raises(prune_record.PruneKeyError, match="the key given is key_id"):
            prune.prune(journal, STARTS["c"][1] + timedelta(seconds=25), key=chain.ChainKey(b"x" * 48))
        report = prune.prune(journal, STARTS["c"][1] + timedelta(seconds=25), key=KEY)
    finally:
        journal.close()
    assert report.removed_epochs == ("a", "b") and (report.epoch, report.checkpoint_lsn) == ("c", 220)
    assert _verify(j, key=KEY).ok
    assert _verify(j, key=KEY, published=j.heads).ok  # the heads of the removed epochs are accounted for
    [problem] = [p for p in _verify(j).problems if p.epoch == "prune-1"]
    assert isinstance(problem, errors.KeyMismatch) and "no key was given" in str(problem)
    journals.rewrite(journal_url, prune.PRUNE_LSN, lambda p: p.update(by="someone else"))  # relinked, no key
    [problem] = [p for p in _verify(j, key=KEY).problems if p.epoch == "prune-1"]
    assert isinstance(problem, errors.BrokenLink)


def test_two_prunes_that_cut_different_epochs_are_both_honoured(journal_url: str) -> None:
    # Two replicas' terms overlap: `a` ends after `b` began, so the second prune cuts `b` and keeps `a`.
    journal = Journal.open(journal_url)
    try:
        journal.append_batch(epoch("a", 1, AT, ended=True))
        first = prune.prune_to(journal, 11, epoch="a", now=AT + timedelta(seconds=15))
        journal.append_batch(epoch("b", 100, AT + timedelta(seconds=20), ended=False))
        second = prune.prune_to(journal, 120, epoch="b", now=AT + timedelta(seconds=60))
    finally:
        journal.close()
    assert (first.epoch, first.checkpoint_lsn, second.epoch, second.checkpoint_lsn) == ("a", 11, "b", 120)
    assert second.removed_epochs == ()
    report = _verify(Journal3(journal_url, None, ()))
    assert report.ok, [str(p) for p in report.problems]
    assert {e: r.pruned_until for e, r in report.epochs.items()} == {"a": 11, "b": 120}


def test_prunes_recorded_before_chained_prunes_are_rewritten_by_the_upgrade_and_still_verify(
        journal_url: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from kruntimes.journal.store import backends, migrate

    journal = Journal.open(journal_url)
    try:
        journal.append_batch(epoch("a", 1, AT, ended=True), key=KEY)
        prune.prune_to(journal, 11, epoch="a", now=AT + timedelta(seconds=15), key=KEY)
        journal.append_batch(epoch("b", 100, AT + timedelta(seconds=20), ended=False), key=KEY)
        prune.prune_to(journal, 120, epoch="b", now=AT + timedelta(seconds=60), key=KEY)
    finally:
        journal.close()
    migrate.downgrade(journal_url, "0007_history_progress")  # the one unchained record of the old form
    engine = engines.create_engine(journal_url)  # (opening a Journal on SQLite would upgrade it)
    try:
        with engine.connect() as conn:
            old = conn.execute(sa.select(T.c.incarnation, T.c.chain_hash).where(T.c.lsn == 0)).all()
    finally:
        engine.dispose()
    assert [tuple(row) for row in old] == [("b", "")]
    key_file = Path(str(tmp_path)) / "key"
    key_file.write_bytes(KEY.secret)
    monkeypatch.setenv(chain.KEY_FILE_ENV, str(key_file))
    migrate.upgrade(journal_url)
    report = _verify(Journal3(journal_url, KEY, ()), key=KEY)
    assert report.ok, [str(p) for p in report.problems]
    assert {e: r.pruned_until for e, r in report.epochs.items()} == {"a": 11, "b": 120}
    # The old form put back by hand after the upgrade is not accepted.
    text = records.canonical_json({"checkpoint_lsn": 120, "earlier": []})
    journals._rows(journal_url, sa.insert(T).values(lsn=0, incarnation="b", recorded_at=AT, kind="prune",
                                                    schema_version=1, payload=text,
                                                    payload_sha256=records.content_hash(text), chain_hash=""))
    problems = _verify(Journal3(journal_url, KEY, ()), key=KEY).problems
    assert any("the form from before revision 0008_chained_prunes" in str(p) for p in problems)
