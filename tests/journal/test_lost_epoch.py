"""An epoch none of whose records reached the database is named by verify (issue 22).

A scheduler killed during a hang, its writer process with it, before one record of its
new epoch was stored anywhere: its spool is empty, and all that is left of the epoch is
its note (``<spool>.epochs``) and the numbered mark (``handover.Numbered``), which says
the epoch's first LSN and how far it numbered. The replica restarts a standby; its spool
recovery closes the epoch with an ``end`` {"reason": "recovered"} in the epoch itself,
chained from its start, naming the LSNs lost; verify reports "records lost in a crash"
by epoch and LSN range, exits 0 and calls nothing damage. The state the kill leaves is
made here file by file, as the session and the recorder make it. Both backends.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from kruntimes.cli import main as cli
from kruntimes.journal import chain, records
from kruntimes.journal.store import backends, schema
from kruntimes.journal.write import handover, settings, spool_drain
from kruntimes.journal.write.recovery import SpoolRecovery, left_behind
from replay import ends, errors, integrity
from tests.journal.factories import T0, record

WAIT = 30.0
OLDER, LOST = "a" * 32, "b" * 32


def _killed_before_anything_was_stored(spool: Path, first: int, last: int) -> None:
    numbered = handover.Numbered(spool, LOST, first_lsn=first)  # as JournalSession opens the epoch
    for lsn in range(first, last + 1):  # as the recorder numbers each record before handing it over
        numbered.view[0] = lsn
    numbered.close(ended=False)  # killed: the mark stays
    spool_drain.write_note(Path(f"{spool}.epochs"), [LOST])  # the writer's note of its open epoch


def _recover(url: str, spool: Path) -> None:
    assert left_behind(spool)
    recovery = SpoolRecovery(url, str(spool), migrate=False, patience=settings.Patience(retry_interval=0.05), registry=CollectorRegistry()).start()
    try:
        assert recovery.drained.wait(WAIT)
    finally:
        recovery.stop()


@pytest.fixture
def recovered(journal_url: str, tmp_path: Path) -> str:
    journal = backends.Journal.open(journal_url)
    try:  # an older epoch, ended, whose LSNs the lost one overlaps
        journal.append_batch([record(1, "incarnation", {"version": "1", "config_hash": "c"}, incarnation=OLDER,
                                     recorded_at=T0 - timedelta(days=1)),
                              record(2, "leader", {"event": "acquired", "identity": OLDER}, incarnation=OLDER,
                                     recorded_at=T0 - timedelta(days=1)),
                              record(3, "end", {"reason": "shutdown"}, incarnation=OLDER,
                                     recorded_at=T0 - timedelta(days=1))])
    finally:
        journal.close()
    spool = tmp_path / "journal.spool"
    _killed_before_anything_was_stored(spool, 3, 41)
    _recover(journal_url, spool)
    return journal_url


def test_recovery_closes_an_epoch_with_nothing_stored_naming_the_lsns_it_lost(recovered: str) -> None:
    journal = backends.Journal.open(recovered, create=False)
    try:
        (end,) = journal.read(LOST)
        reports = {r.epoch: r for r in integrity.check(journal)}
    finally:
        journal.close()
    assert (end.lsn, end.kind) == (42, "end")
    assert end.payload == {"reason": "recovered", "handed_lsn": 41, "first_lsn": 3}
    lost = reports[LOST]
    assert lost.ok and lost.state == ends.ENDED and lost.lost_in_crash == (3, 41)
    assert ends.describe(lost) == "ended by a crash, 39 unacknowledged records lost"
    assert reports[OLDER].ok


def test_verify_says_which_records_a_crash_lost_and_exits_0(recovered: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["replay", "verify", "--journal", recovered]) == 0
    out = capsys.readouterr().out
    assert f"records lost in a crash: epoch {LOST}, LSNs 3..41" in " ".join(out.split())
    assert cli.main(["replay", "verify", "--journal", recovered, "--json"]) == 0
    epochs = {e["epoch"]: e for e in json.loads(capsys.readouterr().out)["epochs"]}
    assert epochs[LOST]["lost_in_crash"] == [3, 41] and epochs[LOST]["problems"] == []


# -- the same end forged over an epoch deleted whole: what each kind of journal tells (the tamper matrix) --------

KEY = chain.ChainKey(b"k" * 48)
GONE = "c" * 32


def _forged(url: str, key: chain.ChainKey | None) -> tuple[str, int, str]:
    """An ended epoch (LSNs 1..10) deleted whole with its head row, and in its place the end a restart writes
    for an epoch none of whose records was stored, naming 1..10, linked without the key. Returns its head."""
    at = T0 - timedelta(days=2)
    rows = [record(1, "incarnation", {"version": "1", "config_hash": "c"}, incarnation=GONE, recorded_at=at)]
    rows += [record(n, "leader", {"event": "acquired", "identity": GONE}, incarnation=GONE, recorded_at=at)
             for n in range(2, 10)]
    rows.append(record(10, "end", {"reason": "shutdown"}, incarnation=GONE, recorded_at=at))
    journal = backends.Journal.open(url)
    try:
        journal.append_batch(rows, key=key)
        head = journal.epochs([GONE])[GONE]
        with journal.engine.begin() as conn:
            t, e = schema.journal_records, schema.journal_epochs
            conn.execute(sa.delete(t).where(t.c.incarnation == GONE))
            conn.execute(sa.delete(e).where(e.c.epoch == GONE))
        end = records.encode(record(11, "end", {"reason": "recovered", "handed_lsn": 10, "first_lsn": 1},
                                    incarnation=GONE, recorded_at=at))
        journal.append_batch([end._replace(chain_hash=chain.link(chain.GENESIS, GONE, 11, end.recorded_at, "end",
                                                                 end.schema_version, end.payload_sha256))])
        return GONE, head.head_lsn, head.head_hash
    finally:
        journal.close()


def _checked(url: str, key: chain.ChainKey | None = None, published: tuple[integrity.PublishedHead, ...] = ()
             ) -> integrity.EpochReport:
    journal = backends.Journal.open(url, create=False)
    try:
        return {r.epoch: r for r in integrity.check(journal, key, published=published)}[GONE]
    finally:
        journal.close()


def test_a_plain_journal_reads_an_epoch_deleted_whole_under_a_forged_crash_end_as_lost_in_a_crash(
        journal_url: str) -> None:
    _forged(journal_url, None)
    report = _checked(journal_url)
    assert report.ok and report.lost_in_crash == (1, 10)  # not caught: named as lost, what a crash leaves


def test_a_keyed_journal_refuses_the_forged_end(journal_url: str) -> None:
    _forged(journal_url, KEY)
    report = _checked(journal_url, KEY)
    assert [type(p) for p in report.problems][:1] == [errors.KeyMismatch]


def test_a_published_head_catches_the_forged_end(journal_url: str) -> None:
    epoch, lsn, link = _forged(journal_url, None)
    report = _checked(journal_url, published=(integrity.PublishedHead(epoch, lsn, link),))
    assert not report.ok and report.problems
