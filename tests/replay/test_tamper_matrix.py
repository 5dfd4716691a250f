"""The tamper matrix (issue 14 item 6): every way of altering a journal is found by `replay verify`, named by
epoch and LSN, on SQLite and PostgreSQL.

The journal holds three epochs: two the real scheduler wrote and ended (`scripted`,
with cycles to replay), and a newest, open one of 1,200 records appended directly
(for the long truncation). Each case alters it as someone with write access to the
database would, and requires verify to report a problem of the expected kind, in the
expected epoch, at the expected LSN - the first problem it reports, not just any.
The keyed cases use an epoch chained with an HMAC key.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

import pytest
import sqlalchemy as sa

from kruntimes.cli import replay_cmd
from kruntimes.journal import chain, records
from kruntimes.journal.store import schema
from kruntimes.journal.store.backends import Journal
from replay import errors, integrity, source, verify
from tests.replay import journals

T = schema.journal_records
E = schema.journal_epochs
LONG = 1200


@dataclass(frozen=True)
class History:
    url: str
    older: journals.Written  # ended, a newer epoch began after it
    middle: journals.Written  # ended
    newest: str  # open: its writer may still be running
    newest_first: int


def append_epoch(url: str, epoch: str, first: int, count: int, at: datetime,
                 key: chain.ChainKey | None = None) -> None:
    """An epoch of `count` records that replay has nothing to plan in: its incarnation record and binds."""
    rows = [records.JournalRecord(epoch, first, at, "incarnation", {"version": "test", "config_hash": "c" * 64})]
    rows += [records.JournalRecord(epoch, first + i, at + timedelta(milliseconds=i), "bind",
                                   {"namespace": "ns", "run_uid": f"uid-{i}", "result": "ok"})
             for i in range(1, count)]
    journal = Journal.open(url)
    try:
        journal.append_batch(rows, key=key)
    finally:
        journal.close()


@pytest.fixture
def history(journal_url: str, tmp_path: Path) -> History:
    older = journals.scripted(journal_url, tmp_path, checkpoint_every=10)
    middle = journals.scripted(journal_url, tmp_path, checkpoint_every=10)
    first = _last_lsn(journal_url) + 1
    append_epoch(journal_url, "newest-epoch", first, LONG, datetime.now(timezone.utc) + timedelta(hours=1))
    return History(journal_url, older, middle, "newest-epoch", first)


def _last_lsn(url: str, epoch: str | None = None) -> int:
    stmt = sa.select(sa.func.max(T.c.lsn))
    if epoch is not None:
        stmt = stmt.where(T.c.incarnation == epoch)
    return int(journals._rows(url, stmt)[0][0])


def _lsns(url: str, epoch: str, kind: str | None = None) -> list[int]:
    stmt = sa.select(T.c.lsn).where(T.c.incarnation == epoch, T.c.lsn > 0).order_by(T.c.lsn)
    if kind is not None:
        stmt = stmt.where(T.c.kind == kind)
    return [r[0] for r in journals._rows(url, stmt)]


def _update(url: str, epoch: str, lsn: int, **values: object) -> None:
    journals._rows(url, sa.update(T).where(T.c.incarnation == epoch, T.c.lsn == lsn).values(**values))


def _delete(url: str, epoch: str, first: int, last: int) -> None:
    journals._rows(url, sa.delete(T).where(T.c.incarnation == epoch, T.c.lsn.between(first, last)))


def _edit(url: str, epoch: str, lsn: int, change: Callable[[dict], None], *, rehash: bool = True) -> None:
    payload = journals.payload_of_epoch(url, epoch, lsn)
    change(payload)
    text = records.canonical_json(payload)
    values: dict[str, object] = {"payload": text}
    if rehash:
        values["payload_sha256"] = records.content_hash(text)
    _update(url, epoch, lsn, **values)


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="kruntimes")
    replay_cmd.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["replay", *argv])
    return int(args.run(args))


def _verify(url: str, *, key: chain.ChainKey | None = None,
            published: tuple[integrity.PublishedHead, ...] = ()) -> verify.VerifyReport:
    journal = Journal.open(url)
    try:
        return verify.verify(journal, source.Selection(), key=key, published=published)
    finally:
        journal.close()


# -- the cases: (tamper -> the (epoch, LSN) it must be named at), the kind of problem ---------------------

Tamper = Callable[[History], tuple[str, int]]


def edit_replayed_payload(h: History) -> tuple[str, int]:
    e = h.older.incarnation
    lsn = _lsns(h.url, e, "mutation")[5]
    _edit(h.url, e, lsn, lambda p: p.update(resource_version="edited"))
    return e, lsn


def edit_without_hash(h: History) -> tuple[str, int]:
    e = h.middle.incarnation
    lsn = _lsns(h.url, e, "mutation")[3]
    _edit(h.url, e, lsn, lambda p: p.update(resource_version="edited"), rehash=False)
    return e, lsn


def bind_ok_to_conflict(h: History) -> tuple[str, int]:
    e = h.older.incarnation
    lsn = next(n for n in _lsns(h.url, e, "bind") if journals.payload_of_epoch(h.url, e, n).get("result") == "ok")
    _edit(h.url, e, lsn, lambda p: p.update(result="conflict"))
    return e, lsn


def cycle_duration(h: History) -> tuple[str, int]:
    e = h.older.incarnation
    lsn = _lsns(h.url, e, "cycle")[2]
    _edit(h.url, e, lsn, lambda p: p.update(duration_us=int(p.get("duration_us") or 0) + 1))
    return e, lsn


def recorded_at_moved(h: History) -> tuple[str, int]:
    e = h.middle.incarnation
    lsn = _lsns(h.url, e, "cycle")[1]
    at = journals._rows(h.url, sa.select(T.c.recorded_at).where(T.c.incarnation == e, T.c.lsn == lsn))[0][0]
    _update(h.url, e, lsn, recorded_at=at - timedelta(seconds=5))
    return e, lsn


def delete_one(h: History) -> tuple[str, int]:
    e = h.older.incarnation
    lsn = _lsns(h.url, e)[40]
    _delete(h.url, e, lsn, lsn)
    return e, lsn


def swap_two(h: History) -> tuple[str, int]:
    e = h.middle.incarnation
    lsn = _lsns(h.url, e, "mutation")[6]
    cols = (T.c.kind, T.c.payload, T.c.payload_sha256)
    a, b = (journals._rows(h.url, sa.select(*cols).where(T.c.incarnation == e, T.c.lsn == n))[0] for n in (lsn, lsn + 1))
    _update(h.url, e, lsn, kind=b[0], payload=b[1], payload_sha256=b[2])
    _update(h.url, e, lsn + 1, kind=a[0], payload=a[1], payload_sha256=a[2])
    return e, lsn


def truncate(n: int) -> Tamper:
    def tamper(h: History) -> tuple[str, int]:
        last = _last_lsn(h.url, h.newest)
        _delete(h.url, h.newest, last - n + 1, last)
        return h.newest, last - n + 1
    return tamper


def delete_last_cycle(h: History) -> tuple[str, int]:
    e = h.middle.incarnation
    lsn = _lsns(h.url, e, "cycle")[-1]
    _delete(h.url, e, lsn, lsn)
    return e, lsn


def restore_older_record_table(h: History) -> tuple[str, int]:
    # The records as they were when the older epoch was still running (its last 30 records not yet written),
    # beside the heads as they are now.
    e = h.older.incarnation
    last = _last_lsn(h.url, e)
    _delete(h.url, e, last - 29, last)
    return e, last - 29


def delete_start(h: History) -> tuple[str, int]:
    e = h.middle.incarnation
    first = _lsns(h.url, e)[0]
    _delete(h.url, e, first, first)
    return e, first


def older_epoch_never_ended(h: History) -> tuple[str, int]:
    # Its writer was killed before the end record: no end record, a head at the record before.
    e = h.older.incarnation
    end = _lsns(h.url, e, "end")[0]
    _delete(h.url, e, end, end)
    journals.reseal(h.url, e)
    journals._rows(h.url, sa.update(E).where(E.c.epoch == e).values(end_lsn=None, end_reason=None))
    return e, end - 1


def epoch_deleted_whole(h: History) -> tuple[str, int]:
    # Every record of the older epoch and its head row; only the incarnations projection remembers it.
    e = h.older.incarnation
    first = _lsns(h.url, e)[0]
    journals._rows(h.url, sa.delete(T).where(T.c.incarnation == e))
    journals._rows(h.url, sa.delete(E).where(E.c.epoch == e))
    return e, first


def head_row_deleted(h: History) -> tuple[str, int]:
    e = h.middle.incarnation
    journals._rows(h.url, sa.delete(E).where(E.c.epoch == e))
    return e, _lsns(h.url, e)[0]


CASES: dict[str, tuple[Tamper, type[errors.JournalDamage]]] = {
    "a replayed payload edited, its SHA-256 recomputed": (edit_replayed_payload, errors.BrokenLink),
    "a payload edited, its SHA-256 not": (edit_without_hash, errors.CorruptRecord),
    "a bind result turned from ok to conflict": (bind_ok_to_conflict, errors.BrokenLink),
    "a cycle's duration changed": (cycle_duration, errors.BrokenLink),
    "a record's time moved": (recorded_at_moved, errors.BrokenLink),
    "a record deleted": (delete_one, errors.RecordGap),
    "two records swapped": (swap_two, errors.BrokenLink),
    "the newest record truncated": (truncate(1), errors.RecordGap),
    "the newest 500 records truncated": (truncate(500), errors.RecordGap),
    "the last cycle deleted": (delete_last_cycle, errors.RecordGap),
    "the record table restored from an older copy": (restore_older_record_table, errors.RecordGap),
    "an epoch's start deleted": (delete_start, errors.MissingStart),
    "an older epoch that never ended": (older_epoch_never_ended, errors.MissingEnd),
    "an epoch's head row deleted": (head_row_deleted, errors.HeadMismatch),
    "an older epoch deleted whole with its head row": (epoch_deleted_whole, errors.HeadMismatch),
}


def test_the_untouched_journal_verifies_every_epoch(history: History) -> None:
    report = _verify(history.url)
    assert report.ok and report.problems == [], [str(p) for p in report.problems]
    states = {e.epoch: e.state for e in report.epochs.values()}
    assert states == {history.older.incarnation: "ended", history.middle.incarnation: "ended",
                      history.newest: "open"}
    newest = report.epochs[history.newest]
    assert newest.records == newest.links == LONG
    assert report.replayed == history.older.cycles + history.middle.cycles


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_every_alteration_is_found_and_named_by_epoch_and_lsn(history: History, case: tuple[Tamper, type]) -> None:
    tamper, kind = case
    epoch, lsn = tamper(history)
    report = _verify(history.url)
    assert not report.ok and report.problems
    named = [p for p in report.problems if p.epoch == epoch and p.lsn == lsn]
    assert named and isinstance(named[0], kind), [str(p) for p in report.problems]
    first = report.epochs[epoch].problems
    assert min(p.lsn for p in first) == lsn  # nothing earlier in that epoch is blamed
    assert f"epoch {epoch} LSN {lsn}:" in str(named[0])


def test_verify_exits_3_and_prints_each_problem_with_its_epoch_and_lsn(
        history: History, capsys: pytest.CaptureFixture[str]) -> None:
    epoch, lsn = delete_one(history)
    assert _run("verify", "--journal", history.url, "--workers", "1") == replay_cmd.EXIT_DAMAGED
    out = capsys.readouterr().out
    assert f"problem journal epoch {epoch} LSN {lsn}: missing records" in out
    assert "DAMAGED" in out and epoch[:12] in out


def test_both_tables_rolled_back_together_are_caught_by_a_published_head(history: History) -> None:
    last = _last_lsn(history.url, history.newest)
    link = journals._rows(history.url, sa.select(T.c.chain_hash).where(T.c.incarnation == history.newest,
                                                                       T.c.lsn == last))[0][0]
    published = integrity.PublishedHead(history.newest[:8], last, link)
    _delete(history.url, history.newest, last - 99, last)
    journals.reseal(history.url, history.newest)  # records and head agree again
    assert _verify(history.url).ok
    report = _verify(history.url, published=(published,))
    [problem] = report.problems
    assert isinstance(problem, errors.HeadBehindPublished) and (problem.epoch, problem.lsn) == (history.newest, last)


def test_a_chain_rewritten_under_a_published_head_is_caught_even_when_the_head_moved_on(history: History) -> None:
    lsn = _lsns(history.url, history.newest)[100]
    link = journals._rows(history.url, sa.select(T.c.chain_hash).where(T.c.incarnation == history.newest,
                                                                       T.c.lsn == lsn))[0][0]
    _edit(history.url, history.newest, lsn, lambda p: p.update(result="conflict"))
    journals.reseal(history.url, history.newest)
    report = _verify(history.url, published=(integrity.PublishedHead(history.newest, lsn, link),))
    [problem] = report.problems
    assert isinstance(problem, errors.HeadBehindPublished) and problem.lsn == lsn
    assert "no longer passes through the published head" in str(problem)


# -- keyed chains ---------------------------------------------------------------------------------------

KEY = chain.ChainKey(b"k" * 48)
OTHER = chain.ChainKey(b"o" * 48)


@pytest.fixture
def keyed(journal_url: str) -> str:
    append_epoch(journal_url, "keyed-epoch", 1, 300, datetime(2026, 12, 1, tzinfo=timezone.utc), key=KEY)
    return journal_url


def test_a_keyed_epoch_verifies_with_its_key(keyed: str) -> None:
    report = _verify(keyed, key=KEY)
    assert report.ok and report.epochs["keyed-epoch"].links == 300 and report.epochs["keyed-epoch"].algorithm == "hmac-sha256"


def test_an_edit_rehashed_without_the_key_breaks_the_link_of_the_edited_record(keyed: str) -> None:
    lsn = 120
    _edit(keyed, "keyed-epoch", lsn, lambda p: p.update(result="conflict"))
    journals.reseal(keyed, "keyed-epoch", from_lsn=lsn)  # the tamperer's best: plain links from there on
    report = _verify(keyed, key=KEY)
    first = report.problems[0]
    assert isinstance(first, errors.BrokenLink) and (first.epoch, first.lsn) == ("keyed-epoch", lsn)


@pytest.mark.parametrize("given, words", [
    (None, "no key was given"),
    (OTHER, f"the key given is key_id {OTHER.key_id}"),
], ids=["without a key", "with another key"])
def test_verify_without_the_right_key_says_so_instead_of_calling_every_link_broken(
        keyed: str, given: chain.ChainKey | None, words: str) -> None:
    report = _verify(keyed, key=given)
    [problem] = report.problems
    assert isinstance(problem, errors.KeyMismatch) and problem.lsn == 1 and words in str(problem)
    assert report.epochs["keyed-epoch"].links == 0 and report.epochs["keyed-epoch"].records == 300


def test_an_epoch_relabelled_unkeyed_and_rehashed_is_refused_when_the_key_is_given(keyed: str) -> None:
    journals.reseal(keyed, "keyed-epoch")
    journals._rows(keyed, sa.update(E).where(E.c.epoch == "keyed-epoch").values(algorithm=chain.PLAIN, key_id=None))
    assert _verify(keyed).ok  # without the key nothing can tell: docs/replay.md says so
    [problem] = _verify(keyed, key=KEY).problems
    assert isinstance(problem, errors.KeyMismatch) and "plain SHA-256 but a key was given" in str(problem)
