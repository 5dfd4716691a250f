"""`kruntimes journal prune`: a prefix up to a checkpoint goes, every cycle after the cut-off stays replayable.

Replayable means: the newest checkpoint at or before each later cycle's snapshot LSN is
still there, and so is every record from it on, gap-free. Below that checkpoint only
incarnation records and the prune record (LSN 0) remain. Both backends.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest

from kruntimes.cli import main as cli
import sqlalchemy as sa

from kruntimes.journal import chain, prune, records
from kruntimes.journal.store import backends, schema
from tests.journal.factories import INCARNATION, T0, record
from tests.journal.history_journal import END, PHASE1, PHASE2, Generated, load

pytest_plugins = ("tests.journal.history_fixtures",)  # the generated journal's fixtures

CUTOFFS = {
    "inside phase 1": PHASE1 + timedelta(milliseconds=60),
    "late in phase 1": PHASE1 + timedelta(milliseconds=100),
    "between the phases": PHASE2 - timedelta(minutes=30),
    "inside phase 2": PHASE2 + timedelta(milliseconds=12),
    "after everything": END,
}


def _all(journal: backends.Journal) -> list[records.JournalRecord]:
    return list(journal.read())


def _evidence(kept: list[records.JournalRecord]) -> dict[str, Any]:
    assert kept[0].lsn == prune.PRUNE_LSN and kept[0].kind == "prune"
    return dict(kept[0].payload)


@pytest.mark.parametrize("before", CUTOFFS.values(), ids=list(CUTOFFS))
def test_prune_keeps_what_every_later_cycle_needs_and_a_gap_free_tail(journal_url: str, generated: Generated,
                                                                      before: datetime) -> None:
    load(journal_url, generated)
    journal = backends.Journal.open(journal_url, create=False)
    try:
        report = prune.prune(journal, before)
        kept = _all(journal)
    finally:
        journal.close()
    original = generated.records
    later = [r for r in original if r.kind == "cycle" and r.recorded_at >= before]
    checkpoints = [r.lsn for r in original if r.kind == "checkpoint"]
    needed = min((r.payload["snapshot_lsn"] for r in later), default=original[-1].lsn)
    at = {r.lsn: r.recorded_at for r in original}
    assert report.checkpoint_lsn == max(c for c in checkpoints if c <= needed and at[c] < before)
    lsns = [r.lsn for r in kept]
    tail = [lsn for lsn in lsns if lsn >= report.checkpoint_lsn]
    assert tail == list(range(report.checkpoint_lsn, original[-1].lsn + 1))  # present and gap-free
    below = [r for r in kept[1:] if r.lsn < report.checkpoint_lsn]
    assert below and all(r.kind == "incarnation" for r in below)  # a clean prefix cut
    assert all(r.payload["snapshot_lsn"] >= report.checkpoint_lsn for r in later)
    assert original[0].kind == "incarnation" and lsns[1] == original[0].lsn
    evidence = _evidence(kept)
    assert evidence["checkpoint_lsn"] == report.checkpoint_lsn
    assert evidence["incarnation_lsns"] == [r.lsn for r in below] and evidence["deleted"] == report.total
    gone = {r.lsn for r in original} - set(lsns)
    assert report.total == len(gone) > 0
    assert report.deleted_lsns == {report.epoch: (min(gone), max(gone))}
    assert report.deleted == Counter(r.kind for r in original if r.lsn in gone)


def test_prune_before_the_first_checkpoint_is_needed_deletes_nothing(journal_url: str, generated: Generated) -> None:
    load(journal_url, generated)
    journal = backends.Journal.open(journal_url, create=False)
    try:
        report = prune.prune(journal, PHASE1)
        assert report.checkpoint_lsn is None and report.total == 0
        assert len(_all(journal)) == len(generated.records)
    finally:
        journal.close()


def test_a_dry_run_reports_the_same_and_deletes_nothing(journal_url: str, generated: Generated) -> None:
    load(journal_url, generated)
    journal = backends.Journal.open(journal_url, create=False)
    try:
        dry = prune.prune(journal, PHASE2, dry_run=True)
        assert len(_all(journal)) == len(generated.records)
        real = prune.prune(journal, PHASE2)
    finally:
        journal.close()
    assert dry.total == real.total > 0 and dry.deleted == real.deleted and dry.checkpoint_lsn == real.checkpoint_lsn


def _cycle(lsn: int, snapshot: int, at: datetime, **kw: Any) -> records.JournalRecord:
    return record(lsn, "cycle", {"namespace": "ns", "run": f"r{lsn}", "run_uid": f"u{lsn}",
                                 "snapshot_lsn": snapshot}, recorded_at=at, **kw)


def test_the_cycle_with_the_oldest_snapshot_decides_not_the_first_cycle_recorded(journal_url: str) -> None:
    # Two workers: the cycle recorded first (LSN 12) read LSN 10; the one recorded
    # after it (LSN 13) had read LSN 4, before the checkpoint at 6. Both are after
    # the cut-off, so the checkpoint at 3 must stay.
    cut = T0 + timedelta(seconds=10)
    early = [record(1, "incarnation", {"version": "0.1.0", "config_hash": "c" * 64}, recorded_at=T0)]
    early += [record(n, "checkpoint" if n in (3, 6) else "mutation", {"n": n}, recorded_at=T0) for n in range(2, 12)]
    late = [_cycle(12, 10, cut), _cycle(13, 4, cut + timedelta(seconds=1))]
    journal = backends.Journal.open(journal_url)
    try:
        journal.append_batch(early + late)
        report = prune.prune(journal, cut)
        assert (report.first_cycle_lsn, report.needed_lsn, report.checkpoint_lsn) == (13, 4, 3)
        assert [r.lsn for r in _all(journal)] == [prune.PRUNE_LSN, 1, *range(3, 14)]
    finally:
        journal.close()


def test_prune_from_the_command_line_prints_what_it_deleted_and_kept(journal_url: str, generated: Generated,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    load(journal_url, generated)
    before = (PHASE2 - timedelta(minutes=30)).isoformat()
    assert cli.main(["journal", "prune", "--before", before, "--journal", journal_url, "--dry-run"]) == 0
    dry: Any = capsys.readouterr().out
    assert dry.startswith("would delete ") and "kept checkpoint LSN" in dry
    assert cli.main(["journal", "prune", "--before", before, "--journal", journal_url, "--yes"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("deleted ") and out.split()[1] == dry.split()[2]
    assert "recorded at LSN 0" in out and "recorded at LSN 0" not in dry
    assert cli.main(["journal", "prune", "--before", before, "--journal", journal_url]) == 0  # nothing to ask
    assert capsys.readouterr().out.startswith("nothing to prune")


def test_prune_cuts_at_a_checkpoint_recorded_before_the_cut_off_and_leaves_no_record_below_it(
        journal_url: str) -> None:
    # No cycle after the cut-off: the newest checkpoint (10) was recorded after it, so
    # the cut is the checkpoint at 6, and nothing but the incarnation survives below it.
    cut = T0 + timedelta(seconds=10)
    rows = [record(1, "incarnation", {"version": "0.1.0", "config_hash": "c" * 64}, recorded_at=T0)]
    rows += [record(n, "checkpoint" if n == 6 else "mutation", {"n": n}, recorded_at=T0) for n in range(2, 7)]
    rows += [record(n, "checkpoint" if n == 10 else "mutation", {"n": n}, recorded_at=cut + timedelta(seconds=1))
             for n in range(7, 12)]
    journal = backends.Journal.open(journal_url)
    try:
        journal.append_batch(rows)
        link_of_5, link_of_6 = _links(journal)[5], _links(journal)[6]
        report = prune.prune(journal, cut, by="ops@test", now=cut + timedelta(hours=1))
        kept = _all(journal)
    finally:
        journal.close()
    assert report.checkpoint_lsn == 6 and report.deleted == {"mutation": 4}
    assert [r.lsn for r in kept] == [prune.PRUNE_LSN, 1, *range(6, 12)]
    assert _evidence(kept) == {
        "number": 1, "previous": chain.GENESIS, "algorithm": chain.PLAIN, "key_id": None,
        "epoch": INCARNATION, "checkpoint_lsn": 6,
        "checkpoint_sha256": records.content_hash(records.canonical_json({"n": 6})), "checkpoint_link": link_of_6,
        "incarnation_lsns": [1], "link_before": link_of_5, "removed_epochs": [], "newest": INCARNATION,
        "before": cut.isoformat(), "pruned_at": (cut + timedelta(hours=1)).isoformat(), "by": "ops@test",
        "deleted": 4}


def _links(journal: backends.Journal) -> dict[int, str]:
    t = schema.journal_records
    with journal.engine.connect() as conn:
        return {int(lsn): link for lsn, link in conn.execute(sa.select(t.c.lsn, t.c.chain_hash))}


def _epoch(name: str, first: int, count: int, at: datetime, *, checkpoint_every: int = 4) -> list[Any]:
    rows = [record(first, "incarnation", {"version": "0.1.0", "config_hash": "c" * 64}, recorded_at=at,
                   incarnation=name)]
    rows += [record(first + i, "checkpoint" if i % checkpoint_every == 0 else "mutation", {"n": i},
                    recorded_at=at + timedelta(seconds=i), incarnation=name) for i in range(1, count)]
    rows.append(record(first + count, "end", {"reason": "shutdown"}, recorded_at=at + timedelta(seconds=count),
                       incarnation=name))
    return rows


def test_older_epochs_wholly_before_the_cut_off_go_whole_and_are_named_in_the_evidence(journal_url: str) -> None:
    # Three terms: the first two ended long before the cut-off, the third runs across it.
    old, older, current = "epoch-a", "epoch-b", "epoch-c"
    journal = backends.Journal.open(journal_url)
    try:
        journal.append_batch(_epoch(old, 1, 10, T0))
        journal.append_batch(_epoch(older, 12, 10, T0 + timedelta(minutes=1)))
        journal.append_batch(_epoch(current, 23, 20, T0 + timedelta(minutes=2)))
        heads = {e.epoch: (e.head_lsn, e.head_hash) for e in journal.epochs().values()}
        report = prune.prune(journal, T0 + timedelta(minutes=2, seconds=10), by="ops@test")
        kept = _all(journal)
        left = set(journal.epochs())
    finally:
        journal.close()
    assert report.removed_epochs == (old, older) and report.epoch == current and report.checkpoint_lsn == 23 + 8
    assert left == {current} and {r.incarnation for r in kept if r.lsn != prune.PRUNE_LSN} == {current}
    assert [r.lsn for r in kept if r.lsn < 31] == [prune.PRUNE_LSN, 23]
    evidence = _evidence(kept)
    assert [(e["epoch"], e["head_lsn"], e["head_hash"]) for e in evidence["removed_epochs"]] == [
        (old, *heads[old]), (older, *heads[older])]


def test_the_newest_epoch_is_never_removed_whole(journal_url: str) -> None:
    journal = backends.Journal.open(journal_url)
    try:
        journal.append_batch(_epoch("only", 1, 10, T0, checkpoint_every=100))
        report = prune.prune(journal, T0 + timedelta(days=1))
        left = list(journal.epochs())
    finally:
        journal.close()
    assert report.removed_epochs == () and report.total == 0 and left == ["only"]


def test_a_second_prune_adds_a_record_chained_after_the_first(journal_url: str) -> None:
    rows = [record(1, "incarnation", {"version": "0.1.0", "config_hash": "c" * 64}, recorded_at=T0)]
    rows += [record(n, "checkpoint" if n % 5 == 0 else "mutation", {"n": n}, recorded_at=T0 + timedelta(seconds=n))
             for n in range(2, 21)]
    journal = backends.Journal.open(journal_url)
    try:
        journal.append_batch(rows)
        first = prune.prune(journal, T0 + timedelta(seconds=6), by="a@x")
        second = prune.prune(journal, T0 + timedelta(seconds=16), by="b@x")
        kept = _all(journal)
        with journal.engine.connect() as conn:
            t = schema.journal_records
            evidence = conn.execute(sa.select(t.c.incarnation, t.c.payload, t.c.chain_hash)
                                    .where(t.c.lsn == prune.PRUNE_LSN).order_by(t.c.incarnation)).all()
    finally:
        journal.close()
    assert (first.checkpoint_lsn, second.checkpoint_lsn) == (5, 15)
    assert [r.lsn for r in kept] == [prune.PRUNE_LSN, prune.PRUNE_LSN, 1, *range(15, 21)]
    payloads = [json.loads(p) for _, p, _ in evidence]
    assert [i for i, _, _ in evidence] == ["prune-1", "prune-2"]
    assert [(p["number"], p["checkpoint_lsn"], p["by"], p["deleted"]) for p in payloads] == [
        (1, 5, "a@x", 3), (2, 15, "b@x", 10)]
    assert payloads[1]["previous"] == evidence[0][2] and payloads[0]["previous"] == chain.GENESIS


def test_a_prune_to_an_lsn_that_is_not_a_checkpoint_is_refused_and_deletes_nothing(journal_url: str) -> None:
    rows = [record(1, "incarnation", {"version": "0.1.0", "config_hash": "c" * 64})]
    rows += [record(n, "checkpoint" if n == 4 else "mutation", {"n": n}) for n in range(2, 7)]
    journal = backends.Journal.open(journal_url)
    try:
        journal.append_batch(rows)
        with pytest.raises(ValueError, match="LSN 5 is not a checkpoint"):
            prune.prune_to(journal, 5)
        assert len(_all(journal)) == 6
        assert prune.prune_to(journal, 4).deleted == {"mutation": 2}
        assert [r.lsn for r in _all(journal)] == [prune.PRUNE_LSN, 1, 4, 5, 6]
    finally:
        journal.close()


@pytest.mark.parametrize("dry", [True, False], ids=["a dry run", "a prune"])
def test_a_prune_that_removes_whole_epochs_only_says_so_instead_of_nothing_to_prune(
        journal_url: str, dry: bool, capsys: pytest.CaptureFixture[str]) -> None:
    # Two terms ended before the cut-off; the third has no checkpoint before it: only whole epochs go.
    journal = backends.Journal.open(journal_url)
    try:
        journal.append_batch(_epoch("epoch-a", 1, 10, T0))
        journal.append_batch(_epoch("epoch-b", 12, 10, T0 + timedelta(minutes=1)))
        journal.append_batch(_epoch("epoch-c", 23, 20, T0 + timedelta(minutes=2), checkpoint_every=100))
    finally:
        journal.close()
    before = (T0 + timedelta(minutes=2, seconds=10)).isoformat()
    assert cli.main(["journal", "prune", "--before", before, "--journal", journal_url,
                     "--dry-run" if dry else "--yes"]) == 0
    out = capsys.readouterr().out
    verb = "would delete" if dry else "deleted"
    assert "nothing to prune" not in out and "still needed" not in out
    assert out.startswith(f"{verb} 22 records ") and f"{verb} 2 older epochs whole: epoch-a, epoch-b" in out
    assert "epoch epoch-c is not cut" in out
    journal = backends.Journal.open(journal_url)
    try:
        assert set(journal.epochs()) == ({"epoch-a", "epoch-b", "epoch-c"} if dry else {"epoch-c"})
    finally:
        journal.close()


def test_a_bumped_started_at_does_not_make_prune_remove_the_newest_epoch(journal_url: str) -> None:
    # The newest epoch (by its first record's chained time) is never removed whole, whatever the
    # journal_epochs.started_at column says (SPEC §5 "Crash vs loss").
    journal = backends.Journal.open(journal_url)
    try:
        journal.append_batch(_epoch("epoch-a", 1, 10, T0))
        journal.append_batch(_epoch("epoch-b", 12, 10, T0 + timedelta(minutes=1)))
        e = schema.journal_epochs
        with journal.engine.begin() as conn:
            conn.execute(sa.update(e).where(e.c.epoch == "epoch-a").values(started_at=T0 + timedelta(days=1)))
        report = prune.prune(journal, T0 + timedelta(hours=1))
        left = set(journal.epochs())
    finally:
        journal.close()
    assert report.removed_epochs == ("epoch-a",) and report.epoch == "epoch-b" and left == {"epoch-b"}


def _overlapping_epochs() -> tuple[list[Any], list[Any], datetime]:
    """An older epoch at LSNs 1..62, cycles after the cut-off reading LSN 45; a newer one begun while the
    database was away, numbered from 3, its cycle after the cut-off reading LSN 7 (of its own)."""
    cut = T0 + timedelta(minutes=5)
    older = [record(1, "incarnation", {"version": "0.1.0", "config_hash": "c" * 64}, recorded_at=T0,
                    incarnation="epoch-b")]
    older += [record(n, "checkpoint" if n in (10, 40) else "mutation", {"n": n}, recorded_at=T0 + timedelta(seconds=n),
                     incarnation="epoch-b") for n in range(2, 61)]
    older += [_cycle(61, 45, cut + timedelta(seconds=1), incarnation="epoch-b"),
              _cycle(62, 50, cut + timedelta(seconds=2), incarnation="epoch-b")]
    start = T0 + timedelta(minutes=20)
    newer = [record(3, "incarnation", {"version": "0.1.0", "config_hash": "c" * 64}, recorded_at=start,
                    incarnation="epoch-a")]
    newer += [record(n, "checkpoint" if n == 5 else "mutation", {"n": n}, recorded_at=start, incarnation="epoch-a")
              for n in range(4, 10)]
    newer.append(_cycle(10, 7, start + timedelta(seconds=1), incarnation="epoch-a"))
    return older, newer, cut


def test_the_oldest_snapshot_is_the_oldest_epochs_not_the_lowest_bare_lsn(journal_url: str) -> None:
    # (epoch, LSN) is a record's identity: LSN 7 of the newer epoch is not older than LSN 45 of the older one.
    older, newer, cut = _overlapping_epochs()
    journal = backends.Journal.open(journal_url)
    try:
        journal.append_batch(older)
        journal.append_batch(newer)
        report = prune.prune(journal, cut)
        kept = {(r.incarnation, r.lsn) for r in _all(journal)}
    finally:
        journal.close()
    assert (report.epoch, report.first_cycle_lsn, report.needed_lsn, report.checkpoint_lsn) == ("epoch-b", 61, 45, 40)
    assert {("epoch-a", n) for n in range(3, 11)} <= kept  # the newer epoch whole
    assert report.deleted_lsns == {"epoch-b": (2, 39)}


def test_what_a_prune_deleted_is_named_per_epoch(journal_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    journal = backends.Journal.open(journal_url)
    try:
        journal.append_batch(_epoch("epoch-a", 1, 10, T0))
        journal.append_batch(_epoch("epoch-b", 5, 20, T0 + timedelta(minutes=2)))  # LSNs overlapping epoch-a's
    finally:
        journal.close()
    before = (T0 + timedelta(minutes=2, seconds=10)).isoformat()
    assert cli.main(["journal", "prune", "--before", before, "--journal", journal_url, "--yes"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("deleted 18 records ") and "(LSNs 1..11 of epoch epoch-a, 6..12 of epoch epoch-b)" in first
