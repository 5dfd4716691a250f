"""The audit journal: every watch event and decision of the scheduler, in LSN order (SPEC §5).

Modules, from the inside out:

- ``records``: ``JournalRecord``, the canonical encoding (``encode``/``decode``).
- ``schema``: SQLAlchemy models; ``migrate`` and ``migrations/`` (Alembic) own the DDL;
  ``schema_wait`` waits for the schema in the background, never before scheduling.
- ``backends``: ``Journal`` over SQLite (``backend_sqlite``) and PostgreSQL
  (``backend_postgres``).
- ``spool``: the local append-only file records spill to while the database is away.
- ``writer``: ``JournalWriter``, the bounded buffer and background thread the
  scheduler appends to; ``recovery`` drains a standby's spool left by a killed term.

Importing the package imports nothing heavy; import the module you need.
"""
