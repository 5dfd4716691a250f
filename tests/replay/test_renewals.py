"""Journals with every heartbeat renewal (as written before renewals were held) and with held ones both verify.

The same live workload (its pod updates come from its seed, so both runs send the
same renewals) is journaled twice: once with every renewal applied at once, as the
scheduler journaled before `scheduler.renewals`, and once as it does now. Every
cycle of both replays identically, and the second journal holds fewer pod records.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kruntimes.journal.store.backends import Journal
from kruntimes.scheduler import renewals
from replay import source, verify
from tests.replay import journals


def _pod_updates(url: str) -> int:
    rows = [journals.payload_of(url, lsn) for lsn in journals.lsns_of(url, "mutation")]
    return sum(1 for r in rows if r.get("kind") == "Pod" and r.get("event") == "MODIFIED")


def _verify(url: str, incarnation: str) -> verify.VerifyReport:
    journal = Journal.open(url)
    try:
        return verify.verify(journal, source.Selection(incarnation=incarnation))
    finally:
        journal.close()


def test_journals_from_before_and_after_held_renewals_both_replay_identically(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workload = journals.random_workload(5, checkpoint_every=10)
    counts = {}
    for mode in ("every renewal", "held"):
        url = f"sqlite:///{tmp_path}/{mode.replace(' ', '-')}.db"
        with monkeypatch.context() as m:
            if mode == "every renewal":
                m.setattr(renewals.Renewals, "hold", lambda *args: False)
            written = journals.live(url, tmp_path / mode.replace(" ", "-"), workload, workers=2)
        report = _verify(url, written.incarnation)
        assert {r.lsn: [str(d) for d in r.differences] for r in report.diverged} == {}
        assert report.replayed == report.identical == written.cycles > 0
        counts[mode] = _pod_updates(url)
    assert counts["held"] < counts["every renewal"]
