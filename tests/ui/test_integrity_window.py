"""The Integrity page's prefilled window verifies when its button is pressed (issue 27 item 7).

The demo's journal records more cycles in its last minute than the page verifies at
once, and the page refused its own default ("5,332 cycles ... narrow it"). The limit is
lowered here so that the demo journal of the tests (a tenth of the workload) has the
same shape.
"""

from __future__ import annotations

import re
import urllib.request

import pytest

from kruntimes.ui import integrity_page
from tests.ui.conftest import Served

LIMIT = 200


def _get(served: Served, path: str) -> str:
    with urllib.request.urlopen(served.base + path, timeout=120) as response:
        return response.read().decode("utf-8")


def test_the_prefilled_window_holds_at_most_the_cycles_the_page_verifies(
        served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(integrity_page, "MAX_CYCLES", LIMIT)
    body = _get(served, "/integrity?verify=1")
    last = re.search(r'id="last-verify">(.*?)</p>', body, re.S)
    assert last is not None and "narrow it" not in last.group(1) and "OK" in last.group(1)


def test_a_window_asked_for_is_kept_even_when_it_is_too_long(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(integrity_page, "MAX_CYCLES", LIMIT)
    body = _get(served, "/integrity?verify=1&since=2000-01-01T00:00:00Z")
    assert "narrow it to at most 200" in body
