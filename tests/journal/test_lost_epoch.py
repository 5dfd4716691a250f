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
from prometheus_client import CollectorRegistry

from kruntimes.cli import main as cli
from kruntimes.journal.store import backends
from kruntimes.journal.write import handover, spool_drain
from kruntimes.journal.write.recovery import SpoolRecovery, left_behind
from replay import ends, integrity
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
    recovery = SpoolRecovery(url, str(spool), migrate=False, retry_interval=0.05, registry=CollectorRegistry()).start()
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
