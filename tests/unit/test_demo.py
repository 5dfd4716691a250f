"""`kruntimes demo` runs end to end and its summary adds up."""

import importlib.util

import pytest

from kruntimes import demo
from kruntimes.cli.main import main
from kruntimes.journal import backends


def test_the_demo_workload_has_the_promised_shape() -> None:
    w = demo.generate()
    assert len(w.pods) >= 200 and len(w.runs) >= 5000
    assert len({(p["metadata"]["namespace"], p["metadata"]["labels"]["kruntimes.io/runtime"]) for p in w.pods}) >= 3


def test_the_demo_places_most_runs_fails_the_invalid_ones_and_never_overcommits() -> None:
    report = demo.run(workers=4, conflict_rate=0.05)
    assert sum(report.phases.values()) == report.runs
    assert report.phases["Failed"] == 20
    assert report.phases["Scheduled"] > 4000
    assert report.phases["Succeeded"] > 0
    assert report.injected_conflicts > 0 and report.results["conflict"] >= report.injected_conflicts
    assert report.wakeups.get("capacity_released", 0) > 0
    for per_resource in report.utilisation.values():
        for used, capacity in per_resource.values():
            assert used <= capacity
    assert all(reason.startswith("0/") for reason in report.pending_reasons)
    assert all(reason.startswith("invalid Run: spec.") for reason in report.failed_reasons)


def test_the_demo_journals_every_decision_and_answers_two_history_questions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = demo.run(workers=2, journal=f"sqlite:///{tmp_path}/journal.db")
    assert report.records > report.cycles  # mutations, reserves and binds besides the cycles
    (why, candidates), (pending, by_reason) = report.history
    assert why.startswith("Why was ") and candidates and candidates[0]["rank"] == 1
    placed = why.split(" placed on ")[1].split("?")[0]
    assert candidates[0]["pod"] == placed
    assert sum(row["runs"] for row in by_reason) == report.phases["Pending"]


@pytest.mark.parametrize(("url", "says"), [
    ("mysql://db/kruntimes", "unsupported journal URL"),
    ("postgresql://nobody@127.0.0.1:1/none", "cannot use the journal at postgresql://nobody@127.0.0.1:1/none"),
], ids=["an unsupported database", "a PostgreSQL server that does not answer"])
def test_a_journal_the_demo_cannot_use_is_one_line_and_exit_code_2(
        url: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--journal", url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kruntimes demo: ") and says in err[0]
    assert "--no-journal" in err[0] or "use sqlite:///PATH" in err[0]


def test_a_postgresql_url_without_its_driver_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "psycopg" else real(name, *a))
    with pytest.raises(ValueError, match=r"pip install 'kruntimes\[postgres\]'"):
        backends.parse_url("postgresql://db/kruntimes")
