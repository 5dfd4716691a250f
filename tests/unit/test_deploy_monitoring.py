"""deploy/monitoring (ServiceMonitor, PrometheusRule, Grafana dashboard) and the base's NetworkPolicy.

The alerts and the dashboard query only metrics the scheduler serves: the names are
read from a registry filled by the very constructors `kruntimes scheduler` uses, so a
renamed metric fails here instead of leaving a dashboard blank or an alert silent.
"""

from __future__ import annotations

import json
import re

import kubernetes.client
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from kruntimes.cluster.runner import ClusterScheduler
from kruntimes.cluster.settings import ClusterSettings
from kruntimes.cli import journal_index
from kruntimes.controller.metrics import ControllerMetrics
from kruntimes.journal.write import metrics as journal_metrics
from tests.unit.manifests import NAMESPACE, ROOT, build, find, kustomize, kustomize_command

MONITORING = ROOT / "deploy" / "monitoring"
METRIC = re.compile(r"\bkruntimes_[a-z0-9_]+\b")


@pytest.fixture(scope="module")
def served() -> set[str]:
    """Every sample name a scheduler's /metrics serves (a journal attached), the history indexer's and the
    Runtime controller's (its informers' are the scheduler's own kind)."""
    registry = CollectorRegistry()
    ClusterScheduler(kubernetes.client.ApiClient(), ClusterSettings(), registry=registry)
    journal_metrics.for_registry(registry)
    journal_index.Metrics(registry)  # the history indexer's (deploy/components/history-follow)
    ControllerMetrics(registry)  # the Runtime controller's (deploy/monitoring/podmonitor-controller.yaml)
    # From the TYPE lines: a labelled counter serves no sample until its first increment.
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    names = set()
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            base = name.removesuffix("_total") if kind == "counter" else name  # versions differ here
            names |= {base + suffix for suffix in suffixes.get(kind, ("",))}
    return names


def _rule_expressions() -> list[str]:
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]


def _dashboard_expressions() -> list[str]:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    return [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]


def test_the_served_metrics_include_the_ones_the_alerts_are_about(served: set[str]) -> None:
    assert {"kruntimes_scheduler_schedule_results_total", "kruntimes_journal_records_spilled_total",
            "kruntimes_scheduler_reservation_conflicts_total"} <= served


@pytest.mark.parametrize("source", ["alerts", "dashboard"])
def test_every_query_names_only_metrics_the_scheduler_serves(source: str, served: set[str]) -> None:
    expressions = _rule_expressions() if source == "alerts" else _dashboard_expressions()
    assert expressions
    unknown = sorted({name for e in expressions for name in METRIC.findall(e)} - served)
    assert unknown == []


def test_the_alerts_cover_stuck_pending_a_growing_spool_and_bind_conflicts() -> None:
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    assert {"KruntimesRunsStuckPending", "KruntimesJournalSpoolGrowing", "KruntimesBindConflicts"} <= set(alerts)
    for name, alert in alerts.items():
        assert alert["labels"]["severity"] in ("warning", "critical"), name
        assert alert["annotations"]["summary"] and alert["annotations"]["description"], name


def test_a_run_that_can_never_fit_raises_an_alert_within_ten_minutes_whatever_else_schedules() -> None:
    # Issue 27: KruntimesRunsStuckPending needs 30 minutes without one placement, and a parked
    # Run runs no cycles, so a Run no pod can ever fit went unseen while the others scheduled.
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    alert = alerts["KruntimesRunCannotFit"]
    assert alert["expr"].split() == ["max(kruntimes_scheduler_unfittable_runs)", ">", "0"]
    assert alert["for"] == "10m"
    assert "kubectl get runs" in alert["annotations"]["description"]


def test_records_whose_history_rows_no_indexer_writes_raise_an_alert() -> None:
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    expr = alerts["KruntimesHistoryNotIndexed"]["expr"]
    # The scheduler's gauge, unless the indexer is writing rows (absent indexer: no series, so it fires).
    assert "kruntimes_journal_history_deferred" in expr.split("unless")[0]
    assert "kruntimes_history_indexed_records_total" in expr.split("unless")[1]


def test_the_dashboard_shows_pending_runs_by_why_they_wait() -> None:
    expressions = _dashboard_expressions()
    assert "sum by (state) (kruntimes_scheduler_pending_runs)" in expressions
    assert any("kruntimes_scheduler_unfittable_runs" in e for e in expressions)


def test_the_dashboard_panels_have_unique_ids_and_a_prometheus_datasource() -> None:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)) and dashboard["uid"]
    assert all(p["datasource"]["type"] == "prometheus" for p in dashboard["panels"])


def test_the_service_monitor_scrapes_the_schedulers_metrics_port() -> None:
    objects = (kustomize(MONITORING) if kustomize_command() else
               [d for f in ("servicemonitor.yaml", "prometheusrule.yaml")
                for d in yaml.safe_load_all((MONITORING / f).read_text()) if d])
    monitor = find(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["metadata"]["namespace"] == NAMESPACE
    service = find(build("base"), "Service", "kruntimes-scheduler-metrics")
    labels = service["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]


def _metrics_port(container: dict) -> int:
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == "metrics"]
    return port


@pytest.mark.parametrize("deployment,container", [("kruntimes-scheduler", "scheduler"),
                                                  ("kruntimes-controller", "controller")])
def test_probes_and_metrics_are_served_on_the_port_the_flags_bind(deployment: str, container: str) -> None:
    spec = find(build("base"), "Deployment", deployment)["spec"]["template"]["spec"]
    (c,) = [c for c in spec["containers"] if c["name"] == container]
    flags = dict(a.split("=", 1) for a in c.get("args", []) + c["command"] if a.startswith("--") and "=" in a)
    assert int(flags["--http-port"]) == _metrics_port(c)
    assert c["livenessProbe"]["httpGet"]["port"] == c["readinessProbe"]["httpGet"]["port"] == "metrics"


def test_the_network_policy_admits_metrics_from_monitoring_only_and_egress_to_api_and_database() -> None:
    objects = build("base")
    policy = find(objects, "NetworkPolicy", "kruntimes")
    spec = policy["spec"]
    assert set(spec["policyTypes"]) == {"Ingress", "Egress"}
    for deployment in ("kruntimes-scheduler", "kruntimes-controller"):
        labels = find(objects, "Deployment", deployment)["spec"]["template"]["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in spec["podSelector"]["matchLabels"].items()), deployment
    (ingress,) = spec["ingress"]
    assert ingress["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    scheduler = find(objects, "Deployment", "kruntimes-scheduler")["spec"]["template"]["spec"]["containers"][0]
    assert ingress["ports"] == [{"protocol": "TCP", "port": _metrics_port(scheduler)}]
    egress = {(p["protocol"], p["port"]) for rule in spec["egress"] for p in rule["ports"]}
    assert egress == {("UDP", 53), ("TCP", 53), ("TCP", 443), ("TCP", 6443), ("TCP", 5432)}


def test_the_dashboard_shows_the_controller_and_runtimed() -> None:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    by_title = {p["title"]: [t["expr"] for t in p.get("targets", [])] for p in dashboard["panels"]}
    controller = [e for title, es in by_title.items() if title.startswith("Runtime controller:") for e in es]
    assert {m for e in controller for m in METRIC.findall(e)} == {
        "kruntimes_controller_reconciles_total", "kruntimes_controller_runtime_pods_total",
        "kruntimes_controller_runs_lost_total", "kruntimes_controller_leader"}
    (runtimed,) = [es for title, es in by_title.items() if title.startswith("runtimed ")]
    assert "runtimed stale" in runtimed[0] and "kruntimes_scheduler_filter_rejections_total" in runtimed[0]
    panels = sorted((p["gridPos"]["y"], p["gridPos"]["x"]) for p in dashboard["panels"])
    assert len(panels) == len(set(panels)), "two panels in one place"


def test_a_pod_monitor_scrapes_the_controllers_metrics_port() -> None:
    monitor = yaml.safe_load((MONITORING / "podmonitor-controller.yaml").read_text())
    pod = find(build("base"), "Deployment", "kruntimes-controller")["spec"]["template"]
    assert all(pod["metadata"]["labels"].get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]] == [
        p["name"] for c in pod["spec"]["containers"] for p in c["ports"]] == ["metrics"]
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    assert "podmonitor-controller.yaml" in (MONITORING / "kustomization.yaml").read_text()
