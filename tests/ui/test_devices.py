"""The devices a Run was allocated, wherever its history is read (SPEC §7, issue 26 item 9).

On the demo's journal, whose GPU Runtime's Runs claim devices: `kruntimes history run`
prints them under the placement (and `-o json` holds the results), the Run page shows
them in its summary and on each cycle, and the pod-at-T page lists them beside each
Run the pod held at T.
"""

from __future__ import annotations

import json
import sqlite3
import urllib.parse
import urllib.request
from typing import Any

import pytest

from kruntimes.cli import main as cli
from kruntimes.devices import results
from tests.ui.conftest import DemoJournal, Served


def placed_gpu_run(demo_journal: DemoJournal) -> dict[str, Any]:
    """A demo GPU Run's placing cycle: run, pod, decided at and the devices it chose."""
    with sqlite3.connect(demo_journal.path) as db:
        run, pod, at, chosen = db.execute(
            "SELECT json_extract(payload, '$.run'), json_extract(payload, '$.chosen'), recorded_at,"
            " json_extract(payload, '$.devices.chosen') FROM journal_records WHERE kind = 'cycle'"
            " AND json_extract(payload, '$.result') = 'scheduled'"
            " AND json_extract(payload, '$.devices.chosen') IS NOT NULL ORDER BY lsn LIMIT 1").fetchone()
    devices = json.loads(chosen)
    return {"run": run, "pod": pod, "at": at, "shown": results.describe(devices),
            "devices": [r["device"] for r in devices["results"]]}


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as response:
        return str(response.read().decode("utf-8"))


def test_history_run_prints_the_devices_a_run_was_allocated(demo_journal: DemoJournal,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    placed = placed_gpu_run(demo_journal)
    assert cli.main(["history", "run", f"demo/{placed['run']}", "--journal", demo_journal.url]) == 0
    assert f"devices: {placed['shown']}" in capsys.readouterr().out.splitlines()
    assert cli.main(["history", "run", f"demo/{placed['run']}", "--journal", demo_journal.url, "-o", "json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [r["device"] for r in found["placement"]["devices"]] == placed["devices"]


def test_the_run_page_shows_its_devices(demo_journal: DemoJournal, served: Served) -> None:
    placed = placed_gpu_run(demo_journal)
    body = _get(f"{served.base}/run/demo/{placed['run']}")
    assert "<dt>devices</dt>" in body and placed["shown"] in body
    assert f"devices: {placed['shown']};" in body  # on its placing cycle, with the steps it cost


def test_the_pod_at_t_page_lists_the_devices_each_held_run_has(demo_journal: DemoJournal, served: Served) -> None:
    placed = placed_gpu_run(demo_journal)
    at = urllib.parse.quote(str(placed["at"]).replace(" ", "T") + ("" if "+" in str(placed["at"]) else "Z"))
    body = _get(f"{served.base}/pod/demo/{placed['pod']}?at={at}")
    assert "<th>devices</th>" in body and placed["shown"] in body
