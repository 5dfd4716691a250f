"""Fixtures over the scheduler-written journal of ``history_journal``, as a pytest plugin.

Test modules load it with ``pytest_plugins``; it is a module of its own so that pytest
imports it first (and can rewrite its asserts).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.journal.history_journal import Generated, fresh_postgres_schema, generate, load


@pytest.fixture(scope="session")
def generated() -> Generated:
    return generate()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def history_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                generated: Generated) -> Iterator[str]:
    """The generated journal, loaded once per test module into SQLite and into PostgreSQL."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('history')}/journal.db"
        load(url, generated)
        yield url
        return
    with fresh_postgres_schema(request.getfixturevalue("postgres_base_url")) as url:
        load(url, generated)
        yield url
