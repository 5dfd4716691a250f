"""Fixtures of the web view's tests: the demo's journal, and the view serving it on a free port.

The journal is written by the real demo (controller, scheduler, runtimed, injected
409 conflicts) at a tenth of its workload, once per test session; the view is the
real WSGI application on the standard library's server, in a thread, read-only.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from kruntimes import demo
from kruntimes.ui import queries, server, whatif_page


@dataclass(frozen=True)
class DemoJournal:
    url: str
    path: Path
    report: demo.Report


@pytest.fixture(scope="session")
def demo_journal(tmp_path_factory: pytest.TempPathFactory) -> DemoJournal:
    path = tmp_path_factory.mktemp("ui-demo") / "journal.db"
    url = f"sqlite:///{path}"
    report = demo.run(workers=2, conflict_rate=0.05, scale=0.1, journal=url)
    return DemoJournal(url, path, report)


@dataclass
class Served:
    base: str
    app: server.App


@pytest.fixture(scope="module")
def served(demo_journal: DemoJournal) -> Iterator[Served]:
    reader = queries.open_reader(demo_journal.url)
    app = server.App(reader, label="demo")
    httpd = server.make_server(app, "127.0.0.1", 0)
    thread = threading.Thread(target=httpd.serve_forever, name="ui-test-server", daemon=True)
    thread.start()
    try:
        yield Served(f"http://127.0.0.1:{httpd.server_port}", app)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
        reader.close()


def whatif_window(reader: queries.Reader) -> tuple[datetime, datetime]:
    """A window from the journal's start holding at most what the what-if page replays at once.

    The demo's cycle count varies from run to run (conflicts, retries) around the page's
    limit, so a test that asks for a replay picks a window under it rather than the whole journal.
    """
    bounds = reader.bounds()
    assert bounds is not None
    since, until = bounds.first_at, bounds.last_at + timedelta(seconds=1)
    while reader.cycles_between(since, until) > whatif_page.MAX_CYCLES:
        until = since + (until - since) * 0.8
    return since, until
