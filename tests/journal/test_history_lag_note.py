"""`kruntimes history` says on stderr when the history tables trail the records, and only then.

A journal whose first half was stored inline and second half by a ``follow`` writer
holds the first half's rows, exactly as a journal that stored only the first half
inline does: every command must print the same stdout on both, and on the trailing
one a single note on stderr first, with the gap in LSNs and epochs.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from kruntimes.cli import main as cli
from kruntimes.journal.history import indexer
from kruntimes.journal.store import backends
from tests.journal.factories import T0, record
from tests.journal.history_journal import END, NS, PHASE1, Generated
from tests.journal.test_history_follow import BACKENDS, index, lag, store
from tests.journal.test_history_tables import empty_journal_url

pytest_plugins = ("tests.journal.history_fixtures",)

WINDOW = ("--since", PHASE1.isoformat(), "--until", END.isoformat())
COMMANDS = [
    ("cycles", "--limit", "500"),
    ("cycles", "-o", "json", "--limit", "500"),
    ("waits", "-o", "yaml"),
    ("decisions", *WINDOW),
    ("churn", *WINDOW, "-o", "json"),
    ("conflicts", *WINDOW),
    ("held", f"{NS}/cpu-001", "--at", END.isoformat()),
    ("pod", f"{NS}/cpu-001", "--json"),
]


def run(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["history", *argv, "--journal", url])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_history_command_notes_how_far_the_tables_trail_and_prints_the_same_answer(
        backend: str, generated: Generated, request: pytest.FixtureRequest,
        capsys: pytest.CaptureFixture[str]) -> None:
    half = len(generated.records) // 2
    indexed, pending = generated.records[:half], generated.records[half:]
    some_run = next(r for r in sorted(generated.truth.placed))
    with empty_journal_url(request, backend) as trailing, empty_journal_url(request, backend) as caught_up:
        store(trailing, indexed, history="inline")
        store(trailing, pending, history="follow")
        store(caught_up, indexed, history="inline")
        note = (f"note: the history tables trail the journal in 1 epoch(s) by {len(pending)} LSNs "
                f"(from LSN {pending[0].lsn} of epoch {pending[0].incarnation[:12]}), so answers leave out those "
                'records (stored with --journal-history follow); run "kruntimes journal index" to bring the tables '
                "up to date\n")
        assert lag(trailing) == [indexer.Lag(indexed[0].incarnation, indexed[-1].lsn, pending[-1].lsn,
                                             indexed[0].lsn)]
        for argv in [*COMMANDS, ("run", f"{NS}/{some_run}", "--json")]:
            code, out, err = run(capsys, trailing, *argv)
            assert (code, out) == run(capsys, caught_up, *argv)[:2], argv
            assert err.startswith(note) and err.count("note: the history tables trail") == 1, argv
            assert "trail" not in out


def test_the_note_goes_once_the_indexer_has_caught_up_and_an_inline_journal_never_has_one(
        generated: Generated, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]) -> None:
    with empty_journal_url(request, "sqlite") as followed, empty_journal_url(request, "sqlite") as inline:
        store(followed, generated.records, history="follow")
        store(inline, generated.records, history="inline")
        assert "trail the journal in 1 epoch(s)" in run(capsys, followed, "cycles")[2]
        index(followed, 1000)
        for url in (followed, inline):
            for argv in COMMANDS:
                code, out, err = run(capsys, url, *argv)
                assert "note:" not in err and "trail" not in err, (url, argv)
        assert run(capsys, followed, "cycles", "--json")[1] == run(capsys, inline, "cycles", "--json")[1]


def test_the_gap_is_summed_over_every_lagging_epoch() -> None:
    lagging = [indexer.Lag("a", 10, 25, 1), indexer.Lag("b", None, 60, 41)]  # 15 + 20 LSNs, oldest from LSN 11
    assert indexer.trail(lagging) == indexer.Trail(lsns=35, epochs=2, from_epoch="a", from_lsn=11)
    assert indexer.describe(lagging) == ("the history tables trail the journal in 2 epoch(s) by 35 LSNs "
                                         "(from LSN 11 of epoch a)")
    assert indexer.trail([]) is None and indexer.advice([]) is None
    assert indexer.describe([]) == "the history tables hold every stored record"


def test_the_gap_starts_in_the_oldest_lagging_epoch_not_at_the_lowest_bare_lsn(journal_url: str) -> None:
    # The newer epoch, begun while the database was away, numbered from 1: LSN 1 is not the oldest record.
    older, newer = "b" * 32, "a" * 32
    journal = backends.Journal.open(journal_url, history="follow")
    try:
        journal.append_batch([record(n, incarnation=older) for n in range(10, 15)])
        journal.append_batch([record(n, incarnation=newer, recorded_at=T0 + timedelta(hours=1, milliseconds=n))
                              for n in range(1, 4)])
        lagging = journal.history_lag()
    finally:
        journal.close()
    assert [e.epoch for e in lagging] == [older, newer]
    assert indexer.describe(lagging).endswith(f"by 8 LSNs (from LSN 10 of epoch {older[:12]})")
