"""History tables derived after the fact: rebuilt whole, or following the journal a chunk at a time.

The history rows of a batch cost the database more than the batch's records do (more
rows, and their indexes), so a writer that derives them in the records' own transaction
(``inline``, the default) stores records at a fraction of the rate it could. With
``follow`` it stores the records alone, and ``kruntimes journal index`` derives their
rows later, epoch by epoch in LSN order as ``rebuild_history`` does, in chunks of its own
transactions: the tables trail the journal by what the indexer has not reached yet,
and nothing is lost or applied out of order.

``journal_epochs.history_lsn`` is the hand-over: the epoch's last record whose rows are
written. An inline writer moves it to the head in the same transaction as the rows; it
derives a batch only while no epoch lags (every stored record is in the tables), so rows
still go in LSN order after a stretch the indexer owns, and it takes the work back on
its own once the indexer has caught up. The indexer reads only the epochs that lag and
moves their ``history_lsn`` in the same transaction as the rows it writes.

Rows carry a Run's state from record to record (its open wait episode, its placement),
so records must be applied epoch by epoch in epoch order. An older epoch's records that
arrive after a newer epoch's rows are written (a replica draining a dead epoch's spool,
or a demoted leader's tail) cannot be applied after them: the writer stores them only
(``standing``), the epoch lags as ``late``, and the indexer rebuilds the tables whole
(``rebuild_to_heads``) instead of appending out of order.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import NamedTuple

import sqlalchemy as sa

from kruntimes.journal import records
from kruntimes.journal.history import derive, order, previous
from kruntimes.journal.store import backend_postgres, backend_sqlite, schema

#: ``inline``: the writer derives each batch's history rows in its transaction; ``follow``:
#: it stores records only and ``kruntimes journal index`` derives the rows afterwards.
HISTORY_MODES = ("inline", "follow")
DEFAULT_HISTORY = "inline"
#: Records read and applied at a time when the history tables are rebuilt.
REINDEX_CHUNK = 5_000


def check_mode(mode: str) -> str:
    if mode not in HISTORY_MODES:
        raise ValueError(f"journal history must be one of {', '.join(HISTORY_MODES)}, not {mode!r}")
    return mode


_e = schema.journal_epochs
#: The PostgreSQL advisory lock an indexer's transaction holds ("kruntime" in ASCII).
_INDEXER_LOCK = 0x6B72756E74696D65
#: The PostgreSQL advisory lock an inline writer holds from its check to its commit ("kruntimw").
_WRITERS_LOCK = 0x6B72756E74696D77
_LAGS = sa.or_(_e.c.history_lsn.is_(None), _e.c.history_lsn < _e.c.head_lsn)


class Lag(NamedTuple):
    """An epoch whose records are not all in the history tables yet."""

    epoch: str
    history_lsn: int | None  # the last record whose rows are written (None: none of the epoch's)
    head_lsn: int
    first_lsn: int
    late: bool = False  # older than an epoch whose rows are written: only a rebuild puts it in order


#: How a writer stores a batch (``standing``): rows inline; records only while the tables
#: trail; records only because an older epoch's records arrived after a newer one's rows.
INLINE, TRAILING, LATE = "inline", "trailing", "late"
#: What an inline writer that leaves its rows to the indexer logs, once.
WRITER_NOTES = {
    TRAILING: "the history tables trail the journal (records stored with --journal-history follow): this writer "
              "leaves its records' rows to `kruntimes journal index` until it catches up",
    LATE: "records of an older epoch arrived after a newer epoch's history rows: this writer leaves its records' "
          "rows to `kruntimes journal index`, which rebuilds the tables in epoch order",
}


def lagging(conn: sa.Connection) -> bool:
    """Whether any epoch has records the history tables do not hold yet (one indexed probe)."""
    return conn.execute(sa.select(sa.literal(1)).where(_LAGS).limit(1)).first() is not None


def lag(conn: sa.Connection) -> list[Lag]:
    """The epochs the history tables trail, oldest first (``history.order``: LSNs overlap between epochs).

    A lagging epoch older than one with rows written is ``late``.
    """
    rows = conn.execute(sa.select(_e.c.epoch, _e.c.history_lsn, _e.c.head_lsn, _e.c.first_lsn, _LAGS)).all()
    behind = [Lag(epoch, None if done is None else int(done), int(head), int(first))
              for epoch, done, head, first, lags in rows if lags]
    if not behind:
        return behind
    written = [epoch for epoch, done, _head, _first, _lags in rows if done is not None]
    spans = order.spans_query()  # probes of the key, not a pass over the records: readers ask this often
    found = conn.execute(spans.where(spans.selected_columns.epoch.in_(sorted({e.epoch for e in behind}
                                                                             | set(written)))))
    starts = order.ordered((row.epoch, row.first_lsn, row.first_at) for row in found)
    position = {s.epoch: at for at, s in enumerate(starts)}
    behind = [e._replace(late=any(position.get(w, -1) > position.get(e.epoch, -1) for w in written)
                         and _derives(conn, e))
              for e in behind]
    return sorted(behind, key=lambda e: (position.get(e.epoch, -1), e.first_lsn, e.epoch))  # none left: first


def _derives(conn: sa.Connection, e: Lag) -> bool:
    """Whether a record of ``e`` not in the tables yet has rows (an ``end`` alone is in order anywhere)."""
    r = schema.journal_records
    after = e.history_lsn if e.history_lsn is not None else order.FIRST_SCHEDULER_LSN - 1
    return conn.execute(sa.select(sa.literal(1)).where(
        r.c.incarnation == e.epoch, r.c.lsn > after, r.c.kind.in_(sorted(derive.KINDS))).limit(1)).first() is not None


#: The epochs that lag or are not the batch's (built once: the writer asks with every batch).
_STANDING = sa.select(_e.c.epoch, _LAGS).where(sa.or_(_LAGS, _e.c.epoch.not_in(sa.bindparam("batch", expanding=True))))


def standing(conn: sa.Connection, batch: Collection[str], known: dict[str, order.EpochStart]) -> str:
    """How a writer stores a batch of ``batch``'s epochs, its records already inserted in ``conn``'s transaction.

    ``INLINE`` while every stored record is in the tables and no other epoch is newer
    than the batch's oldest; ``TRAILING`` while an epoch lags; ``LATE`` when an epoch
    whose rows are written is newer. One query on ``journal_epochs`` (in a journal of
    one epoch it returns nothing); the epochs' starts (their first records, which never
    change) are looked up once each and kept in ``known``. ``batch`` empty (nothing in it
    derives a row): only whether an epoch lags.

    On PostgreSQL the check waits for any other inline writer's transaction to end (an
    advisory lock held to commit): under READ COMMITTED it then sees what that writer
    committed. Without it, two replicas committing at once (a newer term's first batch, an
    older term's late tail) could each miss the other's rows and both derive inline. On
    SQLite the records' insert already holds the database's one write lock.
    """
    _hold(conn, _WRITERS_LOCK)
    if not batch:
        return TRAILING if lagging(conn) else INLINE
    others = conn.execute(_STANDING, {"batch": sorted(batch)}).all()
    if any(lags for _epoch, lags in others):
        return TRAILING
    if not others:
        return INLINE
    for epoch in [*batch, *(epoch for epoch, _lags in others)]:
        if epoch not in known and (start := order.first_record(conn, epoch)) is not None:
            known[epoch] = start
    mine = min((known[e] for e in batch if e in known), default=None)
    return LATE if mine is not None and any(known.get(e, mine) > mine for e, _lags in others) else INLINE


#: The command that brings the tables up to date, as the notes to readers name it.
CATCH_UP = "kruntimes journal index"


class Trail(NamedTuple):
    """How far the history tables trail the records, summed over the lagging epochs."""

    lsns: int  # records (LSNs) stored but not yet in the tables
    epochs: int
    from_epoch: str  # the oldest record not yet in the tables: (epoch, LSN), its identity
    from_lsn: int


def trail(lag: list[Lag]) -> Trail | None:
    """``lag`` (oldest epoch first, as ``lag`` gives it) summed up (None: caught up)."""
    if not lag:
        return None
    start = [(e.history_lsn if e.history_lsn is not None else e.first_lsn - 1) for e in lag]
    return Trail(sum(e.head_lsn - s for e, s in zip(lag, start)), len(lag), lag[0].epoch, start[0] + 1)


def describe(lag: list[Lag]) -> str:
    """Where the history tables stand against the stored records (``kruntimes journal index`` prints it)."""
    t = trail(lag)
    if t is None:
        return "the history tables hold every stored record"
    return (f"the history tables trail the journal in {t.epochs} epoch(s) by {t.lsns} LSNs "
            f"(from LSN {t.from_lsn} of epoch {t.from_epoch[:12]})")


def advice(lag: list[Lag]) -> str | None:
    """What a reader of the history tables is told while they trail: how far, why, and what catches up.

    One sentence, shared by ``kruntimes history`` (on stderr) and the web view (a banner).
    """
    if not lag:
        return None
    if any(e.late for e in lag):
        return (f"{describe(lag)}, so answers leave out those records (an older epoch's records were stored after "
                f'a newer epoch\'s rows); run "{CATCH_UP}", which rebuilds the tables in epoch order')
    return (f"{describe(lag)}, so answers leave out those records (stored with --journal-history follow); "
            f'run "{CATCH_UP}" to bring the tables up to date')


def rebuild_to_heads(conn: sa.Connection, *, chunk_size: int = REINDEX_CHUNK) -> int:
    """Rebuild the tables from every epoch's records up to its head as read first; mark those heads.

    What the indexer does when an epoch is ``late``. A writer may store records meanwhile
    (PostgreSQL): those past the heads read stay lagging for the next chunk rather than
    being marked as indexed without having been read.
    """
    take_turn(conn)
    heads = {epoch: int(head) for epoch, head in conn.execute(sa.select(_e.c.epoch, _e.c.head_lsn))}
    read = rebuild_history(conn, chunk_size=chunk_size, upto=heads)
    _mark(conn, heads)
    return read


def rebuild_all(conn: sa.Connection, *, chunk_size: int = REINDEX_CHUNK) -> int:
    """``journal reindex``: ``rebuild_to_heads`` with inline writers held off until ``conn`` commits.

    Unlike the indexer's rebuild (which runs only while an epoch is late, when no writer
    derives inline), a reindex can meet a writer deriving its batch's rows inline. On
    PostgreSQL that writer's rows, committed after the tables were emptied, would stay
    beside the rebuilt ones, and a head marked as read at the end could cover records
    the rebuild never read. So the rebuild takes the writers' lock (``standing``'s) for
    its transaction: an inline writer waits at its check, then finds its epoch caught up
    to the head it has not yet moved, and derives its batch itself. A ``follow`` writer
    never waits: what it stores after the heads were read stays lagging for the indexer.
    SQLite: ``take_turn``'s write lock already holds every writer off.
    """
    take_turn(conn)
    _hold(conn, _WRITERS_LOCK)
    return rebuild_to_heads(conn, chunk_size=chunk_size)


def take_turn(conn: sa.Connection) -> None:
    """Wait until no other indexer or rebuild works on the history tables, for the rest of ``conn``'s transaction.

    SQLite: a write first, so the transaction holds the write lock throughout (one that
    read first could not write once the writer committed meanwhile). PostgreSQL: a
    transaction-scoped advisory lock, which the writers never take.
    """
    if conn.dialect.name == "postgresql":
        _hold(conn, _INDEXER_LOCK)
    else:
        conn.execute(sa.update(_e).where(sa.false()).values(history_lsn=_e.c.history_lsn))


def _hold(conn: sa.Connection, key: int) -> None:
    """PostgreSQL: take the transaction-scoped advisory lock ``key`` (waiting for it) until ``conn``'s
    transaction ends. SQLite: nothing (a writing transaction already holds the one write lock)."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


def index_chunk(conn: sa.Connection, chunk_size: int) -> int | None:
    """Derive the rows of the next ``chunk_size`` records the tables lack, in ``conn``'s transaction.

    Records are taken past each lagging epoch's ``history_lsn`` epoch by epoch, oldest
    first, each in LSN order - the order ``rebuild_history`` applies them in - and each
    epoch's ``history_lsn`` moves to the last of its records taken. Returns how many
    records were read (0: caught up), or None, having written nothing, when an epoch is
    ``late``: its records would go after a newer epoch's, and only ``rebuild_to_heads``
    puts them in order.
    """
    take_turn(conn)
    behind = lag(conn)  # oldest first
    if not behind:
        return 0
    if any(e.late for e in behind):
        return None
    r = schema.journal_records
    # Payloads only of the kinds that have rows: a checkpoint's is large and derives nothing.
    payload = sa.case((r.c.kind.in_(sorted(derive.KINDS)), r.c.payload), else_=sa.literal(""))
    columns = (r.c.lsn, r.c.incarnation, r.c.recorded_at, r.c.kind, r.c.schema_version, payload,
               r.c.payload_sha256)
    page: list[records.EncodedRecord] = []
    last: dict[str, int] = {}
    for epoch, done, head, _first, _late in behind:
        room = chunk_size - len(page)
        if room <= 0:
            break
        query = sa.select(*columns).where(r.c.incarnation == epoch)
        if done is not None:
            query = query.where(r.c.lsn > done)
        rows = [records.EncodedRecord(*row) for row in conn.execute(query.order_by(r.c.lsn).limit(room))]
        page.extend(rows)
        if rows:
            last[epoch] = rows[-1].lsn
        if len(rows) < room:
            # Read to its end: complete through its head (the head and its records commit
            # together, so every record up to the head read earlier was visible), even
            # when the head names a record no longer stored.
            last[epoch] = max(last.get(epoch, head), head)
    _apply(conn, page, link=True)
    if not last:
        return 0
    _mark(conn, last)
    return len(page)


def _mark(conn: sa.Connection, done: Mapping[str, int]) -> None:
    """Each epoch's records up to ``done[epoch]`` are in the tables."""
    if done:
        conn.execute(sa.update(_e).where(_e.c.epoch == sa.bindparam("b_epoch"))
                     .values(history_lsn=sa.bindparam("b_lsn")),
                     [{"b_epoch": epoch, "b_lsn": lsn} for epoch, lsn in done.items()])


def rebuild_history(conn: sa.Connection, *, chunk_size: int = REINDEX_CHUNK,
                    upto: Mapping[str, int] | None = None) -> int:
    """Empty the history tables and derive them again from every stored record, epoch by epoch.

    Runs in the caller's transaction (a migration that fills the tables, or
    ``Journal.reindex``); returns how many records were read. The epochs go oldest first
    (``history.order``: by their first record's time, which is chained), each in LSN order:
    the order the writer stored them in - an epoch's records in LSN order, and a term's
    writer drains the epochs before it from its spool before its own. (epoch, LSN) is
    the identity: LSNs of epochs begun while the database was away overlap, so an order
    on the bare LSN would interleave them. The records are read in pages of
    ``chunk_size`` and each page is applied as the writer applies a batch, which gives
    the same tables as the writer's own batches did. With ``upto``, only the epochs it
    names, each up to its LSN there.
    """
    for table in reversed(derive.TABLES):
        conn.execute(sa.delete(table))
    r = schema.journal_records
    columns = (r.c.lsn, r.c.incarnation, r.c.recorded_at, r.c.kind, r.c.schema_version, r.c.payload,
               r.c.payload_sha256)
    read = 0
    for start in order.starts(conn):
        if upto is not None and start.epoch not in upto:
            continue
        after = order.FIRST_SCHEDULER_LSN - 1
        while True:
            query = sa.select(*columns).where(r.c.incarnation == start.epoch, r.c.lsn > after,
                                              r.c.kind.in_(sorted(derive.KINDS)))
            if upto is not None:
                query = query.where(r.c.lsn <= upto[start.epoch])
            page = [records.EncodedRecord(*row) for row in conn.execute(query.order_by(r.c.lsn).limit(chunk_size))]
            if not page:
                break
            read += len(page)
            after = page[-1].lsn
            _apply(conn, page, link=False)
    previous.link_stored(conn)  # each placement's previous cycle, now that every cycle is there
    return read


def _apply(conn: sa.Connection, page: list[records.EncodedRecord], *, link: bool) -> None:
    """Write the history rows of ``page`` (stored records, in LSN order), as the writer writes a batch's.

    ``link``: find each placement's previous cycle now (the indexer); a rebuild finds them
    all at its end instead (``previous.link_stored``).
    """
    backend = backend_sqlite if conn.dialect.name == "sqlite" else backend_postgres
    history = derive.derive(page, stamp=backend.STAMP)
    if history:
        if link:
            previous.link(conn, history)
        backend.insert_derived(conn.connection.driver_connection, history)
