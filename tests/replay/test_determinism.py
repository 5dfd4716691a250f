"""Determinism guard: every cycle the LIVE scheduler recorded replays to the identical decision.

The live scheduler runs as in production - 4 concurrent workers, a MemoryApi that
delivers watch events late and injects bind conflicts, Runs finishing and being
deleted, pods going stale as the injected clock moves, capacity changing - with
the real journal writer into SQLite and PostgreSQL. Then EVERY recorded cycle is
replayed and must be identical: choice, every recorded field and the digest of
the full outcome. Hidden nondeterminism (float scoring, dict or set order, a
wall-clock read in a plugin, a snapshot that is not "everything up to its LSN")
fails here, not in a user's incident review. The last test does it across
processes with two different PYTHONHASHSEEDs: one writes, the other replays.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from kruntimes.journal.store.backends import Journal
from kruntimes.scheduler import registry
from kruntimes.scheduler.plugins.least_loaded import LeastLoaded
from replay import source, verify
from tests.replay import journals

ROOT = Path(__file__).resolve().parents[2]
_VERIFY = """
import argparse, sys
from kruntimes.cli import replay_cmd
parser = argparse.ArgumentParser(prog="kruntimes")
replay_cmd.register(parser.add_subparsers(dest="command", required=True))
args = parser.parse_args(sys.argv[1:])
sys.exit(args.run(args))
"""


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=hs.integers(0, 2**32 - 1), checkpoint_every=hs.sampled_from([3, 17, 10_000]),
       detail=hs.sampled_from(["summary", "full"]), conflict_rate=hs.sampled_from([0.0, 0.2]),
       max_delay=hs.sampled_from([0.0, 0.002]), writer=hs.sampled_from(["process", "thread"]))
def test_every_cycle_the_live_scheduler_recorded_replays_identically(
        journal_url: str, tmp_path: Path, seed: int, checkpoint_every: int, detail: str, conflict_rate: float,
        max_delay: float, writer: str) -> None:
    # Every example is a new incarnation in the same journal, as restarts are in production. Records
    # built in the writer process (from data pickled across) and in a writer thread must replay alike.
    workload = replace(journals.random_workload(seed, checkpoint_every=checkpoint_every, detail=detail),
                       conflict_rate=conflict_rate, max_delay=max_delay)
    written = journals.live(journal_url, tmp_path, workload, writer=writer)
    journal = Journal.open(journal_url)
    try:
        report = verify.verify(journal, source.Selection(incarnation=written.incarnation))
    finally:
        journal.close()
    divergent = {r.lsn: [str(d) for d in r.differences] for r in report.diverged}
    assert divergent == {}
    assert report.replayed == report.identical == written.cycles > 0


def test_a_journal_written_under_one_hash_seed_replays_identically_under_another(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/journal.db"
    base = {**os.environ, "PYTHONPATH": str(ROOT)}
    for seed in ("11", "12"):
        subprocess.run([sys.executable, "-m", "tests.replay.journals", url, seed, str(tmp_path)], cwd=ROOT,
                       env={**base, "PYTHONHASHSEED": "1"}, check=True, capture_output=True, timeout=60)
    replayed = subprocess.run(
        [sys.executable, "-c", _VERIFY, "replay", "verify", "--journal", url, "--json"],
        cwd=ROOT, env={**base, "PYTHONHASHSEED": "2"}, capture_output=True, text=True, timeout=60)
    assert replayed.returncode == 0, replayed.stdout[-2000:] + replayed.stderr[-2000:]
    report = json.loads(replayed.stdout)
    assert report["ok"] and report["replayed"] == report["identical"] > 0
    assert len(report["incarnations"]) == 2


class CoinFlip(LeastLoaded):
    """Sabotage: a tie-breaker that is not a function of the snapshot."""

    def normalize(self, state: Any, raws: Any) -> list[int]:  # type: ignore[override]
        return [min(100, s + random.randint(0, 1)) for s in super().normalize(state, raws)]


def test_the_guard_is_not_vacuous_it_finds_a_planner_that_flips_coins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.REGISTRY, "LeastLoaded", CoinFlip)  # type: ignore[index]
    url = f"sqlite:///{tmp_path}/journal.db"
    written = journals.live(url, tmp_path, journals.random_workload(3, detail="full"))
    journal = Journal.open(url)
    try:
        report = verify.verify(journal, source.Selection(incarnation=written.incarnation))
    finally:
        journal.close()
    assert report.diverged and report.replayed == written.cycles
