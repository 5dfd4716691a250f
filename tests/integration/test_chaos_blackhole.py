"""Two replicas through a long database blackhole with a leader SIGKILLed inside it: the figures of issue 22.

Opt-in (it takes minutes): set ``KRUNTIMES_CHAOS_BLACKHOLE_SECONDS`` (60 for the
issue's figures) and ``KRUNTIMES_TEST_POSTGRES_URL``; bench/README.md quotes a run.
Both replicas are real ``kruntimes scheduler`` processes (the API emulator, PostgreSQL
behind a proxy). The proxy blackholes the database - it accepts and never answers -
and a third of the way in the leader is killed with its writer process, as a
container is; the standby takes over with no database. After the blackhole the killed
replica restarts on its spool. It prints what it measured: Runs placed by the
schedulers during the blackhole, records spooled and how long the spools took to
drain, the writer processes' peak memory, ``replay verify``'s exit code and the
records lost, and whether the history tables are what the records derive (the two
epochs' LSNs overlap: the standby began its epoch with no database). It asserts what SPEC §5 promises: scheduling went on, every spool
drained, 0 over-commit, every record the killed replica had made durable is stored,
any other loss is named by verify (its exit code 0).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from kruntimes.cli import main as cli_main
from kruntimes.journal.store import backends
from replay import integrity
from tests.integration.cluster import Cluster, wait_for
from tests.integration.db_proxy import ProxiedJournal, proxied_journal  # noqa: F401 - the fixture
from tests.integration.processes import kubeconfig, run_scheduler  # noqa: F401 - the fixtures
from tests.integration.test_chaos import (STARTUP, TAKEOVER, Periodic, Replica, Workload, _holder, _spooled, _stored,
                                         two_replicas)

SECONDS_ENV = "KRUNTIMES_CHAOS_BLACKHOLE_SECONDS"
pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not os.environ.get(SECONDS_ENV),
                                                       reason=f"a measurement of minutes: set {SECONDS_ENV}")]


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _peak_kib(pid: int) -> int:
    """The process's peak resident memory (VmHWM), KiB; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class WriterMemory(Periodic):
    """Samples the replicas' writer processes (the schedulers' children) for their peak resident memory."""

    def __init__(self, replicas: list[Replica]) -> None:
        super().__init__(0.5, "writer-memory")
        self.replicas, self.peak_kib = replicas, 0

    def tick(self) -> None:
        for r in self.replicas:
            for child in _children(r.current.popen.pid):
                self.peak_kib = max(self.peak_kib, _peak_kib(child))


def test_two_replicas_through_a_long_blackhole_with_a_kill_inside_it(
        run_scheduler: Any, cluster_api: Cluster, kube_namespace: str, tmp_path: Path,
        proxied_journal: ProxiedJournal) -> None:
    blackhole = float(os.environ[SECONDS_ENV])
    replicas, scratch = two_replicas(cluster_api, run_scheduler, kube_namespace, proxied_journal.url, tmp_path)

    def leading() -> Replica:
        def found() -> Replica | None:
            replica = replicas.get(_holder(cluster_api) or "")
            return replica if replica is not None and replica.epochs() else None
        return wait_for(found, timeout=STARTUP, what="a replica leading")

    for replica in replicas.values():
        replica.start()
    with Workload(cluster_api) as workload, WriterMemory(list(replicas.values())) as memory:
        victim = leading()
        other = next(r for r in replicas.values() if r is not victim)
        other.wait_synced()
        time.sleep(3)
        placed_before = len(cluster_api.placements())
        proxied_journal.proxy.cut("blackhole")
        began = time.monotonic()
        time.sleep(blackhole / 3)
        terms_before = len(other.epochs())
        epoch = victim.epochs()[-1]
        victim.current.kill()  # inside the blackhole: its writer's unacknowledged tail dies with it
        time.sleep(0.3)
        durable = {k: v for k, v in _spooled(victim.spool_path, scratch).items() if k[0] == epoch}
        durable.update({k: v for k, v in _stored(proxied_journal.direct).items() if k[0] == epoch})
        wait_for(lambda: len(other.epochs()) > terms_before, timeout=TAKEOVER, what="the standby leading")
        time.sleep(max(0.0, began + blackhole - time.monotonic()))
        placed_during = len(cluster_api.placements()) - placed_before
        spooled = sum(len(_spooled(r.spool_path, scratch)) for r in replicas.values())
        proxied_journal.proxy.restore()
        restored = time.monotonic()
        victim.start()  # on the spool it left behind, as a standby
        wait_for(lambda: all(_spooled(r.spool_path, scratch) == {} for r in replicas.values()), timeout=300,
                 what="every spool drained")
        drained = time.monotonic() - restored
        time.sleep(2)
    for replica in replicas.values():
        replica.wait_synced()
        replica.current.popen.send_signal(signal.SIGTERM)
        assert replica.current.finish(60) == 0
    assert workload.errors == []

    stored = _stored(proxied_journal.direct)
    journal = backends.Journal.open(proxied_journal.direct, create=False)
    try:
        reports = {r.epoch: r for r in integrity.check(journal)}
    finally:
        journal.close()
    named = reports[epoch].lost_in_crash
    lost_named = 0 if named is None else named[1] - named[0] + 1
    lost_durable = sum(1 for k, v in durable.items() if stored.get(k) != v)
    verify = cli_main.main(["replay", "verify", "--journal", proxied_journal.direct])
    history = cli_main.main(["journal", "reindex", "--check", "--journal", proxied_journal.direct])
    overcommit = cluster_api.overcommit()
    print(f"\n{blackhole:.0f} s blackhole, leader SIGKILLed {blackhole / 3:.0f} s in, PostgreSQL behind a proxy, "
          f"2 replicas (`kruntimes scheduler`), load {os.getloadavg()[0]:.1f}\n"
          f"  Runs placed during the blackhole           {placed_during:>8,}\n"
          f"  records in the spools when it ended        {spooled:>8,}\n"
          f"  spools empty after the database returned   {drained:>8.1f} s\n"
          f"  writer process peak resident memory        {memory.peak_kib / 1024:>8.0f} MiB\n"
          f"  records durable at the kill, then missing  {lost_durable:>8,}\n"
          f"  records lost in the kill, named by verify  {lost_named:>8,}\n"
          f"  over-commit                                {overcommit:>8,}\n"
          f"  replay verify exit code                    {verify:>8}\n"
          f"  journal reindex --check exit code          {history:>8}")
    assert placed_during > 0, "scheduling stopped during the blackhole"
    assert lost_durable == 0 and overcommit == 0 and verify == 0 and history == 0
