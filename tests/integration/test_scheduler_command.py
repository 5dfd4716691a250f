"""`kruntimes scheduler` as a process: kubeconfig, JSON logs, probes and metrics, graceful SIGTERM,
and waiting for `kruntimes db upgrade` instead of migrating (SPEC §5)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from kubernetes import client

from kruntimes.journal.store import migrate
from kruntimes.journal.store.backends import Journal
from tests.integration.cluster import Cluster, wait_for
from tests.journal import factories
from tests.integration.db_proxy import ProxiedJournal, proxied_journal  # noqa: F401 - the fixture
from tests.integration.processes import Process, kubeconfig, run_scheduler  # noqa: F401 - the fixtures

# One scheduler per test, which must lead for one term: a renew deadline a loaded machine
# cannot miss (with 1 s, a starved process stepped down and led again, a second term).
# A first lease is created at once and a restart takes its own lease back at once, so
# nothing here waits for a lease to expire.
LEASE = ["--leader-elect-lease-duration", "15", "--leader-elect-renew-deadline", "10",
         "--leader-elect-retry-period", "0.2"]


def test_the_scheduler_process_schedules_serves_probes_and_metrics_and_shuts_down_on_sigterm(
        run_scheduler: Any, cluster_api: Cluster, kube_namespace: str, tmp_path: Path) -> None:
    journal = f"sqlite:///{tmp_path / 'journal.db'}"
    cluster_api.add_pod("python-0", runs=2)
    process = run_scheduler("--namespace", kube_namespace, "--leader-elect-resource-namespace", kube_namespace,
                            "--leader-elect-identity", "process-a", *LEASE,
                            "--http-address", "127.0.0.1", "--http-port", "0", "--binders", "1",
                            "--journal-url", journal)
    wait_for(lambda: process.get("/readyz")[0] == 200, timeout=60, what="/readyz 200")
    assert process.get("/healthz") == (200, "ok\n")
    cluster_api.add_run("r")
    wait_for(lambda: cluster_api.placements() == {"r": "python-0"}, timeout=60, what="the Run placed")
    # The status is visible before its answer is back from the binder process: wait for the count.
    wait_for(lambda: 'kruntimes_scheduler_schedule_results_total{result="scheduled"} 1.0' in process.get("/metrics")[1],
             what="the placing cycle's result counted")
    status, metrics = process.get("/metrics")
    assert status == 200
    assert "kruntimes_scheduler_leader 1.0" in metrics and "kruntimes_journal_records" in metrics
    process.popen.send_signal(signal.SIGTERM)
    assert process.finish() == 0
    messages = [entry["message"] for entry in process.logs()]  # every line is JSON
    assert messages[-1] == "stopped" and "shutting down" in messages
    lease = client.CoordinationV1Api(cluster_api.core.api_client).read_namespaced_lease("kruntimes-scheduler",
                                                                                       kube_namespace)
    assert lease.spec.holder_identity is None  # released, not left to expire
    store = Journal.open(journal)
    try:
        leader = [r.payload for r in store.read(kinds={"leader"})]
    finally:
        store.close()
    assert [(r["event"], r.get("reason")) for r in leader] == [("acquired", None), ("lost", "shutdown")]


def test_a_setting_that_cannot_work_is_one_line_and_exit_code_2(run_scheduler: Any) -> None:
    process = run_scheduler("--leader-elect-lease-duration", "5", "--leader-elect-renew-deadline", "8")
    assert process.finish() == 2
    assert len(process.lines) == 1
    assert process.lines[0].startswith("kruntimes scheduler: need 0 < retry period (2.0) < renew deadline (8.0)")


def _metric(process: Process, name: str) -> float:
    """A metric's value (summed over its label sets), 0 if absent."""
    status, text = process.get("/metrics")
    assert status == 200
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and line[len(name):len(name) + 1] in (" ", "{"))


def _scheduled(process: Process) -> float:
    """Placing cycles over (counted once the binder's answer is back, with the cycle's records)."""
    return _metric(process, 'kruntimes_scheduler_schedule_results_total{result="scheduled"}')


def _durable(process: Process) -> bool:
    """Every record appended so far is committed or spooled (none is dropped or rejected here)."""
    settled = (_metric(process, "kruntimes_journal_records_written_total")
               + _metric(process, "kruntimes_journal_records_spilled_total"))
    appended = _metric(process, "kruntimes_journal_records_appended_total")
    return 0 < appended <= settled


def _stored(url: str) -> list[tuple[str, int, str]]:
    """Every stored record's (epoch, LSN, kind): the oldest epoch's first (epoch order), each in LSN order."""
    store = Journal.open(url, create=False)
    try:
        return [(r.incarnation, r.lsn, r.kind) for r in factories.in_epoch_order(store)]
    finally:
        store.close()


def test_a_replica_on_an_unmigrated_journal_schedules_at_once_names_the_job_when_late_and_drains_after_db_upgrade(
        run_scheduler: Any, cluster_api: Cluster, kube_namespace: str, tmp_path: Path) -> None:
    journal = f"sqlite:///{tmp_path / 'journal.db'}"
    cluster_api.add_pod("python-0", runs=2)
    process = run_scheduler("--namespace", kube_namespace, "--leader-elect-resource-namespace", kube_namespace,
                            *LEASE, "--http-address", "127.0.0.1", "--http-port", "0",
                            "--journal-url", journal, "--journal-spool", str(tmp_path / "spool"),
                            "--journal-migrate", "never", "--journal-schema-wait", "0.5")
    cluster_api.add_run("r")
    wait_for(lambda: cluster_api.placements() == {"r": "python-0"}, timeout=60, what="the Run placed")
    assert process.get("/readyz")[0] == 200 and _metric(process, "kruntimes_scheduler_leader") == 1
    late = wait_for(lambda: next((e for e in process.logs() if e["level"] == "error"
                                  and "kruntimes-db-upgrade Job" in e["message"]), None),
                    timeout=60, what="the error naming the Job")
    assert "scheduling goes on" in late["message"]
    assert _metric(process, "kruntimes_journal_schema_waiting") == 1
    wait_for(lambda: _metric(process, "kruntimes_journal_records_spilled_total") > 0, timeout=60, what="records spooled")
    assert _metric(process, "kruntimes_journal_records_written_total") == 0
    assert migrate.current_revision(journal) is None  # the replica migrated nothing
    migrate.upgrade(journal)  # what `kruntimes db upgrade` does
    wait_for(lambda: _metric(process, "kruntimes_journal_schema_waiting") == 0, timeout=30, what="the schema seen")
    wait_for(lambda: _metric(process, "kruntimes_journal_records_written_total") > 0, timeout=30, what="records written")
    process.popen.send_signal(signal.SIGTERM)
    assert process.finish() == 0
    kinds = [kind for _, _, kind in _stored(journal)]
    assert kinds[:2] == ["incarnation", "checkpoint"] and "cycle" in kinds and kinds.count("leader") == 2


def test_a_scheduler_restarted_with_the_database_down_leads_on_its_spool_and_drains_when_the_database_returns(
        run_scheduler: Any, cluster_api: Cluster, kube_namespace: str, tmp_path: Path,
        proxied_journal: ProxiedJournal) -> None:
    cluster_api.add_pod("python-0", runs=10)
    args = ["--namespace", kube_namespace, "--leader-elect-resource-namespace", kube_namespace,
            "--leader-elect-identity", "replica-a", *LEASE,
            "--http-address", "127.0.0.1", "--http-port", "0", "--journal-url", proxied_journal.url,
            "--journal-spool", str(tmp_path / "spool")]
    first = run_scheduler(*args)
    cluster_api.add_run("r0")
    wait_for(lambda: cluster_api.placements() == {"r0": "python-0"}, timeout=60, what="r0 placed")
    wait_for(lambda: _metric(first, "kruntimes_journal_records_written_total") > 0, timeout=60, what="records written")
    proxied_journal.proxy.cut("reset")
    cluster_api.add_run("r1")
    wait_for(lambda: len(cluster_api.placements()) == 2, timeout=60, what="r1 placed with the database away")
    wait_for(lambda: _metric(first, "kruntimes_journal_records_spilled_total") > 0, timeout=60, what="records spooled")
    # r1's bind record is made when the binder process's answer is back, which can be after the
    # placement is visible; kill only once both placing cycles are over and every record is durable.
    wait_for(lambda: _scheduled(first) == 2 and _durable(first), timeout=60, what="r1's records in the spool")
    first.kill()  # with records in its spool
    assert (tmp_path / "spool").stat().st_size > 8

    second = run_scheduler(*args)  # the database is still away
    wait_for(lambda: any(e["message"].startswith("leading") for e in second.logs()), timeout=60,
             what="the restarted scheduler leading with the database away")
    cluster_api.add_run("r2")
    wait_for(lambda: len(cluster_api.placements()) == 3, timeout=60, what="r2 placed with the database away")
    assert _metric(second, "kruntimes_journal_records_written_total") == 0
    proxied_journal.proxy.restore()
    wait_for(lambda: _metric(second, "kruntimes_journal_records_written_total") > 0, timeout=30,
             what="the spool drained once the database answers")
    second.popen.send_signal(signal.SIGTERM)
    assert second.finish() == 0
    stored = _stored(proxied_journal.direct)
    epochs = list(dict.fromkeys(incarnation for incarnation, _, _ in stored))
    assert len(epochs) == 2 and len(stored) == len({(i, lsn) for i, lsn, _ in stored})
    newest = [kind for incarnation, _, kind in stored if incarnation == epochs[1]]
    assert newest[:2] == ["incarnation", "checkpoint"] and newest.count("leader") == 2  # acquired, lost
    assert sum(kind == "bind" for _, _, kind in stored) >= 3
