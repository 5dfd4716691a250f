"""Each `kruntimes demo` writes a journal of its own and says which (issue 27 item 6).

A second demo in the same directory used to append to the first one's journal, so
`kruntimes history run demo/...` mixed both runs' Runs of the same names.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from kruntimes import demo
from kruntimes.cli.main import main
from kruntimes.journal.store import engines


@pytest.fixture
def small_demo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """`kruntimes demo` at a twentieth of its workload, in an empty directory, without the environment's journal."""
    real = demo.run
    monkeypatch.setattr(demo, "run", lambda **kwargs: real(**kwargs, scale=0.05))
    monkeypatch.delenv("KRUNTIMES_JOURNAL_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def epochs(path: Path) -> int:
    engine = engines.create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT count(DISTINCT incarnation) FROM journal_records")).scalar_one())
    finally:
        engine.dispose()


def test_a_second_demo_in_the_same_directory_starts_a_journal_of_its_own_and_says_so(
        small_demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    first = capsys.readouterr().out
    assert main(["demo"]) == 0
    second = capsys.readouterr().out
    assert "journal: sqlite:///kruntimes-journal.db" in first and "--journal" not in first.split("Ask the")[1]
    assert "journal: sqlite:///kruntimes-journal-2.db (a new journal: kruntimes-journal.db holds an earlier run)" \
        in second
    assert "kruntimes history cycles --outcome unschedulable --journal sqlite:///kruntimes-journal-2.db" in second
    assert epochs(small_demo / "kruntimes-journal.db") == epochs(small_demo / "kruntimes-journal-2.db") == 1


def test_the_demo_ends_by_saying_how_to_see_its_journal_in_a_browser(
        small_demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "  kruntimes ui   then open http://127.0.0.1:8080/" in out


def test_a_named_journal_that_holds_an_earlier_run_is_refused_unless_appending(
        small_demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{small_demo}/mine.db"
    assert main(["demo", "--journal", url]) == 0
    capsys.readouterr()
    assert main(["demo", "--journal", url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds records" in err[0] and "--append" in err[0]
    assert epochs(small_demo / "mine.db") == 1
    assert main(["demo", "--journal", url, "--append"]) == 0
    assert "(appended to the records already there (--append))" in capsys.readouterr().out
    assert epochs(small_demo / "mine.db") == 2
