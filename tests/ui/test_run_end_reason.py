"""Why a Run ended is in its history, on its page and survives the revision that added it (issue 27 item 4).

On the demo's journal: its batch tasks that exit 3 end ``ProcessFailed``, the Runs of
the trainer pod deleted midway end ``RuntimePodLost``, the typos end
``InvalidConfiguration``; none of them may read as a bare "Failed".
"""

from __future__ import annotations

import shutil
import sqlite3
import urllib.request
from pathlib import Path

import pytest

from kruntimes.cli import main as cli
from kruntimes.journal.store import migrate
from tests.ui.conftest import DemoJournal, Served

ENDS = {
    "a task that exited with code 3": ("batch-%", "ProcessFailed: the process exited with code 3"),
    "a Run whose pod was deleted": ("train-%", "RuntimePodLost: runtime pod trainer-"),
    "an invalid Run": ("typo-%", "InvalidConfiguration: invalid Run: spec."),
}


def failed_run(path: Path, pattern: str) -> str:
    """A demo Run matching ``pattern`` that the journal saw end Failed."""
    with sqlite3.connect(path) as db:
        (name,) = db.execute(
            "SELECT json_extract(payload, '$.object.name') FROM journal_records WHERE kind = 'mutation'"
            " AND json_extract(payload, '$.object.phase') = 'Failed'"
            " AND json_extract(payload, '$.object.name') LIKE ? ORDER BY lsn LIMIT 1", (pattern,)).fetchone()
    return str(name)


@pytest.mark.parametrize("pattern,says", ENDS.values(), ids=list(ENDS))
def test_history_run_says_why_a_run_ended(pattern: str, says: str, demo_journal: DemoJournal,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    name = failed_run(demo_journal.path, pattern)
    assert cli.main(["history", "run", f"demo/{name}", "--journal", demo_journal.url]) == 0
    out = capsys.readouterr().out
    ended = next(line for line in out.splitlines() if line.startswith("ended Failed at "))
    assert says in ended and "last output" not in ended


@pytest.mark.parametrize("pattern,says", ENDS.values(), ids=list(ENDS))
def test_the_run_page_says_why_a_run_ended(pattern: str, says: str, demo_journal: DemoJournal,
                                           served: Served) -> None:
    name = failed_run(demo_journal.path, pattern)
    with urllib.request.urlopen(f"{served.base}/run/demo/{name}", timeout=60) as response:
        body = response.read().decode("utf-8")
    assert "why it ended" in body and says in body


def test_the_revision_that_adds_the_reason_fills_it_for_runs_already_in_history(
        demo_journal: DemoJournal, tmp_path: Path) -> None:
    copy = tmp_path / "journal.db"
    shutil.copy(demo_journal.path, copy)
    url = f"sqlite:///{copy}"
    migrate.downgrade(url, "0008_chained_prunes")
    migrate.upgrade(url)
    with sqlite3.connect(copy) as db:
        reasons = dict(db.execute("SELECT name, end_reason FROM history_runs WHERE phase = 'Failed'").fetchall())
    assert reasons[failed_run(copy, "batch-%")] == "ProcessFailed"
    assert reasons[failed_run(copy, "train-%")] == "RuntimePodLost"
