"""deploy/components/history-follow: a scheduler that stores records only, and the Deployment
that derives the history tables from them (`kruntimes journal index --follow`).

Built as a user adds it to the postgres overlay (a kustomization with the overlay as a
resource and the component), then read as the processes read their pods: the
scheduler's args and environment parsed by its own parser, the indexer's command by the
CLI's. The NetworkPolicies are evaluated as the API server's label selectors are.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from kruntimes.cli import main as cli_main
from kruntimes.cli import scheduler_cmd
from tests.unit.manifests import (
    BUILDS, IMAGE, K8S_VERSION, ROOT, Object, build, container, env, find, kustomize, kustomize_command,
)
from tests.unit.test_deploy import documented_secret

COMPONENT = ROOT / "deploy/components/history-follow"
INDEXER = "kruntimes-history-indexer"
SCHEDULER = "kruntimes-scheduler"
JOURNAL_ENV = "KRUNTIMES_JOURNAL_URL"

pytestmark = pytest.mark.skipif(kustomize_command() is None,
                                reason="building a component needs kustomize or kubectl")


def with_component(tmp_path: Path, **extra: Any) -> list[Object]:
    """The postgres overlay with the component, as a user's kustomization adds it."""
    here = tmp_path / "with-history-follow"
    here.mkdir()
    # kustomize wants relative paths from the kustomization that uses the component.
    rel = PurePosixPath(*[".."] * len(here.parts[1:]))
    (here / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [str(rel / BUILDS["postgres"].relative_to("/"))],
        "components": [str(rel / COMPONENT.relative_to("/"))], **extra}))
    return kustomize(here)


def _pod(objects: list[Object], name: str) -> Object:
    return dict(find(objects, "Deployment", name)["spec"]["template"]["spec"])


def test_the_component_renders_valid_manifests_and_adds_only_the_indexer_and_its_policy(tmp_path: Path) -> None:
    objects = with_component(tmp_path)
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    added = {(o["kind"], o["metadata"]["name"]) for o in objects} - {
        (o["kind"], o["metadata"]["name"]) for o in build("postgres")}
    assert added == {("Deployment", INDEXER), ("NetworkPolicy", INDEXER)}


def test_the_scheduler_stores_records_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler = container(_pod(with_component(tmp_path), SCHEDULER), "scheduler")
    monkeypatch.setenv(JOURNAL_ENV, documented_secret()[2])
    for variable, value in env(scheduler).items():
        if isinstance(value, str):
            monkeypatch.setenv(variable, value)
    args = cli_main.build_parser().parse_args(scheduler["command"][1:] + scheduler.get("args", []))
    assert scheduler_cmd.settings_from(args).journal_history == "follow"
    without = container(_pod(build("postgres"), SCHEDULER), "scheduler")
    assert "KRUNTIMES_JOURNAL_HISTORY" not in env(without), "inline stays the default without the component"


def test_one_indexer_follows_the_journal_the_scheduler_writes_with_its_image(tmp_path: Path) -> None:
    objects = with_component(tmp_path, images=[{"name": "ghcr.io/kruntimes/kruntimes", "newTag": "9.9.9"}])
    deployment = find(objects, "Deployment", INDEXER)
    indexer = container(_pod(objects, INDEXER), "history-indexer")
    scheduler = container(_pod(objects, SCHEDULER), "scheduler")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}, "never two indexers at once, even in a rollout"
    assert indexer["image"] == scheduler["image"] == IMAGE.replace("0.1.0", "9.9.9")
    args = cli_main.build_parser().parse_args(indexer["command"][1:] + indexer.get("args", []))
    assert args.run.__name__ == "run_index" and args.follow is True and args.url is None
    assert env(indexer)[JOURNAL_ENV] == env(scheduler)[JOURNAL_ENV] == {
        "secretKeyRef": {"name": "kruntimes-journal", "key": "url"}}
    assert not [o for o in objects if o["kind"] == "Secret"], "the journal Secret is the one people create"


def test_the_indexer_runs_restricted_without_an_api_token(tmp_path: Path) -> None:
    objects = with_component(tmp_path)
    pod = _pod(objects, INDEXER)
    indexer = container(pod, "history-indexer")
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"] == _pod(objects, SCHEDULER)["securityContext"]
    assert indexer["securityContext"] == container(_pod(objects, SCHEDULER), "scheduler")["securityContext"]
    assert indexer["resources"]["limits"] and indexer["resources"]["requests"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert all("emptyDir" in volumes[m["name"]] for m in indexer["volumeMounts"])


def _selects(selector: Object, labels: dict[str, str]) -> bool:
    """A label selector's verdict, as the API server gives it."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    tests = {"In": lambda e: labels.get(e["key"]) in e["values"],
             "NotIn": lambda e: labels.get(e["key"]) not in e["values"],
             "Exists": lambda e: e["key"] in labels, "DoesNotExist": lambda e: e["key"] not in labels}
    return all(tests[e["operator"]](e) for e in selector.get("matchExpressions", []))


def _egress_ports(policies: list[Object]) -> set[tuple[str, int]]:
    return {(p.get("protocol", "TCP"), p["port"]) for policy in policies for rule in policy["spec"].get("egress", [])
            for p in rule["ports"]}


def test_the_indexer_serves_metrics_on_the_port_its_flag_binds_and_the_pod_monitor_scrapes(tmp_path: Path) -> None:
    objects = with_component(tmp_path)
    indexer = container(_pod(objects, INDEXER), "history-indexer")
    args = cli_main.build_parser().parse_args(indexer["command"][1:] + indexer.get("args", []))
    (port,) = [p for p in indexer["ports"] if p["name"] == "metrics"]
    assert args.http_port == port["containerPort"]
    monitor = find(kustomize(ROOT / "deploy" / "monitoring"), "PodMonitor", INDEXER)
    assert _selects(monitor["spec"]["selector"], _pod_labels(objects, INDEXER))
    assert [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]] == ["metrics"]


def _pod_labels(objects: list[Object], name: str) -> dict[str, str]:
    return dict(find(objects, "Deployment", name)["spec"]["template"]["metadata"]["labels"])


def test_the_indexer_may_reach_the_database_and_dns_and_only_monitoring_may_reach_its_metrics(tmp_path: Path) -> None:
    objects = with_component(tmp_path)
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    workloads = {o["metadata"]["name"]: o["spec"]["template"]["metadata"]["labels"]
                 for o in objects if o["kind"] in ("Deployment", "Job")}

    def selecting(name: str) -> list[Object]:
        return [p for p in policies if _selects(p["spec"]["podSelector"], workloads[name])]

    on_indexer = selecting(INDEXER)
    assert [p["metadata"]["name"] for p in on_indexer] == [INDEXER], "policies add up: only its own may select it"
    assert _egress_ports(on_indexer) == {("UDP", 53), ("TCP", 53), ("TCP", 5432)}
    assert on_indexer[0]["spec"]["policyTypes"] == ["Ingress", "Egress"]
    [ingress] = on_indexer[0]["spec"]["ingress"]
    assert ingress["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert ingress["ports"] == [{"protocol": "TCP", "port": 8080}]
    for other in set(workloads) - {INDEXER}:
        assert [p["metadata"]["name"] for p in selecting(other)] == ["kruntimes"], other
        assert ("TCP", 443) in _egress_ports(selecting(other))


def test_the_indexers_probes_ask_its_metrics_server_on_the_port_it_binds(tmp_path: Path) -> None:
    indexer = container(_pod(with_component(tmp_path), INDEXER), "history-indexer")
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert indexer[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}, probe
    assert indexer["livenessProbe"]["failureThreshold"] * indexer["livenessProbe"]["periodSeconds"] >= 60
