"""Fixtures of the journal tests: one contract, two backends.

``journal_url`` is parametrized over SQLite (a file in tmp_path) and PostgreSQL:
``KRUNTIMES_TEST_POSTGRES_URL`` if set, else a testcontainers PostgreSQL when a Docker
engine answers, else the PostgreSQL cases skip with the reason. Every PostgreSQL test
gets its own schema (via ``search_path`` in the URL), dropped afterwards.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kruntimes.journal.store import backends
from tests.journal.history_journal import fresh_postgres_schema

POSTGRES_ENV = "KRUNTIMES_TEST_POSTGRES_URL"


@pytest.fixture(autouse=True)
def no_thread_left_behind() -> Iterator[None]:
    """Fail any test that leaves a journal writer thread (or any new thread) running."""
    before = set(threading.enumerate())
    yield
    leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    for t in leaked:
        t.join(timeout=2)
    leaked = [t.name for t in leaked if t.is_alive()]
    assert leaked == [], f"threads left running: {leaked}"


@pytest.fixture(scope="session")
def postgres_base_url() -> Iterator[str]:
    url = os.environ.get(POSTGRES_ENV)
    if url:
        yield url
        return
    reason = _docker_unavailable()
    if reason:
        pytest.skip(f"PostgreSQL journal tests need {POSTGRES_ENV} or a Docker engine for testcontainers ({reason})")
    from testcontainers.postgres import PostgresContainer

    with PostgresContainer("postgres:16-alpine", driver="psycopg") as container:
        yield container.get_connection_url()


def _docker_unavailable() -> str | None:
    try:
        import docker

        docker.from_env(timeout=3).ping()
    except Exception as exc:  # no client library, no socket, daemon down ...
        return f"no Docker engine answered: {type(exc).__name__}"
    return None


@pytest.fixture
def postgres_url(postgres_base_url: str) -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh schema of its own."""
    with fresh_postgres_schema(postgres_base_url) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def journal_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/journal.db"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def journal(journal_url: str) -> Iterator[backends.Journal]:
    j = backends.Journal.open(journal_url)
    yield j
    j.close()
