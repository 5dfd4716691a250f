"""`replay verify` on a pruned journal (SPEC §5 Retention): it starts at the checkpoint the prune kept and passes.

A missing prefix is accepted only where the prune record accounts for it: deleting a
prefix by hand, or editing, removing or re-pointing the prune record, fails verify,
named by LSN. Both backends, on a journal the real scheduler wrote.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable

import pytest

from kruntimes.cli import replay_cmd
from kruntimes.journal import prune
from kruntimes.journal.store.backends import Journal
from replay import errors, source, verify
from tests.replay import journals


@dataclass(frozen=True)
class Pruned:
    url: str
    before: datetime
    report: prune.PruneReport
    cycles: list[tuple[int, int, datetime]]  # (LSN, snapshot LSN, recorded at) of every cycle written


def _cycles(url: str) -> list[tuple[int, int, datetime]]:
    journal = Journal.open(url)
    try:
        return [(r.lsn, r.payload["snapshot_lsn"], r.recorded_at) for r in journal.read(kinds=("cycle",))]
    finally:
        journal.close()


@pytest.fixture
def written(journal_url: str, tmp_path: Path) -> journals.Written:
    return journals.scripted(journal_url, tmp_path, checkpoint_every=10)


@pytest.fixture
def pruned(written: journals.Written) -> Pruned:
    cycles = _cycles(written.url)
    before = cycles[len(cycles) // 2][2]  # half the cycles were decided before the cut-off
    journal = Journal.open(written.url)
    try:
        report = prune.prune(journal, before)
    finally:
        journal.close()
    assert report.checkpoint_lsn is not None and report.total > 0
    return Pruned(written.url, before, report, cycles)


def _verify(url: str, selection: source.Selection = source.Selection()) -> verify.VerifyReport:
    journal = Journal.open(url)
    try:
        report = verify.verify(journal, selection)
    finally:
        journal.close()
    report.raise_for_problems()  # the first problem, by epoch and LSN
    return report


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="kruntimes")
    replay_cmd.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["replay", *argv])
    return int(args.run(args))


def test_verify_with_no_range_passes_on_a_pruned_journal_from_the_checkpoint_the_prune_kept(pruned: Pruned) -> None:
    start = pruned.report.checkpoint_lsn
    assert start is not None
    report = _verify(pruned.url)
    remaining = [c for c in pruned.cycles if c[0] > start]
    replayable = [c for c in remaining if c[1] >= start]
    assert report.ok and report.replayed == report.identical == len(replayable) > 0
    assert report.pruned is not None and report.pruned.checkpoint_lsn == start
    assert report.skipped == len(remaining) - len(replayable)
    assert min(report.stats.started_from) >= start


def test_verify_says_what_was_pruned_and_from_which_checkpoint_it_verifies(
        pruned: Pruned, capsys: pytest.CaptureFixture[str]) -> None:
    start = pruned.report.checkpoint_lsn
    assert _run("verify", "--journal", pruned.url) == 0
    out = capsys.readouterr().out
    assert f"records before LSN {start} were pruned" in out and f"verifying from the checkpoint at {start}" in out
    assert "OK" in out


def test_verify_from_a_time_still_replays_the_cycles_decided_since_then(pruned: Pruned) -> None:
    report = _verify(pruned.url, source.Selection(since=pruned.before))
    assert report.ok and report.skipped == 0
    assert report.replayed == len([c for c in pruned.cycles if c[2] >= pruned.before]) > 0


def test_a_prefix_deleted_by_hand_fails_verify_naming_the_missing_lsns(
        written: journals.Written, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = journals.lsns_of(written.url, "checkpoint")[3]
    journals.delete_lsns(written.url, 2, checkpoint - 1)  # the incarnation record at 1 stays, as after a prune
    with pytest.raises(errors.RecordGap) as caught:
        _verify(written.url)
    assert (caught.value.lsn, caught.value.last) == (2, checkpoint - 1)
    assert _run("verify", "--journal", written.url) == replay_cmd.EXIT_DAMAGED
    assert f"LSNs 2..{checkpoint - 1}" in capsys.readouterr().out


def _point_at(which: Callable[[list[int], int], int]) -> Callable[[str, int], None]:
    def tamper(url: str, kept: int) -> None:
        target = which(journals.lsns_of(url, "checkpoint"), kept)
        journals.rewrite(url, prune.PRUNE_LSN, lambda p: p.update(checkpoint_lsn=target))
    return tamper


def _edit_unhashed(url: str, kept: int) -> None:
    journals.rewrite(url, prune.PRUNE_LSN, lambda p: p.update(by="someone else"), rehash=False)


def _forget_incarnations(url: str, kept: int) -> None:
    journals.rewrite(url, prune.PRUNE_LSN, lambda p: p.update(incarnation_lsns=[]))


TAMPERING: dict[str, tuple[Callable[[str, int], None], type[errors.JournalDamage], Callable[[int], int]]] = {
    "the prune record deleted": (lambda url, kept: journals.delete_lsns(url, 0, 0), errors.RecordGap, lambda k: 2),
    "the prune record edited without its hash": (_edit_unhashed, errors.CorruptRecord, lambda k: 0),
    "the prune record pointed at a later checkpoint": (
        _point_at(lambda cps, kept: next(c for c in cps if c > kept)), errors.InconsistentHistory, lambda k: -1),
    "the prune record pointed at a pruned LSN": (
        _point_at(lambda cps, kept: kept - 11), errors.RecordGap, lambda k: k - 11),
    "the kept incarnation record deleted": (
        lambda url, kept: journals.delete_lsns(url, 1, 1), errors.RecordGap, lambda k: 1),
    "the prune record without the incarnation it kept": (_forget_incarnations, errors.InconsistentHistory, lambda k: 1),
    "the kept checkpoint deleted": (lambda url, kept: journals.delete_lsns(url, kept, kept), errors.RecordGap, lambda k: k),
    "records after the kept checkpoint deleted": (
        lambda url, kept: journals.delete_lsns(url, kept + 1, kept + 3), errors.RecordGap, lambda k: k + 1),
    "the kept checkpoint edited and rehashed": (
        lambda url, kept: journals.rewrite(url, kept, lambda p: p.update(pods=[])), errors.InconsistentHistory,
        lambda k: k),
}


@pytest.mark.parametrize("case", TAMPERING.values(), ids=list(TAMPERING))
def test_tampering_with_the_prune_evidence_fails_verify_naming_the_lsn(pruned: Pruned, case: Any) -> None:
    tamper, error, lsn = case
    kept = pruned.report.checkpoint_lsn
    assert kept is not None
    tamper(pruned.url, kept)
    with pytest.raises(error) as caught:
        _verify(pruned.url)
    expected = lsn(kept)
    assert expected == -1 or caught.value.lsn == expected, str(caught.value)


def test_verify_of_named_cycles_skips_those_that_read_a_pruned_state_and_replays_the_rest(pruned: Pruned) -> None:
    start = pruned.report.checkpoint_lsn
    assert start is not None
    remaining = [c for c in pruned.cycles if c[0] > start]
    before_cut = next(c[0] for c in remaining if c[1] < start)
    after_cut = remaining[-1][0]
    report = _verify(pruned.url, source.Selection(lsns=(before_cut, after_cut)))
    assert report.ok and (report.replayed, report.skipped) == (1, 1)


def test_a_prune_record_pointing_the_cut_at_another_link_breaks_the_checkpoints_link(pruned: Pruned) -> None:
    kept = pruned.report.checkpoint_lsn
    journals.rewrite(pruned.url, prune.PRUNE_LSN, lambda p: p.update(link_before="0" * 64))
    with pytest.raises(errors.BrokenLink) as caught:
        _verify(pruned.url)
    assert caught.value.lsn == kept and caught.value.epoch == pruned.report.epoch


def test_cycle_and_what_if_skip_the_cycles_that_read_a_pruned_state(
        pruned: Pruned, capsys: pytest.CaptureFixture[str]) -> None:
    start = pruned.report.checkpoint_lsn
    assert start is not None
    remaining = [c for c in pruned.cycles if c[0] > start]
    gone = next(c[0] for c in remaining if c[1] < start)
    assert _run("cycle", str(gone), "--journal", pruned.url) == replay_cmd.EXIT_USAGE
    assert f"cycle LSN {gone} read the state at LSN" in capsys.readouterr().err
    assert _run("what-if", "--journal", pruned.url, "--weights", "LeastLoaded=3", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    skipped = len([c for c in remaining if c[1] < start])
    assert report["skipped_pruned"] == skipped > 0
    assert report["cycles"] == len(remaining) - skipped


def test_verify_passes_on_a_journal_pruned_across_epochs(journal_url: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # Three terms; the cut-off falls inside the middle one: the first goes whole, the middle is cut.
    first = journals.scripted(journal_url, tmp_path, checkpoint_every=10)
    middle = journals.scripted(journal_url, tmp_path, checkpoint_every=10)
    journals.scripted(journal_url, tmp_path, checkpoint_every=10)
    journal = Journal.open(journal_url)
    try:
        mine = list(journal.read(middle.incarnation, kinds=("cycle",)))
        report = prune.prune(journal, mine[len(mine) // 2].recorded_at)
    finally:
        journal.close()
    assert report.removed_epochs == (first.incarnation,) and report.epoch == middle.incarnation
    verified = _verify(journal_url)
    assert verified.ok and first.incarnation not in verified.epochs
    assert verified.epochs[middle.incarnation].pruned_until == report.checkpoint_lsn
    assert verified.replayed + verified.skipped == len(_cycles(journal_url))
    assert verified.epochs[middle.incarnation].cycles > 0
    assert _run("verify", "--journal", journal_url) == 0
    assert "1 older epoch removed whole" in capsys.readouterr().out


def test_a_journal_pruned_before_epochs_verifies_after_the_upgrade(journal_url: str) -> None:
    # The old shape, as the old code left it after a prune at the checkpoint at LSN 4: the incarnation
    # records, the prune record in its old form (no epoch, no link), then the next incarnation's records.
    import sqlalchemy as sa

    from kruntimes.journal import records
    from kruntimes.journal.store import engines, migrate, schema
    from tests.journal.factories import T0, record

    a, b = "a" * 32, "b" * 32
    migrate.upgrade(journal_url, "0002_history_views")
    start = {"version": "0.9", "config_hash": "c0ffee"}
    kept = record(4, "checkpoint", {"objects": []}, incarnation=a)
    rows = [records.encode(r) for r in (
        record(1, "incarnation", start, incarnation=a), kept, record(5, "bind", incarnation=a),
        record(6, "bind", incarnation=a), record(7, "incarnation", start, incarnation=b),
        record(8, "bind", incarnation=b))]
    evidence = records.canonical_json({
        "checkpoint_lsn": 4, "checkpoint_sha256": records.encode(kept).payload_sha256, "incarnation_lsns": [1],
        "before": (T0 + timedelta(seconds=1)).isoformat(), "pruned_at": T0.isoformat(), "by": "ops@old", "deleted": 2,
        "earlier": []})  # (a real prune's cut-off is after the checkpoint it keeps)
    rows.append(records.EncodedRecord(0, a, T0, "prune", 1, evidence, records.content_hash(evidence)))
    engine = engines.create_engine(journal_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO journal_records (lsn, incarnation, recorded_at, kind, schema_version, payload,"
                " payload_sha256) VALUES (:lsn, :incarnation, :recorded_at, :kind, :schema_version, :payload,"
                " :payload_sha256)"),
                [{**r._asdict(), "recorded_at": r.recorded_at if conn.dialect.name != "sqlite"
                  else schema.sqlite_timestamp(r.recorded_at)} for r in rows])
    finally:
        engine.dispose()
    migrate.upgrade(journal_url)
    report = _verify(journal_url)
    assert report.ok and report.pruned is not None and (report.pruned.epoch, report.pruned.checkpoint_lsn) == (a, 4)
    assert [(e.epoch, e.state, e.records, e.pruned_until) for e in report.epochs.values()] == [
        (a, "before-epochs", 4, 4), (b, "before-epochs", 2, None)]
    journals.delete_lsns(journal_url, 5, 5)  # and a gap no prune accounts for is still damage
    with pytest.raises(errors.RecordGap) as caught:
        _verify(journal_url)
    assert (caught.value.epoch, caught.value.lsn) == (a, 5)
