"""The database proxy the outage tests rely on: it forwards, it cuts both ways, it restores."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from kruntimes.journal.store import engines
from tests.integration.db_proxy import ProxiedJournal, proxied_journal  # noqa: F401 - the fixture


def _answers(url: str, connect_timeout: int = 2) -> bool:
    engine = sa.create_engine(engines.parse_url(url), connect_args={"connect_timeout": connect_timeout})
    try:
        with engine.connect() as conn:
            return bool(conn.execute(sa.text("SELECT 1")).scalar() == 1)
    except sa.exc.OperationalError:
        return False
    finally:
        engine.dispose()


def test_the_proxy_forwards_refuses_when_reset_hangs_when_blackholed_and_restores(
        proxied_journal: ProxiedJournal) -> None:
    url, proxy = proxied_journal.url, proxied_journal.proxy
    assert _answers(url)
    kept = sa.create_engine(engines.parse_url(url))
    try:
        conn = kept.connect()
        proxy.cut("reset")
        started = time.monotonic()
        assert not _answers(url)
        with pytest.raises(sa.exc.OperationalError):
            conn.execute(sa.text("SELECT 1"))  # the open connection was reset too
        assert time.monotonic() - started < 2.0  # refused at once, no timeout waited out
        conn.close()
        proxy.restore()
        assert _answers(url)
        proxy.cut("blackhole")
        started = time.monotonic()
        assert not _answers(url, connect_timeout=2)
        assert time.monotonic() - started >= 1.5  # found out only through the client's own timeout
        proxy.restore()
        assert _answers(url) and _answers(proxied_journal.direct)
    finally:
        kept.dispose()
