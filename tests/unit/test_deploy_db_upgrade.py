"""The kruntimes-db-upgrade Job: the one place a cluster's journal is migrated (SPEC §5).

The postgres overlay ships it beside two scheduler replicas that only wait for the
schema; the dev overlay's single scheduler journals to SQLite on its own emptyDir, which
no Job can reach, so it migrates its journal itself.
"""

from __future__ import annotations

import pytest

from kruntimes.cli import main as cli_main
from kruntimes.cli import scheduler_cmd
from tests.unit.test_deploy import documented_secret
from tests.unit.manifests import IMAGE, Object, build, container, decoded, env, find

JOB = "kruntimes-db-upgrade"
SCHEDULER = "kruntimes-scheduler"
JOURNAL_ENV = "KRUNTIMES_JOURNAL_URL"


def _job_pod() -> Object:
    return dict(find(build("postgres"), "Job", JOB)["spec"]["template"]["spec"])


def test_only_the_postgres_overlay_ships_the_migration_job() -> None:
    assert [o["metadata"]["name"] for o in build("postgres") if o["kind"] == "Job"] == [JOB]
    assert not [o for o in build("dev") + build("base") if o["kind"] == "Job"]


def test_the_job_runs_db_upgrade_from_the_schedulers_image() -> None:
    objects = build("postgres")
    job_container = container(_job_pod(), "db-upgrade")
    scheduler = container(find(objects, "Deployment", SCHEDULER)["spec"]["template"]["spec"], "scheduler")
    assert job_container["command"] == ["kruntimes", "db", "upgrade"]
    assert job_container["image"] == scheduler["image"] == IMAGE
    args = cli_main.build_parser().parse_args(job_container["command"][1:] + job_container.get("args", []))
    assert args.run.__name__ == "run_upgrade" and args.revision == "head"


def test_the_job_reads_the_journal_url_from_the_schedulers_secret_never_the_command_line() -> None:
    objects = build("postgres")
    job_container = container(_job_pod(), "db-upgrade")
    scheduler = container(find(objects, "Deployment", SCHEDULER)["spec"]["template"]["spec"], "scheduler")
    assert env(job_container)[JOURNAL_ENV] == env(scheduler)[JOURNAL_ENV] == {
        "secretKeyRef": {"name": "kruntimes-journal", "key": "url"}}
    assert "--url" not in " ".join(job_container["command"] + job_container.get("args", []))
    assert not [o for o in objects if o["kind"] == "Secret"]  # the one people create, never overwritten


def test_the_job_runs_as_non_root_without_an_api_token_and_retries_a_database_still_starting() -> None:
    job = find(build("postgres"), "Job", JOB)
    pod = job["spec"]["template"]["spec"]
    security = container(pod, "db-upgrade")["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert pod["automountServiceAccountToken"] is False
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] >= 1
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert all("emptyDir" in volumes[m["name"]] for m in container(pod, "db-upgrade")["volumeMounts"])


def _scheduler_migrate_mode(name: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """What the overlay's scheduler decides, parsed as the process parses its pod's args and env."""
    objects = build(name)
    scheduler = container(find(objects, "Deployment", SCHEDULER)["spec"]["template"]["spec"], "scheduler")
    secrets = [o for o in objects if o["kind"] == "Secret"]
    url = decoded(secrets[0]["data"]["url"]) if secrets else documented_secret()[2]
    monkeypatch.setenv(JOURNAL_ENV, url)
    for variable, value in env(scheduler).items():
        if isinstance(value, str):
            monkeypatch.setenv(variable, value)
    args = cli_main.build_parser().parse_args(scheduler["command"][1:] + scheduler.get("args", []))
    return scheduler_cmd.settings_from(args).journal_migrate


def test_the_postgres_replicas_never_migrate_and_the_dev_scheduler_migrates_its_own_sqlite(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert _scheduler_migrate_mode("postgres", monkeypatch) == "never"
    assert _scheduler_migrate_mode("dev", monkeypatch) == "auto"
