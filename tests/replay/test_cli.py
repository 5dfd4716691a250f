"""`kruntimes replay verify|cycle|what-if`: output, JSON and exit codes (0 ok, 1 diverged, 2 usage, 3 damaged)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from kruntimes.cli import replay_cmd
from kruntimes.scheduler import registry
from tests.replay import journals
from tests.replay.test_divergence import MostLoaded


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="kruntimes")
    replay_cmd.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["replay", *argv])
    return int(args.run(args))


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> journals.Written:
    tmp = tmp_path_factory.mktemp("replay-cli")
    return journals.scripted(f"sqlite:///{tmp}/j.db", tmp, checkpoint_every=10)


@pytest.fixture
def damaged(tmp_path: Path) -> journals.Written:
    written = journals.scripted(f"sqlite:///{tmp_path}/j.db", tmp_path, checkpoint_every=10)
    checkpoint = journals.lsns_of(written.url, "checkpoint")[0]
    journals.delete_lsns(written.url, checkpoint + 2, checkpoint + 4)
    return written


def test_verify_says_ok_and_exits_0_when_every_decision_is_identical(
        journal: journals.Written, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("verify", "--journal", journal.url) == 0
    out, err = capsys.readouterr()
    last = out.splitlines()[-1]
    assert last.startswith(f"OK {journal.cycles} cycles of 1 epoch replayed")
    assert f"{journal.cycles} identical, 0 diverged; {journal.records} records of 1 epoch checked " \
           f"({journal.records} links)" in last
    # Per epoch, what was checked: one epoch, ended by the session that wrote it.
    row = next(line for line in out.splitlines() if journal.incarnation[:12] in line)
    assert "ended: shutdown" in row and f"{journal.cycles} identical" in row
    # Not a terminal: progress comes as plain lines on stderr.
    assert f"kruntimes replay verify: {journal.cycles}/{journal.cycles} cycles replayed, 0 diverged" in err


def test_verify_exits_1_with_a_summary_and_the_differences_when_a_decision_diverges(
        journal: journals.Written, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.REGISTRY, "LeastLoaded", MostLoaded)  # type: ignore[index]
    assert _run("verify", "--journal", journal.url, "--show", "1") == 1
    out = capsys.readouterr().out
    assert "DIVERGED" in out and "checked (" in out and "); first at LSN" in out and "fields that differ:" in out
    assert ": not identical" in out and "  digest: recorded '" in out
    assert "replayed outcome of cycle" in out  # every pod's verdict and scores, as replay computes them


def test_verify_json_lists_the_divergent_cycles_with_their_replayed_outcome(
        journal: journals.Written, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.REGISTRY, "LeastLoaded", MostLoaded)  # type: ignore[index]
    assert _run("verify", "--journal", journal.url, "--json") == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["replayed"] == journal.cycles
    first = report["diverged"][0]
    assert first["identical"] is False and first["differences"][-1]["field"] == "digest"
    assert {"pod", "verdict", "scores", "total", "winner"} <= set(first["replayed_outcome"]["pods"][0])


def test_verify_exits_3_naming_the_missing_lsns_of_a_damaged_journal(
        damaged: journals.Written, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = journals.lsns_of(damaged.url, "checkpoint")[0]
    assert _run("verify", "--journal", damaged.url) == 3
    out = capsys.readouterr().out
    assert (f"problem journal epoch {damaged.incarnation} LSN {checkpoint + 2}: missing records: LSNs "
            f"{checkpoint + 2}..{checkpoint + 4} (3 records) not in the journal") in out
    assert out.splitlines()[-1].startswith("DAMAGED 1 problem in 1 epoch;")


def test_verify_takes_a_time_window_and_an_incarnation_prefix(
        journal: journals.Written, capsys: pytest.CaptureFixture[str]) -> None:
    # Cycles are selected by when they were recorded (the recorder's wall clock: just now).
    assert _run("verify", "--journal", journal.url, "--incarnation", journal.incarnation[:8], "--since", "1h") == 0
    assert f"OK {journal.cycles} cycles" in capsys.readouterr().out
    assert _run("verify", "--journal", journal.url, "--until", "2000-01-01") == 0
    out, err = capsys.readouterr()
    assert "OK 0 cycles of 0 epochs" in out and "no cycle in range" in err
    assert _run("verify", "--journal", journal.url, "--incarnation", "nope") == 2
    assert "no incarnation 'nope'" in capsys.readouterr().err


def test_cycle_prints_every_pod_with_verdict_scores_usage_the_winner_and_the_assumed_cache(
        journal: journals.Written, capsys: pytest.CaptureFixture[str]) -> None:
    scheduled = [n for n in journals.lsns_of(journal.url, "cycle")
                 if journals.payload_of(journal.url, n)["status"] == "scheduled"]
    lsn = scheduled[-1]
    recorded = journals.payload_of(journal.url, lsn)
    assert _run("cycle", str(lsn), "--journal", journal.url) == 0
    out = capsys.readouterr().out
    assert f"cycle LSN {lsn}: Run ns/{recorded['run']}" in out
    assert f"★ {recorded['chosen']}" in out
    assert "RuntimePodAvailability: runtimed stale" in out  # the stale pod's verdict
    assert "USED/CAPACITY" in out and "LeastLoaded" in out
    assert "identical to the record: scheduled on " + recorded["chosen"] in out
    assert "assumed cache" in out


def test_cycle_json_has_one_row_per_pod_and_what_the_assumed_cache_held(
        journal: journals.Written, capsys: pytest.CaptureFixture[str]) -> None:
    lsn = journals.lsns_of(journal.url, "cycle")[-1]
    assert _run("cycle", str(lsn), "--journal", journal.url, "--json") == 0
    found = json.loads(capsys.readouterr().out)
    assert found["lsn"] == lsn and found["identical"] is True
    assert sorted(p["pod"] for p in found["pods"]) == ["p0", "p1", "p2", "p3", "stale"]
    assert {"verdict", "scores", "capacity", "used", "assumed", "free", "winner"} <= set(found["pods"][0])
    assert isinstance(found["assumed"], list) and found["config"]["filters"]


def test_cycle_by_run_explains_that_runs_newest_cycles(
        journal: journals.Written, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("cycle", "--run", "ns/r00", "--limit", "2", "--journal", journal.url, "--json") == 0
    found = json.loads(capsys.readouterr().out)
    assert 1 <= len(found) <= 2 and all(e["run"]["name"] == "r00" for e in found)
    assert _run("cycle", "--run", "ns/nobody", "--journal", journal.url) == 2
    assert "no cycle of Run ns/nobody" in capsys.readouterr().err


def test_cycle_refuses_a_record_that_is_not_a_cycle_and_a_missing_argument(
        journal: journals.Written, capsys: pytest.CaptureFixture[str]) -> None:
    mutation = journals.lsns_of(journal.url, "mutation")[0]
    assert _run("cycle", str(mutation), "--journal", journal.url) == 2
    assert f"LSN {mutation} is a mutation record, not a cycle" in capsys.readouterr().err
    assert _run("cycle", "--journal", journal.url) == 2
    assert "give a cycle LSN, --last or --run NS/NAME" in capsys.readouterr().err


def test_what_if_reports_changed_decisions_and_the_placement_shift(
        journal: journals.Written, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("what-if", "--journal", journal.url, "--disable-plugin", "LeastLoaded", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cycles"] == journal.cycles and report["not_reproduced"] == []
    assert report["changed"], "without LeastLoaded, ties go to the smallest name"
    assert sum(s["before"] for s in report["shift"]) == sum(s["after"] for s in report["shift"])
    assert "recorded history" in report["note"]
    assert _run("what-if", "--journal", journal.url, "--weights", "LeastLoaded=3,PreferredRunAffinity=1") == 0
    out = capsys.readouterr().out
    assert "what if: LeastLoaded=3, PreferredRunAffinity=1" in out and "RECORDED history" in out


def test_what_if_on_one_cycle(journal: journals.Written, capsys: pytest.CaptureFixture[str]) -> None:
    lsn = journals.lsns_of(journal.url, "cycle")[0]
    assert _run("what-if", "--journal", journal.url, "--cycle", str(lsn), "--default-runs-capacity", "0",
                "--json") == 0
    assert json.loads(capsys.readouterr().out)["cycles"] == 1


@pytest.mark.parametrize("argv, words", [
    (("--weights", "LeastLoaded=x"), "--weights expects PLUGIN=WEIGHT"),
    (("--weights", "Nope=2"), "no score plugin named Nope"),
    (("--disable-plugin", "Nope"), "no plugin named Nope"),
    ((), "nothing to try"),
])
def test_what_if_usage_mistakes_are_one_line_and_exit_2(
        journal: journals.Written, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], words: str) -> None:
    assert _run("what-if", "--journal", journal.url, *argv) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


def test_a_journal_that_is_not_there_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("verify", "--journal", f"sqlite:///{tmp_path}/none.db") == 2
    assert "no journal at" in capsys.readouterr().err


def _clone_epoch(url: str, epoch: str, clone: str) -> None:
    """A second epoch at the same LSNs (two writers numbering from the same last LSN, SPEC §5)."""
    import sqlalchemy as sa
    from datetime import timedelta

    from kruntimes.journal.store import schema
    from kruntimes.journal.store.backends import Journal

    t, e = schema.journal_records, schema.journal_epochs
    journal = Journal.open(url)
    try:
        with journal.engine.begin() as conn:
            rows = [dict(r._mapping, incarnation=clone, recorded_at=r.recorded_at + timedelta(seconds=1))
                    for r in conn.execute(sa.select(t).where(t.c.incarnation == epoch, t.c.lsn > 0))]
            conn.execute(sa.insert(t), rows)
            head = dict(conn.execute(sa.select(e).where(e.c.epoch == epoch)).one()._mapping)
            conn.execute(sa.insert(e).values(**{**head, "epoch": clone,
                                                "started_at": head["started_at"] + timedelta(seconds=1)}))
    finally:
        journal.close()
    journals.reseal(url, clone)  # its links, from its own epoch ID


def test_a_cycle_lsn_in_two_epochs_must_be_named_by_epoch_and_both_epochs_verify(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    written = journals.scripted(f"sqlite:///{tmp_path}/j.db", tmp_path, checkpoint_every=10)
    clone = "c" * 32
    _clone_epoch(written.url, written.incarnation, clone)
    lsn = journals.lsns_of(written.url, "cycle")[3]
    assert _run("cycle", str(lsn), "--journal", written.url) == 2
    err = capsys.readouterr().err
    assert f"LSN {lsn} is a cycle in 2 epochs; give one of" in err
    assert f"{written.incarnation[:12]}:{lsn}" in err and f"{clone[:12]}:{lsn}" in err
    assert _run("cycle", f"{clone[:6]}:{lsn}", "--journal", written.url, "--json") == 0
    assert json.loads(capsys.readouterr().out)["incarnation"] == clone
    assert _run("cycle", f"nope:{lsn}", "--journal", written.url) == 2
    assert "no epoch 'nope'" in capsys.readouterr().err
    # Overlapping LSNs are two epochs, each whole and replayed on its own.
    assert _run("verify", "--journal", written.url, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["replayed"] == 2 * written.cycles
    assert [(e["epoch"], e["identical"], e["problems"]) for e in report["epochs"]] == [
        (written.incarnation, written.cycles, []), (clone, written.cycles, [])]


def test_cycle_last_explains_the_newest_cycle_in_the_journal(journal: journals.Written,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    newest = journals.lsns_of(journal.url, "cycle")[-1]
    assert _run("cycle", "--last", "--journal", journal.url, "-o", "json") == 0
    assert json.loads(capsys.readouterr().out)["lsn"] == newest
