"""Device claims in the journal and in replay (SPEC §7.8).

A history with device claims, written by the real scheduler through the real journal
session: inventories are stored once per digest (pod records carry the digest only),
RuntimeDeviceClass changes are mutations, Runs keep their claim and their allocation,
cycle records carry the chosen devices and the steps charged, the incarnation record
the CEL engine and the budgets. Replay rebuilds every snapshot the live cycles planned
on and reproduces every cycle bit for bit, from the start or from any checkpoint; a
journal that says another engine version ran is reported, not hidden.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from kruntimes.journal.store.backends import Journal
from kruntimes.scheduler import device_outcome
from kruntimes.scheduler.config import SchedulerConfig
from replay import engine, reproduce, source, verify
from tests.replay import journals
from tests.replay.test_reproduce import RecordingPlanner


def _replay_all(url: str, selection: source.Selection | None = None) -> list[reproduce.CycleResult]:
    journal = Journal.open(url)
    try:
        cycles = engine.select(journal, selection or source.Selection())
        return [reproduce.judge(r) for r in engine.replay(journal, cycles, reproduce.plan)]
    finally:
        journal.close()


def _payloads(url: str, kind: str) -> list[dict[str, Any]]:
    return [journals.payload_of(url, lsn) for lsn in journals.lsns_of(url, kind)]


@pytest.mark.parametrize("checkpoint_every", [1, 15, 100_000], ids=lambda n: f"checkpoint every {n} records")
def test_every_cycle_of_a_device_history_replays_identically_devices_steps_and_reasons(
        journal_url: str, tmp_path: Path, checkpoint_every: int) -> None:
    live_planner = RecordingPlanner(SchedulerConfig())
    written = journals.scripted_devices(journal_url, tmp_path, checkpoint_every=checkpoint_every,
                                        planner=live_planner)
    journal = Journal.open(journal_url)
    try:
        report = verify.verify(journal)
    finally:
        journal.close()
    assert report.ok and report.replayed == report.identical == written.cycles > 20
    results = _replay_all(journal_url)
    assert [str(d) for r in results for d in r.differences] == []
    device_cycles = [r for r in results if "devices" in r.recorded]
    chosen = [r.recorded["devices"]["chosen"] for r in device_cycles if r.recorded["devices"]["chosen"]]
    assert chosen and all(r.recorded["devices"]["steps"] >= 0 for r in device_cycles)
    assert any("consumedCapacity" in e for c in chosen for e in c["results"])
    assert any(e["request"] == "gpu/fast" for c in chosen for e in c["results"])
    reasons = {reason for r in device_cycles for _, reason, _ in r.recorded["rejections"]}
    assert {"device class invalid", "no device inventory"} <= reasons


def test_each_device_cycle_replays_alone_from_its_nearest_checkpoint(journal_url: str, tmp_path: Path) -> None:
    journals.scripted_devices(journal_url, tmp_path, checkpoint_every=7)
    cycles = journals.lsns_of(journal_url, "cycle")
    for lsn in cycles[::3]:
        [result] = _replay_all(journal_url, source.Selection(lsns=(lsn,)))
        assert result.identical, [str(d) for d in result.differences]


def test_inventories_are_stored_once_per_digest_and_pods_carry_the_digest_only(
        journal_url: str, tmp_path: Path) -> None:
    journals.scripted_devices(journal_url, tmp_path, checkpoint_every=100_000)
    mutations = _payloads(journal_url, "mutation")
    texts = [m for m in mutations if m["kind"] == "DeviceInventory"]
    digests = [t["digest"] for t in texts]
    assert len(digests) == len(set(digests)) == 3  # the big, the small and the emptied inventory
    assert all(hashlib.sha256(t["text"].encode()).hexdigest() == t["digest"] for t in texts)
    pods = [m["object"] for m in mutations if m["kind"] == "Pod"]
    assert all(set(p.get("devices_digest", digests[0]) for p in pods) <= set(digests) for _ in [0])
    assert not any("devices" in p for p in pods)
    classes = [(m["event"], m["name"]) for m in mutations if m["kind"] == "DeviceClass"]
    assert classes == [("MODIFIED", "gpu"), ("MODIFIED", "broken"), ("MODIFIED", "broken"), ("DELETED", "broken")]
    runs = [m["object"] for m in mutations if m["kind"] == "Run"]
    assert any("devices" in r for r in runs) and any("device_results" in r for r in runs)
    [incarnation] = _payloads(journal_url, "incarnation")
    assert incarnation["devices"] == device_outcome.configuration()


def test_a_checkpoint_holds_the_inventories_and_classes_replay_starts_from(journal_url: str, tmp_path: Path) -> None:
    journals.scripted_devices(journal_url, tmp_path, checkpoint_every=10)
    checkpoints = _payloads(journal_url, "checkpoint")
    with_devices = [c for c in checkpoints if c.get("inventories")]
    assert with_devices and all(c.get("classes") for c in with_devices)
    for c in with_devices:
        held = {d for d, _ in c["inventories"]}
        assert {p["devices_digest"] for p in c["pods"] if "devices_digest" in p} == held


def test_a_journal_that_ran_another_cel_engine_version_says_so_on_every_device_cycle(
        journal_url: str, tmp_path: Path) -> None:
    journals.scripted_devices(journal_url, tmp_path, checkpoint_every=100_000)
    [lsn] = journals.lsns_of(journal_url, "incarnation")

    def older_engine(payload: dict[str, Any]) -> None:
        payload["devices"]["cel_engine_version"] = "0.0.1"

    journals.rewrite(journal_url, lsn, older_engine)
    results = _replay_all(journal_url)
    current = device_outcome.configuration()["cel_engine_version"]
    for r in results:
        engine_said = [d for d in r.differences if d.field == "devices.cel_engine_version"]
        if "devices" in r.recorded:
            assert [(d.recorded, d.replayed) for d in engine_said] == [("0.0.1", current)]
            assert not r.identical
        else:
            assert r.identical and not engine_said


def test_a_tampered_allocation_in_a_cycle_record_is_found(journal_url: str, tmp_path: Path) -> None:
    journals.scripted_devices(journal_url, tmp_path, checkpoint_every=100_000)
    lsn = next(lsn for lsn in journals.lsns_of(journal_url, "cycle")
               if (journals.payload_of(journal_url, lsn).get("devices") or {}).get("chosen"))

    def other_device(payload: dict[str, Any]) -> None:
        payload["devices"]["chosen"]["results"][0]["device"] = "gpu-9"

    journals.rewrite(journal_url, lsn, other_device)
    [result] = [r for r in _replay_all(journal_url) if r.lsn == lsn]
    assert [d.field for d in result.differences] == ["devices"]


def test_the_rebuilt_snapshot_of_every_device_cycle_is_the_live_one(journal_url: str, tmp_path: Path) -> None:
    live_planner = RecordingPlanner(SchedulerConfig())
    journals.scripted_devices(journal_url, tmp_path, checkpoint_every=5, planner=live_planner)
    journal = Journal.open(journal_url)
    try:
        cycles = engine.select(journal, source.Selection())
        rebuilt = {}
        for r in engine.replay(journal, cycles, lambda ctx: ctx.snapshot()):
            s = r.value
            rebuilt[(s.lsn, s.run.uid)] = (s.run, s.now, [(v.info,) for v in s.pods], dict(s.device_classes or {}))
    finally:
        journal.close()
    live = {k: (v[0], v[1], [(view[0],) for view in v[2]]) for k, v in live_planner.seen.items()}
    assert {k: v[:3] for k, v in rebuilt.items()} == live
    assert any(v[3] for v in rebuilt.values())
