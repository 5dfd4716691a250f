"""When a replayed decision is not identical, replay says exactly what differs - and a digest catches the rest.

A "new planner version" is simulated by swapping a plugin in the registry before
replaying; a forged record by editing one (with a matching hash, so it is not damage).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pytest

from kruntimes.journal.store.backends import Journal
from kruntimes.scheduler import registry
from kruntimes.scheduler.interface import CycleState
from kruntimes.scheduler.plugins.least_loaded import LeastLoaded
from kruntimes.scheduler.views import PodView
from replay import source, verify
from tests.replay import journals


class MostLoaded(LeastLoaded):
    """A 'new version' of LeastLoaded that packs instead of spreading: normalised scores reversed."""

    def normalize(self, state: CycleState, raws: Sequence[Any]) -> list[int]:  # type: ignore[override]
        return [100 - s for s in super().normalize(state, raws)]


class LastPodNudged(LeastLoaded):
    """A change no summary field can show: the last feasible pod's raw key, with one pod's key never on top."""

    def score(self, state: CycleState, pods: Sequence[PodView]) -> list[Any]:
        keys = super().score(state, pods)
        if len(keys) > 2:
            top, bottom, total, denominator = keys[-1]
            keys[-1] = (top, bottom, total * 7, denominator * 7)  # the same fraction, other integers
        return keys


def _verify(url: str, selection: source.Selection = source.Selection()) -> verify.VerifyReport:
    journal = Journal.open(url)
    try:
        return verify.verify(journal, selection)
    finally:
        journal.close()


def test_a_planner_that_decides_otherwise_is_reported_field_by_field(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written = journals.scripted(f"sqlite:///{tmp_path}/j.db", tmp_path)
    monkeypatch.setitem(registry.REGISTRY, "LeastLoaded", MostLoaded)  # type: ignore[index]
    report = _verify(written.url)
    assert not report.ok and report.replayed == written.cycles
    assert report.identical + len(report.diverged) == written.cycles
    fields = {d.field for r in report.diverged for d in r.differences}
    assert "digest" in fields and "chosen" in fields
    assert any(f.startswith("candidates[1].LeastLoaded.normalized") for f in fields)
    changed = next(r for r in report.diverged if any(d.field == "chosen" for d in r.differences))
    chosen = next(d for d in changed.differences if d.field == "chosen")
    assert chosen.recorded == changed.recorded["chosen"] and chosen.replayed == changed.outcome.chosen
    assert str(chosen) == f"chosen: recorded {chosen.recorded!r}, replayed {chosen.replayed!r}"
    assert changed.differences[-1].field == "digest"
    # The replayed full outcome comes with it: every pod's verdict and scores as replay computes them.
    full = changed.as_json()["replayed_outcome"]
    assert [p["pod"] for p in full["pods"]] == list(changed.outcome.pods)
    assert full["chosen"] == changed.outcome.chosen


def test_in_full_detail_every_pods_differing_score_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written = journals.scripted(f"sqlite:///{tmp_path}/j.db", tmp_path, detail="full")
    monkeypatch.setitem(registry.REGISTRY, "LeastLoaded", MostLoaded)  # type: ignore[index]
    report = _verify(written.url)
    per_pod = [d for r in report.diverged for d in r.differences if d.field.startswith("pods[")]
    assert per_pod and all(d.field.endswith(".LeastLoaded") or d.field.endswith(".total") for d in per_pod)
    example = next(d for d in per_pod if d.field.endswith(".LeastLoaded"))
    raw, normalized = example.recorded
    assert example.replayed == [raw, 100 - normalized]


def test_a_difference_outside_the_recorded_candidates_is_caught_by_the_digest_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written = journals.scripted(f"sqlite:///{tmp_path}/j.db", tmp_path, top_candidates=1)
    monkeypatch.setitem(registry.REGISTRY, "LeastLoaded", LastPodNudged)  # type: ignore[index]
    report = _verify(written.url)
    assert report.diverged, "the scripted history has cycles with three or more feasible pods"
    only_digest = [r for r in report.diverged if [d.field for d in r.differences] == ["digest"]]
    assert only_digest, [[d.field for d in r.differences] for r in report.diverged]


def test_a_forged_decision_is_a_divergence_not_damage(journal_url: str, tmp_path: Path) -> None:
    written = journals.scripted(journal_url, tmp_path)
    scheduled = [n for n in journals.lsns_of(journal_url, "cycle")
                 if journals.payload_of(journal_url, n)["status"] == "scheduled"]
    lsn = scheduled[0]
    journals.rewrite(journal_url, lsn, lambda p: p.update(chosen="stale", total=1))  # never chosen: stale
    report = _verify(journal_url)
    assert [r.lsn for r in report.diverged] == [lsn] and report.identical == written.cycles - 1
    fields = [d.field for d in report.diverged[0].differences]
    assert fields[:2] == ["chosen", "total"] or set(fields) >= {"chosen", "total"}
