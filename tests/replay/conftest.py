"""Fixtures of the replay tests: the journal suite's backends (SQLite, PostgreSQL) and a clean thread check.

Replay must work the same from either backend, so the fixtures are the journal
contract suite's own: ``journal_url`` is parametrized over SQLite and PostgreSQL
(``KRUNTIMES_TEST_POSTGRES_URL``, else testcontainers, else skipped with the reason).
"""

from __future__ import annotations

from tests.journal.conftest import (  # noqa: F401 - fixtures, re-exported for pytest
    journal_url,
    no_thread_left_behind,
    postgres_base_url,
    postgres_url,
)
