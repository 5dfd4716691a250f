"""Are the history tables what the records derive? (`kruntimes journal reindex --check`)

SPEC §5 "Crash vs loss" (amended 2026-12-04): `verify` checks, or names the command
that checks, that the history tables are what the records derive. The tables are what
`kruntimes history` and the UI read; anyone with write access can change a row there
without touching a record, and `verify`, which proves the records, would not notice.

`check` rebuilds the tables exactly as `kruntimes journal reindex` does
(`indexer.rebuild_history`), inside a transaction it then rolls back, so the stored
tables are never changed. It compares each table before and after in key order, as
digests of runs of `BUCKET` rows (memory stays bounded however long the journal): the
same digests are the same rows, and the first run that differs says where to look.

What it cannot compare, it says: tables that trail the records (a scheduler with
`--journal-history follow` whose `kruntimes journal index` has not caught up) would
differ by what is not indexed yet; and after a prune the counts
(`history_pod_hours`, `history_rejection_hours`, `history_epochs`) keep what was
pruned until the next `journal reindex` (docs/journal.md), so on a pruned journal a
difference there is reported as such, not as tampering. Like `reindex`, it holds the
history tables' turn while it runs (an indexer waits; on SQLite the writer's batches
wait, and a busy scheduler spools).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from kruntimes.journal import errors, prune_record
from kruntimes.journal.history import indexer, tables
from kruntimes.journal.store import backends, schema

#: Rows per digest: the first differing run of this many rows is what a difference names.
BUCKET = 1000
#: Tables a prune leaves unlike a rebuild of what is left: the counts keep counting what it removed, and a
#: pending episode that began before the cut is gone while a rebuild starts one at the first Pending cycle left.
AFTER_PRUNE = frozenset({tables.pod_hours.name, tables.rejection_hours.name, tables.epochs.name,
                         tables.waits.name})


@dataclass(frozen=True)
class Difference:
    """A table whose stored rows are not the ones the records derive."""

    table: str
    stored: int  # rows stored
    derived: int  # rows the records derive
    near: tuple[Any, ...] | None  # the key the first differing run of rows starts at (stored or derived)
    after_prune: bool = False  # a count a prune left counting what it removed (not tampering)


@dataclass(frozen=True)
class HistoryCheck:
    """What `check` found."""

    records: int  # records the rebuild read
    tables: int  # tables compared
    differences: tuple[Difference, ...] = ()
    trailing: tuple[indexer.Lag, ...] = ()  # the tables trail the records: nothing was compared
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.trailing and all(d.after_prune for d in self.differences)


def check(journal: backends.Journal, *, chunk_size: int = indexer.REINDEX_CHUNK) -> HistoryCheck:
    """Compare every history table with what the stored records derive; change nothing."""
    started = time.perf_counter()
    try:
        with journal.engine.connect() as conn:
            tx = conn.begin()
            try:
                indexer.take_turn(conn)
                lag = indexer.lag(conn)
                if lag:
                    return HistoryCheck(0, 0, trailing=tuple(lag), seconds=time.perf_counter() - started)
                pruned = conn.execute(sa.select(sa.func.count()).where(
                    schema.journal_records.c.lsn == prune_record.PRUNE_LSN)).scalar() != 0
                cut = prune_record.cuts(conn)
                stored = {t.name: _digests(conn, t, cut) for t in tables.TABLES}
                read = indexer.rebuild_history(conn, chunk_size=chunk_size)
                rebuilt = {t.name: _digests(conn, t, cut) for t in tables.TABLES}
            finally:
                tx.rollback()  # the stored tables stay as they were
    except sa_exc.DBAPIError as exc:
        raise errors.JournalUnavailable(f"cannot check the history tables ({journal.backend}): {exc.orig}") from exc
    differences = []
    for name in tables.TABLE_NAMES:
        (n_stored, d_stored), (n_rebuilt, d_rebuilt) = stored[name], rebuilt[name]
        if d_stored != d_rebuilt:
            at = next(i for i in range(max(len(d_stored), len(d_rebuilt)))
                      if i >= len(d_stored) or i >= len(d_rebuilt) or d_stored[i] != d_rebuilt[i])
            near = (d_stored[at] if at < len(d_stored) else d_rebuilt[at])[0]
            differences.append(Difference(name, n_stored, n_rebuilt, near, after_prune=pruned and name in AFTER_PRUNE))
    return HistoryCheck(read, len(tables.TABLES), tuple(differences), seconds=time.perf_counter() - started)


def _digests(conn: sa.Connection, table: sa.Table,
             cut: dict[str, int]) -> tuple[int, list[tuple[tuple[Any, ...], str]]]:
    """The table's row count and, in key order, (first key, digest) of each run of BUCKET rows.

    A placement whose cycle read a state before its epoch's cut is compared without its
    ``requests``: the reservation they come from may be among the pruned records.
    """
    key = [c for c in table.primary_key.columns]
    width = len(key)
    columns = [*key, *[c for c in table.columns if c not in key]]
    stmt = sa.select(*columns).order_by(*key)
    blank = None
    if table is tables.placements and cut:
        blank = ([c.name for c in columns].index("epoch"), [c.name for c in columns].index("snapshot_lsn"),
                 [c.name for c in columns].index("requests"))
    count, runs = 0, []
    digest, first = hashlib.sha256(), None
    for row in conn.execute(stmt.execution_options(yield_per=5000)):
        if first is None:
            first = tuple(row[:width])
        values = list(row)
        if blank is not None and values[blank[1]] is not None and values[blank[1]] < cut.get(values[blank[0]], 0):
            values[blank[2]] = None
        digest.update(repr(tuple(values)).encode("utf-8"))
        count += 1
        if count % BUCKET == 0:
            runs.append((first, digest.hexdigest()))
            digest, first = hashlib.sha256(), None
    if first is not None:
        runs.append((first, digest.hexdigest()))
    return count, runs
