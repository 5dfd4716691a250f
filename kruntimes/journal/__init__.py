"""The audit journal: every watch event and decision of the scheduler, in LSN order (SPEC §5).

Three rooms, and what they share:

- ``store``: the journal's database - URL and engine, the SQLite and PostgreSQL backends
  (``Journal``), schema and migrations, bounded database calls.
- ``write``: the writer the scheduler appends to - session, process or thread writer,
  spool, chain linking.
- ``history``: the typed history tables, how records become their rows (``derive``,
  ``indexer``, ``check``), and the one query layer ``kruntimes history`` and the web view
  both read.
- Beside them: ``records`` (``JournalRecord`` and its canonical encoding), ``chain`` and
  ``linker`` (the hash chain), ``prune``, ``errors``. ``backends``, ``schema``,
  ``derived`` and ``views`` at this level are for the Alembic revisions already shipped.

Importing the package imports nothing heavy; import the module you need.
"""
