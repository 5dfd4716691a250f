"""Two scheduler replicas, a leader killed again and again, and the database gone for 20 s.

Issue 14 item 6 (SPEC §5 "Several writers, one truth" and "Availability"): both
replicas run as processes (`kruntimes scheduler`, the real client, the API
emulator), with the journal in PostgreSQL behind a proxy the test cuts. The leader is
SIGKILLed with its writer process (as a container is), once with the database up,
then twice during a 20 s outage - the first of those right as the outage began, so
a standby takes over with no database and starts its epoch in its spool - and every
killed replica restarts on the spool it left behind, as a standby: its spool
drains once the database is back although it does not lead.

Afterwards every record either replica made durable is in the database exactly
once. "Made durable" is counted from the replicas' side: at each kill, what the
killed replica's spool file holds (fsync'd) and what the database holds of its
epoch (committed); the epochs begun, from each process's "leading" log line; and
each graceful term's last LSN, from its "term ended" log line. From the database's
side: every epoch is gap-free from its `incarnation` record to its `end` record -
`recovered` for a killed epoch, whose records the replica drained after it came back,
after the records its writer process had received and not yet made durable, if any
(named by the end's `handed_lsn`: issue 22 item 2) - and `replay verify` passes.
"""

from __future__ import annotations

import shutil
import signal
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from kubernetes import client

from kruntimes.cli import main as cli_main
from kruntimes.journal.write import spool
from kruntimes.journal.store import backends, engines, schema
from tests.integration.cluster import Cluster, wait_for
from tests.integration.db_proxy import ProxiedJournal, proxied_journal  # noqa: F401 - the fixture
from tests.integration.processes import Process, kubeconfig, run_scheduler  # noqa: F401 - the fixtures

OUTAGE_SECONDS = 20.0
STARTUP = 120.0  # a scheduler process starting (imports, lists): never part of what is measured
TAKEOVER = 30.0  # from a leader's kill to its warm standby's new term (lease expiry, relist, writer)
Key = tuple[str, int]  # (epoch, LSN)


class Replica:
    """One replica: its identity, its spool (kept across restarts, like a pod's volume) and its processes."""

    def __init__(self, identity: str, spool_path: Path, start: Any, args: list[str]) -> None:
        self.identity, self.spool_path = identity, spool_path
        self._start, self._args = start, args
        self.processes: list[Process] = []

    def start(self) -> None:
        self.processes.append(self._start(*self._args, "--leader-elect-identity", self.identity,
                                          "--journal-spool", str(self.spool_path)))

    @property
    def current(self) -> Process:
        return self.processes[-1]

    def epochs(self) -> list[str]:
        """The epochs this replica's current process began, from its "leading" log lines."""
        return [e["journal"]["epoch"] for e in self.current.logs() if e["message"].startswith("leading")]

    def logs(self) -> list[dict[str, Any]]:
        return [e for p in self.processes for e in p.logs()]

    def wait_synced(self) -> None:
        """Its current process is up and campaigning (a start-up on a loaded machine takes a while)."""
        wait_for(lambda: any(e["message"] == "caches synced" for e in self.current.logs()), timeout=STARTUP,
                 what=f"{self.identity}'s caches synced")


def _holder(cluster: Cluster) -> str | None:
    try:
        lease = client.CoordinationV1Api(cluster.core.api_client).read_namespaced_lease("kruntimes-scheduler",
                                                                                       cluster.namespace)
    except client.ApiException as exc:
        if exc.status == 404:
            return None  # nobody campaigned yet
        raise
    return str(lease.spec.holder_identity) if lease.spec.holder_identity else None


def _stored(url: str) -> dict[Key, tuple[str, str]]:
    """Every record in the database: (epoch, LSN) -> (kind, payload SHA-256); a duplicate key fails here."""
    table = schema.journal_records
    engine = engines.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.select(table.c.incarnation, table.c.lsn, table.c.kind,
                                          table.c.payload_sha256)).all()
    finally:
        engine.dispose()
    out = {(r.incarnation, int(r.lsn)): (r.kind, r.payload_sha256) for r in rows}
    assert len(out) == len(rows), "a record is stored twice"
    return out


def _ends(url: str) -> dict[str, dict[str, Any]]:
    """Each epoch's `end` record's payload."""
    journal = backends.Journal.open(url, create=False)
    try:
        return {r.incarnation: r.payload for r in journal.read(kinds={"end"})}
    finally:
        journal.close()


def _spooled(path: Path, scratch: Path) -> dict[Key, tuple[str, str]]:
    """What a killed replica's spool holds, read from a copy (a torn tail is cut, as the writer would)."""
    if not path.exists():
        return {}
    copy = scratch / f"{path.name}.{time.monotonic_ns()}"
    shutil.copyfile(path, copy)
    opened = spool.Spool.open(copy)
    try:
        return {(r.incarnation, r.lsn): (r.kind, r.payload_sha256) for r in opened.records()}
    finally:
        opened.close()


class Periodic:
    """Calls ``tick`` on a thread every ``every`` seconds while the ``with`` block runs."""

    def __init__(self, every: float, name: str) -> None:
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name)

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.tick()

    def tick(self) -> None:
        raise NotImplementedError


class Workload(Periodic):
    """Runs created steadily on a thread, so every term has cycles, binds and watch events to journal."""

    def __init__(self, cluster: Cluster, every: float = 0.1) -> None:
        super().__init__(every, "chaos-workload")
        self.cluster = cluster
        self.created = 0
        self.errors: list[str] = []

    def tick(self) -> None:
        try:
            self.cluster.add_run(f"w-{self.created}")
            self.created += 1
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(repr(exc))


def two_replicas(cluster: Cluster, run_scheduler: Any, namespace: str, journal_url: str,
                 tmp_path: Path) -> tuple[dict[str, Replica], Path]:
    """Four Runtime Pods, replicas "a" and "b" (not started: a short lease, one binder, the journal at
    ``journal_url``), and a scratch directory for copies of their spools."""
    for i in range(4):
        cluster.add_pod(f"python-{i}", runs=10_000)
    args = ["--namespace", namespace, "--leader-elect-resource-namespace", namespace,
            "--leader-elect-lease-duration", "2", "--leader-elect-renew-deadline", "1",
            "--leader-elect-retry-period", "0.2", "--http-address", "127.0.0.1", "--http-port", "0",
            "--binders", "1", "--shutdown-timeout", "10", "--journal-url", journal_url,
            "--journal-migrate", "never"]
    scratch = tmp_path / "snapshots"
    scratch.mkdir()
    return {name: Replica(name, tmp_path / f"{name}.spool", run_scheduler, args) for name in ("a", "b")}, scratch


@pytest.mark.postgres
def test_two_replicas_lose_no_record_through_leader_kills_and_a_20s_database_outage_during_a_failover(
        run_scheduler: Any, cluster_api: Cluster, kube_namespace: str, tmp_path: Path,
        proxied_journal: ProxiedJournal) -> None:
    replicas, scratch = two_replicas(cluster_api, run_scheduler, kube_namespace, proxied_journal.url, tmp_path)
    killed: dict[str, dict[Key, tuple[str, str]]] = {}  # killed epoch -> what was durable when it died
    spooled_at_a_kill = 0

    def leading() -> Replica:
        """The replica holding the lease, once its current process has begun a term."""
        def found() -> Replica | None:
            replica = replicas.get(_holder(cluster_api) or "")
            return replica if replica is not None and replica.epochs() else None
        return wait_for(found, timeout=STARTUP, what="a replica leading")

    def takes_over(replica: Replica, terms_before: int) -> None:
        wait_for(lambda: len(replica.epochs()) > terms_before, timeout=TAKEOVER, what=f"{replica.identity} leading")

    def kill_leader() -> Replica:
        """SIGKILL the leader's processes, note what its epoch made durable, and restart it once the
        other replica leads (a restart with the same identity could take its own lease back at once)."""
        nonlocal spooled_at_a_kill
        victim = leading()
        other = next(r for r in replicas.values() if r is not victim)
        other.wait_synced()  # a standby restarted a moment ago may still be starting: time the takeover, not that
        terms_before = len(other.epochs())
        epoch = victim.epochs()[-1]
        victim.current.kill()
        time.sleep(0.3)  # a COMMIT already sent is applied or dropped by now
        in_spool = {k: v for k, v in _spooled(victim.spool_path, scratch).items() if k[0] == epoch}
        spooled_at_a_kill += len(in_spool)
        committed = {k: v for k, v in _stored(proxied_journal.direct).items() if k[0] == epoch}
        killed[epoch] = {**committed, **in_spool}
        takes_over(other, terms_before)
        victim.start()
        return other

    for replica in replicas.values():
        replica.start()
    with Workload(cluster_api) as workload:
        leading()
        time.sleep(3)
        kill_leader()  # with the database up
        time.sleep(3)

        proxied_journal.proxy.cut("reset")
        outage = time.monotonic()
        time.sleep(2)  # the leader spools
        kill_leader()  # a failover during the outage: the standby starts its epoch with no database
        placed = len(cluster_api.placements())
        wait_for(lambda: len(cluster_api.placements()) > placed + 5, timeout=60,
                 what="Runs placed by a leader that started with the database away")
        time.sleep(max(3.0, outage + OUTAGE_SECONDS / 2 - time.monotonic()))  # the new leader spools a while
        kill_leader()  # again, still in the outage: both replicas now hold spooled records of a killed epoch
        time.sleep(max(0.0, outage + OUTAGE_SECONDS - time.monotonic()))
        proxied_journal.proxy.restore()
        time.sleep(3)
    assert workload.errors == [] and workload.created > 100
    assert spooled_at_a_kill > 0, "no replica restarted with records in its spool"

    # Every spool drains once the database is back: the leader's through its term's writer, the
    # standby's (records of its killed epoch) through its spool recovery, though it does not lead.
    wait_for(lambda: all(_spooled(r.spool_path, scratch) == {} for r in replicas.values()), timeout=120,
             what="every spool drained")
    last = leading()
    for replica in sorted(replicas.values(), key=lambda r: r is last):  # the standby first
        replica.wait_synced()  # a SIGTERM before Python is set up would just end it
        replica.current.popen.send_signal(signal.SIGTERM)
        code = replica.current.finish(60)
        assert code == 0, (replica.identity, code, replica.current.lines[-10:])
    assert cluster_api.overcommit() == 0
    stepped_down = [e for r in replicas.values() for e in r.logs() if "could not start a leadership term" in e["message"]]
    assert stepped_down == [], "a term waited for the database"

    # Nothing is left in a spool, nothing was quarantined.
    for replica in replicas.values():
        assert _spooled(replica.spool_path, scratch) == {}, f"{replica.identity}'s spool was not drained"
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(replica.spool_path.name)) == [
            replica.spool_path.name]

    stored = _stored(proxied_journal.direct)
    by_epoch: dict[str, list[int]] = defaultdict(list)
    for epoch, lsn in sorted(stored):
        by_epoch[epoch].append(lsn)
    begun = [epoch for replica in replicas.values() for p in replica.processes for epoch in
             [e["journal"]["epoch"] for e in p.logs() if e["message"].startswith("leading")]]
    assert len(begun) == len(set(begun)) >= 4 and set(by_epoch) <= set(begun), "an epoch nobody began"
    missing = set(begun) - set(by_epoch)
    assert all(killed.get(epoch) == {} for epoch in missing), "an epoch with durable records is missing"

    ended = {e["journal"]["epoch"]: e["journal"] for replica in replicas.values() for e in replica.logs()
             if e["message"].startswith("term ended") and e.get("journal")}
    payloads = _ends(proxied_journal.direct)
    reasons = {epoch: payload["reason"] for epoch, payload in payloads.items()}
    assert {epoch: reasons[epoch] for epoch in killed if epoch in by_epoch} == {
        epoch: "recovered" for epoch in killed if epoch in by_epoch}
    assert set(ended) | {epoch for epoch in killed if epoch in by_epoch} == set(by_epoch)
    for epoch, lsns in by_epoch.items():
        kinds = [stored[(epoch, lsn)][0] for lsn in lsns]
        body = lsns[:-1]  # before the end record: gap-free
        assert body == list(range(lsns[0], lsns[0] + len(body))), f"epoch {epoch} has a gap"
        if lsns[-1] != body[-1] + 1:  # only a killed replica's unacknowledged tail, named by its end (SPEC §5)
            assert epoch in killed and payloads[epoch].get("handed_lsn") == lsns[-1] - 1, f"epoch {epoch} has a gap"
        assert kinds[:2] == ["incarnation", "checkpoint"], f"epoch {epoch} has no start"
        assert kinds[-1] == "end" and "end" not in kinds[:-1], f"epoch {epoch} is not closed by one end record"
        if epoch in killed:
            durable = killed[epoch]
            assert {k: stored[k] for k in durable if k in stored} == durable, f"epoch {epoch} lost a record"
            assert set(k for k in stored if k[0] == epoch) - set(durable) == {(epoch, lsns[-1])}, (
                f"epoch {epoch} holds records its replica had not made durable, besides its end")
        else:
            assert lsns[-1] == ended[epoch]["last_lsn"], f"epoch {epoch} ended at another LSN than its replica says"
    assert len(killed) == 3

    assert cli_main.main(["replay", "verify", "--journal", proxied_journal.direct]) == 0
