"""`kruntimes journal index --follow` as a long-running process: it keeps up with a ``follow`` writer,
serves its metrics, rides out a database outage and stops cleanly on SIGTERM.

The process is the real command in a child interpreter; the writer is a journal in
``follow`` mode in the test. The tables it builds must equal an inline writer's.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kruntimes.journal.store import backends
from tests.integration.db_proxy import POSTGRES_ENV, ProxiedJournal, proxied_journal  # noqa: F401 - the fixture
from tests.journal.history_journal import Generated, fresh_postgres_schema
from tests.journal.test_history_follow import inline_tables, lag
from tests.journal.test_history_tables import snapshot, write_through_writer

pytest_plugins = ("tests.journal.history_fixtures",)

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Indexer:
    """The command in a child process, its stdout and stderr collected as they come."""

    def __init__(self, url: str, *extra: str) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "kruntimes.cli.main", "journal", "index", "--follow", "--interval", "0.05",
             "--chunk", "7", "--journal", url, *extra],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(stream, lines), daemon=True)
                         for stream, lines in ((self.popen.stdout, self.out), (self.popen.stderr, self.err))]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: object, lines: list[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            lines.append(line)

    def stop(self) -> int:
        self.popen.send_signal(signal.SIGTERM)
        code = self.popen.wait(30)
        for reader in self._readers:
            reader.join(5)
        return code


@contextmanager
def indexer(url: str, *extra: str) -> Iterator[Indexer]:
    process = Indexer(url, *extra)
    try:
        yield process
    finally:
        if process.popen.poll() is None:
            process.popen.kill()
            process.popen.wait(10)


def eventually(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def append(url: str, records: list, history: str = "follow") -> None:  # type: ignore[type-arg]
    journal = backends.Journal.open(url, create=False, history=history)
    try:
        for start in range(0, len(records), 5):
            journal.append_batch(records[start:start + 5])
    finally:
        journal.close()


def test_the_indexer_keeps_up_with_a_follow_writer_serves_metrics_and_stops_on_sigterm(
        generated: Generated, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    expected = inline_tables(request, "sqlite", generated)
    url = f"sqlite:///{tmp_path}/journal.db"
    backends.Journal.open(url).close()
    half = len(generated.records) // 2
    append(url, generated.records[:half])
    port = free_port()
    with indexer(url, "--http-port", str(port), "--http-address", "127.0.0.1") as process:
        eventually(lambda: lag(url) == [], "the indexer caught up with the first half")
        append(url, generated.records[half:])  # while it runs
        eventually(lambda: lag(url) == [], "the indexer caught up with the second half")
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        indexed = next(line for line in metrics.splitlines() if line.startswith("kruntimes_history_indexed_records_total"))
        assert float(indexed.split()[-1]) == len(generated.records)
        eventually(lambda: "kruntimes_history_lag_lsns 0.0" in urllib.request.urlopen(
            f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode(), "the lag gauge read 0")
        assert process.stop() == 0
    assert f"stopped after indexing {len(generated.records)} records" in "".join(process.out)
    assert snapshot(url) == expected


def test_the_indexer_rides_out_a_database_outage_and_loses_nothing(
        generated: Generated, proxied_journal: ProxiedJournal) -> None:  # noqa: F811
    with fresh_postgres_schema(os.environ[POSTGRES_ENV]) as inline_url:
        write_through_writer(inline_url, generated, max_batch=7)
        expected = snapshot(inline_url)
    half = len(generated.records) // 2
    append(proxied_journal.direct, generated.records[:half])
    with indexer(proxied_journal.url) as process:
        eventually(lambda: lag(proxied_journal.direct) == [], "the indexer caught up with the first half")
        proxied_journal.proxy.cut("reset")
        append(proxied_journal.direct, generated.records[half:])  # stored while the indexer cannot reach them
        eventually(lambda: any("retrying in" in line for line in process.err), "the indexer reported the outage")
        assert process.popen.poll() is None, "an outage does not end the indexer"
        assert lag(proxied_journal.direct) != []
        proxied_journal.proxy.restore()
        eventually(lambda: lag(proxied_journal.direct) == [], "the indexer caught up after the outage")
        assert process.stop() == 0
    assert "password" not in "".join(process.err).lower()
    assert snapshot(proxied_journal.direct) == expected
