"""Which journal a `kruntimes demo` run writes: one of its own, never an earlier run's by surprise.

Why: a second demo in the same directory appended to the first one's journal, and
`kruntimes history run demo/py-0042` then mixed the two runs' Runs of the same names
(issue 27). So, with no journal named, a demo whose default file already exists starts
the next free `kruntimes-journal-N.db` beside it; a journal named with `--journal` (or
`$KRUNTIMES_JOURNAL_URL`) that already holds records is refused unless `--append` says
that is what is wanted. Either way the demo says which journal it writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from kruntimes.journal.store import engines

#: How many numbered files are tried before the demo gives up looking for a free name.
MAX_NUMBERED = 999


class JournalInUse(Exception):
    """The named journal holds an earlier run's records and `--append` was not given."""


@dataclass(frozen=True)
class Choice:
    url: str
    note: str | None = None  # why this journal and not the default, for the person at the terminal


def choose(named: str | None, *, append: bool) -> Choice:
    """The journal to write: ``named`` (the flag, else the environment), else the default or the next free file."""
    if named:
        held = holds_records(named)
        if held and not append:
            raise JournalInUse("it already holds records (an earlier run?), and `kruntimes history` would mix both "
                               "runs' Runs: name another --journal, or pass --append to add this run to it")
        return Choice(named, "appended to the records already there (--append)" if held else None)
    default = Path(sa.make_url(engines.DEFAULT_URL).database or "")
    if not default.exists():
        return Choice(engines.DEFAULT_URL)
    for n in range(2, MAX_NUMBERED + 1):
        path = default.with_name(f"{default.stem}-{n}{default.suffix}")
        if not path.exists():
            return Choice(f"sqlite:///{path}", f"a new journal: {default} holds an earlier run")
    raise JournalInUse(f"{default} and {MAX_NUMBERED - 1} numbered journals beside it exist: "
                       "name one with --journal, or remove old ones")


def holds_records(url: str) -> bool:
    """Whether the journal at ``url`` holds any record (no schema yet: no; a missing SQLite file is not created)."""
    parsed = engines.parse_url(url)
    if parsed.get_backend_name() == "sqlite" and not Path(parsed.database or "").is_file():
        return False
    engine = engines.create_engine(parsed)
    try:
        with engine.connect() as conn:
            if not sa.inspect(conn).has_table("journal_records"):
                return False
            return conn.execute(sa.text("SELECT 1 FROM journal_records LIMIT 1")).first() is not None
    finally:
        engine.dispose()
