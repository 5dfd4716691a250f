"""bench/ui.py runs end to end on a small generated journal and times every page it names."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import ui as bench


def test_the_ui_benchmark_renders_every_page_on_a_generated_journal(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--records", "4000", "--repeat", "1", "--dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""  # a page that did not answer 200 is reported on stderr
    for page in ("Timeline, last 60 s (default)", "Run (mid-journal)", "Pod at T (mid-journal)", "What-if form",
                 "Integrity", "Replay verdict of one cycle (on demand)"):
        assert page in out
