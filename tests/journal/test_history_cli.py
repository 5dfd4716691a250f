"""`kruntimes history`, `kruntimes db` and `kruntimes.journal.history` on a scheduler-written journal.

Both backends; answers are checked against what the MemoryApi ended with. Errors a
user can cause must be one stderr line and exit code 2, never a traceback.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from kruntimes.cli import main as cli
from kruntimes.journal.history import cycles as history_cycles
from kruntimes.journal.history import runs as history_runs
from kruntimes.journal.store import backends, engines, migrate
from tests.journal.history_journal import END, NS, PHASE1, PHASE2, Generated, load

pytest_plugins = ("tests.journal.history_fixtures",)  # the generated journal's fixtures


def kruntimes(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def iso(t: Any) -> str:
    return t.isoformat().replace("+00:00", "Z")


def test_history_run_json_explains_where_and_why(history_url: str, generated: Generated,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for run, pod in sorted(generated.truth.placed.items()):
        code, out, err = kruntimes(capsys, "history", "run", f"{NS}/{run}", "--journal", history_url, "--json")
        assert (code, err) == (0, "")
        found = json.loads(out)
        assert found["placement"]["pod"] == pod and found["placement"]["runtime"] == pod.split("-")[0]
        assert found["candidates"][0] == {**found["candidates"][0], "pod": pod, "chosen": True, "rank": 1}
        assert found["cycles"][-1]["result"] in ("scheduled", "conflict")
        assert "ok" in [b["result"] for b in found["binds"]]


def test_history_run_prints_the_placement_its_candidates_and_binds(history_url: str, generated: Generated,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    run, pod = sorted(generated.truth.placed.items())[0]
    code, out, _ = kruntimes(capsys, "history", "run", f"{NS}/{run}", "--journal", history_url)
    assert code == 0
    assert f"placed on {pod}" in out and f"Why {pod}" in out and "LeastLoaded" in out and "Binds" in out


def test_history_run_of_a_pending_run_shows_its_reason(history_url: str, generated: Generated,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    run = sorted(generated.truth.late_runs)[0]
    code, out, _ = kruntimes(capsys, "history", "run", f"{NS}/{run}", "--journal", history_url, "--json")
    found = json.loads(out)
    assert code == 0 and found["placement"] is None and found["candidates"] == []
    assert found["cycles"][-1]["message"] == generated.truth.pending[run]


def test_history_pod_at_a_time_shows_what_the_scheduler_saw_then(history_url: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    def seen(at: Any) -> dict[str, Any]:
        code, out, _ = kruntimes(capsys, "history", "pod", f"{NS}/gpu-001", "--at", iso(at),
                                 "--journal", history_url, "--json")
        assert code == 0
        [observation] = json.loads(out)["observations"]
        return dict(observation)

    assert seen(PHASE2 - timedelta(minutes=1))["ready"] is True
    assert seen(END)["ready"] is False
    code, out, _ = kruntimes(capsys, "history", "pod", f"{NS}/gpu-001", "--journal", history_url)
    assert code == 0 and "MODIFIED" in out and "Cycles that chose it" in out


def test_history_cycles_filters_by_window_and_outcome(history_url: str, generated: Generated,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    def cycles(*argv: str) -> list[dict[str, Any]]:
        code, out, _ = kruntimes(capsys, "history", "cycles", "--journal", history_url, "--json", *argv)
        assert code == 0
        return list(json.loads(out))

    late = cycles("--since", "2026-11-29T11:00:00Z", "--outcome", "unschedulable")
    assert {c["run"] for c in late} == generated.truth.late_runs
    early = cycles("--until", "2026-11-29 11:00", "--outcome", "scheduled", "--limit", "1000")
    assert early and all(c["decided_at"] < "2026-11-29T11:00" and c["result"] == "scheduled" for c in early)
    newest = cycles("--limit", "2")
    everything = cycles("--limit", "1000")
    assert newest == everything[-2:] and [c["lsn"] for c in everything] == sorted(c["lsn"] for c in everything)
    code, out, _ = kruntimes(capsys, "history", "cycles", "--journal", history_url, "--outcome", "invalid")
    assert code == 0 and "typo-0" in out


def test_history_held_lists_the_runs_a_pod_held_at_a_time(history_url: str, generated: Generated,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    pod = "gpu-002"
    code, out, _ = kruntimes(capsys, "history", "held", f"{NS}/{pod}", "--at", iso(END), "--journal", history_url,
                             "--json")
    assert code == 0
    assert {p["run"] for p in json.loads(out)} == {r for r, p in generated.truth.placed.items() if p == pod}
    code, _, err = kruntimes(capsys, "history", "held", f"{NS}/{pod}", "--at", iso(PHASE1), "--journal", history_url)
    assert code == 1 and "held no Run" in err


def test_history_waits_puts_the_runs_that_waited_ninety_minutes_first(history_url: str, generated: Generated,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    late = generated.truth.pending_after_phase1 & set(generated.truth.placed)
    code, out, _ = kruntimes(capsys, "history", "waits", "--placed-only", "--limit", str(len(late)),
                             "--journal", history_url, "--json")
    assert code == 0 and {w["run"] for w in json.loads(out)} == late
    code, out, _ = kruntimes(capsys, "history", "waits", "--limit", "50", "--journal", history_url, "--json")
    waiting = {w["run"] for w in json.loads(out) if w["outcome"] is None}
    assert code == 0 and waiting == set(generated.truth.pending)
    code, out, _ = kruntimes(capsys, "history", "waits", "--journal", history_url)
    assert code == 0 and "1h30m" in out and "insufficient" in out
    assert "IN QUEUE" in out and "UNSCHEDULABLE" in out and "In queue: from the Run's first observation" in out


def _first_times(generated: Generated) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each Run's first observation and first cycle, read from the records themselves."""
    seen: dict[str, Any] = {}
    cycled: dict[str, Any] = {}
    for r in generated.records:
        if r.kind == "mutation" and r.payload.get("kind") == "Run":
            seen.setdefault(r.payload["name"], r.recorded_at)
        elif r.kind == "cycle":
            cycled.setdefault(r.payload["run"], r.recorded_at)
    return seen, cycled


def test_history_waits_names_the_queue_wait_apart_from_the_unschedulable_one(
        history_url: str, generated: Generated, capsys: pytest.CaptureFixture[str]) -> None:
    seen, cycled = _first_times(generated)
    code, out, _ = kruntimes(capsys, "history", "waits", "--limit", "100", "--journal", history_url, "--json")
    rows = {w["run"]: w for w in json.loads(out)}
    assert code == 0
    # Every Run placed or still Pending is listed, those placed on their first cycle too (a queue wait only).
    assert set(rows) == set(generated.truth.placed) | set(generated.truth.pending)
    for run, w in rows.items():
        assert w["queued_us"] == (cycled[run] - seen[run]) // timedelta(microseconds=1) > 0, run
        assert w["waited_us"] == w["queued_us"] + w["unschedulable_us"]
    late = generated.truth.pending_after_phase1 & set(generated.truth.placed)
    for run in late:  # queued a few ms, then unschedulable ninety minutes
        assert rows[run]["queued_us"] < 1_000_000 and 5399 <= rows[run]["unschedulable_us"] / 1e6 <= 5401
        assert rows[run]["state"] == "placed" and rows[run]["pod"] == generated.truth.placed[run]
    first_try = set(generated.truth.placed) - late - generated.truth.pending_after_phase1
    assert first_try and all(rows[run]["unschedulable_us"] == 0 for run in first_try if rows[run]["pending_cycles"] == 0)
    assert {run for run, w in rows.items() if w["state"] == "unschedulable"} == set(generated.truth.pending)


def test_history_run_says_how_long_the_run_waited_in_queue_and_unschedulable(
        history_url: str, generated: Generated, capsys: pytest.CaptureFixture[str]) -> None:
    seen, cycled = _first_times(generated)
    run = sorted(generated.truth.pending_after_phase1 & set(generated.truth.placed))[0]
    code, out, _ = kruntimes(capsys, "history", "run", f"{NS}/{run}", "--journal", history_url, "--json")
    waits = json.loads(out)["waits"]
    assert code == 0 and waits["queued_us"] == (cycled[run] - seen[run]) // timedelta(microseconds=1)
    assert 5399 <= waits["unschedulable_us"] / 1e6 <= 5401 and waits["still_unschedulable"] is False
    code, out, _ = kruntimes(capsys, "history", "run", f"{NS}/{run}", "--journal", history_url)
    assert code == 0 and "waited in queue " in out and "; unschedulable 1h30m00s" in out


def test_history_decisions_churn_and_conflicts_answer_for_a_window(history_url: str, generated: Generated,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    window = ("--since", iso(PHASE1), "--until", iso(END + timedelta(hours=1)), "--journal", history_url, "--json")
    code, out, _ = kruntimes(capsys, "history", "decisions", *window)
    decisions = json.loads(out)
    assert code == 0 and len(decisions) == sum(r.kind == "cycle" for r in generated.records)
    assert all(d["reason"] for d in decisions)
    assert any(d["reason"].startswith("highest total") for d in decisions if d["result"] == "scheduled")
    code, out, _ = kruntimes(capsys, "history", "conflicts", *window)
    troubled = sum(r.kind == "bind" and r.payload["result"] != "ok" for r in generated.records)
    lost = sum(r.kind == "cycle" and r.payload["result"] == "conflict" for r in generated.records)
    assert code == 0 and len(json.loads(out)) == troubled + lost > 0
    code, out, _ = kruntimes(capsys, "history", "churn", *window)
    churned = json.loads(out)
    assert code == (0 if churned else 1) and all(c["pod"] != c["previous_top"] for c in churned)


EMPTY = {
    "cycles of an outcome that never happened": ("cycles", "--outcome", "error"),
    "decisions of a window before the journal": ("decisions", "--since", "2000-01-01T00:00:00Z",
                                                 "--until", "2000-01-02T00:00:00Z"),
    "conflicts of a window before the journal": ("conflicts", "--since", "2000-01-01T00:00:00Z",
                                                 "--until", "2000-01-02T00:00:00Z"),
}


@pytest.mark.parametrize("output_format", ["table", "json"])
@pytest.mark.parametrize("command", EMPTY.values(), ids=list(EMPTY))
def test_an_empty_answer_is_a_note_and_exit_code_1_in_every_format(
        history_url: str, command: tuple[str, ...], output_format: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = kruntimes(capsys, "history", *command, "--journal", history_url, "-o", output_format)
    assert code == 1 and err.strip().startswith("no ")
    if output_format == "json":
        assert json.loads(out) == []


def test_a_listing_cut_at_its_limit_says_so(history_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = kruntimes(capsys, "history", "conflicts", "--since", iso(PHASE1), "--limit", "1",
                               "--journal", history_url, "--json")
    assert code == 0 and len(json.loads(out)) == 1
    assert "note: the newest 1 shown; there may be more (--limit N)" in err


def test_journal_reindex_rebuilds_and_says_how_many_records_it_read(history_url: str, generated: Generated,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = kruntimes(capsys, "journal", "reindex", "--journal", history_url)
    derived_kinds = sum(r.kind in ("cycle", "mutation", "bind", "reserve") for r in generated.records)
    assert code == 0 and out.strip() == f"rebuilt the history tables from {derived_kinds} records"


def test_nothing_found_is_a_note_and_exit_code_1(history_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = kruntimes(capsys, "history", "run", f"{NS}/no-such-run", "--journal", history_url)
    assert code == 1 and "no cycles recorded" in err
    code, _, err = kruntimes(capsys, "history", "pod", f"{NS}/gpu-001", "--at", iso(PHASE1 - timedelta(hours=1)),
                             "--journal", history_url)
    assert code == 1 and "no observations" in err


BAD = {
    "a key without a namespace": (["history", "run", "just-a-name"], "expected NAMESPACE/NAME"),
    "a key with two slashes": (["history", "pod", "a/b/c"], "expected NAMESPACE/NAME"),
    "a time that is not one": (["history", "cycles", "--since", "yesterday"], "is not a time"),
    "a limit below one": (["history", "cycles", "--limit", "0"], "--limit must be at least 1"),
    "a held question without a time": (["history", "held", "a/b", "--at", "noon-ish"], "is not a time"),
    "a decisions window without a start": (["history", "decisions", "--since", "soon"], "is not a time"),
    "a journal file that is not there": (["history", "cycles", "--journal", "sqlite:////nonexistent/j.db"],
                                         "no journal at /nonexistent/j.db"),
    "a database that does not answer": (["history", "run", "a/b", "--journal", "postgresql://u:secret@127.0.0.1:1/j"],
                                        "cannot use the journal at postgresql://u:***@127.0.0.1:1/j"),
    "an unsupported URL": (["history", "run", "a/b", "--journal", "mysql://h/db"], "bad journal URL"),
    "a URL that is not one": (["journal", "prune", "--before", "1h", "--journal", "::"], "bad journal URL"),
    "a bad prune time": (["journal", "prune", "--before", "last tuesday"], "is not a time"),
    "an unknown revision": (["db", "downgrade", "no-such-revision", "--yes"], "migration failed"),
}


@pytest.mark.parametrize("argv,expected", BAD.values(), ids=list(BAD))
def test_user_errors_are_one_line_on_stderr_and_exit_code_2(argv: list[str], expected: str, history_url: str,
                                                            capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KRUNTIMES_JOURNAL_URL", history_url)  # the default when --journal/--url is not given
    code, out, err = kruntimes(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert expected in err and "secret" not in err


def test_examples_answer_two_history_questions(history_url: str, generated: Generated) -> None:
    journal = backends.Journal.open(history_url, create=False)
    try:
        (why, candidates), (pending, reasons) = history_cycles.examples(journal)
        placed = history_runs.latest_placement(journal)
    finally:
        journal.close()
    assert placed is not None and generated.truth.placed[placed["run"]] == placed["pod"]
    assert f"{NS}/{placed['run']}" in why and placed["pod"] in why
    assert candidates[0]["pod"] == placed["pod"] and "LeastLoaded" in candidates[0]
    assert "Pending" in pending
    assert {r["reason"]: r["runs"] for r in reasons} == Counter(generated.truth.pending.values())


def test_db_upgrade_at_the_head_says_there_is_nothing_to_do(journal_url: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert kruntimes(capsys, "db", "upgrade", "--journal", journal_url)[0] == 0
    code, out, _ = kruntimes(capsys, "db", "upgrade", "--journal", journal_url)
    head = migrate.head_revision()
    assert code == 0 and out.strip().endswith(f": already at {head}; nothing to do")
    assert f"{head} -> {head}" not in out


def test_db_upgrade_and_downgrade_move_the_views_and_history_tables_with_the_revision(
        journal_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = kruntimes(capsys, "db", "upgrade", "--journal", journal_url)
    assert code == 0 and out.strip().endswith(f"empty -> {migrate.head_revision()}")
    engine = engines.create_engine(journal_url)
    try:
        assert "placements" in sa.inspect(engine).get_view_names()
        assert "history_placements" in sa.inspect(engine).get_table_names()
        code, out, _ = kruntimes(capsys, "db", "downgrade", "0003_epochs", "--journal", journal_url, "--yes")
        assert code == 0 and f"{migrate.head_revision()} -> 0003_epochs" in out
        inspector = sa.inspect(engine)
        assert "placements" in inspector.get_view_names()
        assert not [t for t in inspector.get_table_names() if t.startswith("history_")]
        code, out, _ = kruntimes(capsys, "db", "downgrade", "0001_journal_records", "--journal", journal_url,
                                 "--yes")
        assert code == 0 and "0003_epochs -> 0001_journal_records" in out
        inspector = sa.inspect(engine)
        assert inspector.get_view_names() == [] and "journal_records" in inspector.get_table_names()
        code, _, err = kruntimes(capsys, "db", "upgrade", "--url", journal_url)  # the old name still works
        assert code == 0 and migrate.current_revision(journal_url) == migrate.head_revision()
        assert "--url is deprecated, use --journal" in err
    finally:
        engine.dispose()


@pytest.mark.parametrize("command", [("held", f"{NS}/cpu-000"), ("pod", f"{NS}/cpu-000")], ids=["held", "pod"])
def test_a_time_before_the_journal_starts_is_answered_with_where_it_starts(
        history_url: str, command: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    before = iso(PHASE1 - timedelta(hours=1))
    code, _, err = kruntimes(capsys, "history", *command, "--at", before, "--journal", history_url)
    assert code == 1 and f": the journal starts at {iso(PHASE1).replace('Z', '.000Z')}, after that time" in err
    code, _, err = kruntimes(capsys, "history", "held", f"{NS}/no-such-pod", "--at", iso(END), "--journal", history_url)
    assert code == 1 and "the journal starts" not in err  # a time it covers: nothing then, and only that


def test_a_run_not_found_in_a_pruned_journal_says_the_journal_was_pruned(
        journal_url: str, generated: Generated, capsys: pytest.CaptureFixture[str]) -> None:
    load(journal_url, generated)
    code, _, err = kruntimes(capsys, "history", "run", f"{NS}/etl-00", "--journal", journal_url)
    assert code == 0
    before = iso(PHASE2 - timedelta(minutes=30))
    assert kruntimes(capsys, "journal", "prune", "--before", before, "--journal", journal_url, "--yes")[0] == 0
    code, _, err = kruntimes(capsys, "history", "run", f"{NS}/etl-00", "--journal", journal_url)
    assert code == 1 and "(it was pruned and starts at " in err and "kruntimes journal prune" in err


def test_conflict_rows_say_what_a_bind_conflict_means(history_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = kruntimes(capsys, "history", "conflicts", "--since", iso(PHASE1), "--journal", history_url,
                             "-o", "wide")
    rows = [line for line in out.splitlines() if " bind conflict " in line]
    assert code == 0 and rows and all("the Run changed since it was read (409)" in line for line in rows)
