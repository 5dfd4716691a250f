"""The journal's writer: from a scheduler's change to a durable record.

The session opens a journal for a scheduler; the recorder turns its changes into
records; a writer (on a thread, or in a child process by default) links them, stores
them through ``journal.store`` and, while the database is away, spools them to disk
and drains the spool later. See docs/architecture.md, "The journal".
"""
