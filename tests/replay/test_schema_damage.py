"""A dropped table or column of the journal is damage (exit 3), not a journal that cannot be read (exit 2).

Someone with write access who drops the chain column, a head column or the heads table
leaves nothing for verify to check there; verify names what is missing when the schema
says it is at the revision that has it (issue 22 item 10). Both backends.
"""

from __future__ import annotations

import argparse
from datetime import timedelta

import pytest
import sqlalchemy as sa

from kruntimes.cli import replay_cmd
from kruntimes.journal.store import backends, engines
from kruntimes.journal.store.backends import Journal
from tests.replay.test_newest_epoch import AT, epoch

DROPS = {
    "the chain column dropped": ("ALTER TABLE journal_records DROP COLUMN chain_hash",
                                 "the table journal_records has no column chain_hash"),
    "a head column dropped": ("ALTER TABLE journal_epochs DROP COLUMN head_hash",
                              "the table journal_epochs has no column head_hash"),
    "the heads table dropped": ("DROP TABLE journal_epochs", "the table journal_epochs is missing"),
}


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="kruntimes")
    replay_cmd.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["replay", *argv])
    return int(args.run(args))


@pytest.mark.parametrize("case", DROPS.values(), ids=list(DROPS))
def test_a_dropped_table_or_column_is_damage_named_by_verify(journal_url: str, case: tuple[str, str],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    statement, words = case
    journal = Journal.open(journal_url)
    try:
        journal.append_batch(epoch("older", 1, AT, ended=True))
        journal.append_batch(epoch("newer", 32, AT + timedelta(hours=1), ended=False))
    finally:
        journal.close()
    assert _run("verify", "--journal", journal_url, "--workers", "1") == 0
    capsys.readouterr()
    engine = engines.create_engine(journal_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(statement))
    finally:
        engine.dispose()
    assert _run("verify", "--journal", journal_url, "--workers", "1") == replay_cmd.EXIT_DAMAGED
    out = capsys.readouterr().out
    assert f"problem journal schema: damaged schema: {words}" in out and "DAMAGED" in out
