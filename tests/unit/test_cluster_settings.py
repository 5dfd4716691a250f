"""The default runs capacity is one cluster setting, read alike by the scheduler, runtimed and simulate (SPEC §2.3)."""

from __future__ import annotations

from typing import Any

import pytest

from kruntimes.api import cluster_settings
from kruntimes.simulate import InputError, load_documents, simulate
from tests.unit.test_simulate import NOW


@pytest.mark.parametrize("configmap, default", [
    (None, 1),
    ({"data": None}, 1),
    ({"data": {"other": "x"}}, 1),
    ({"data": {"defaultRunsCapacity": "4"}}, 4),
    ({"data": {"defaultRunsCapacity": "0"}}, 0),
    ({"data": {"defaultRunsCapacity": "1k"}}, 1000),
], ids=["no ConfigMap", "no data", "no key", "four", "zero", "a quantity"])
def test_the_settings_configmap_gives_the_default_runs_capacity(configmap: dict[str, Any] | None,
                                                                default: int) -> None:
    assert cluster_settings.from_configmap(configmap).default_runs_capacity == default


@pytest.mark.parametrize("data", [{"defaultRunsCapacity": "-1"}, {"defaultRunsCapacity": "1.5"},
                                  {"defaultRunsCapacity": "two"}, {"defaultRunsCapacity": 2}, ["x"]],
                         ids=["negative", "fractional", "not a number", "not a string", "data not a mapping"])
def test_a_malformed_setting_is_an_error_saying_what_to_set_never_a_guess(data: Any) -> None:
    with pytest.raises(cluster_settings.SettingsError, match="kruntimes-settings"):
        cluster_settings.from_configmap({"data": data})


def test_the_old_environment_variable_is_refused_saying_where_the_setting_went() -> None:
    problem = cluster_settings.legacy_setting_problem({"KRUNTIMES_DEFAULT_RUNS_CAPACITY": "2"})
    assert problem is not None and "ConfigMap kruntimes-settings" in problem
    assert cluster_settings.legacy_setting_problem({}) is None


POD = """apiVersion: v1
kind: Pod
metadata: {name: p, namespace: n, labels: {kruntimes.io/runtime: r},
           annotations: {kruntimes.io/runtimed-heartbeat: "2026-11-29T12:00:00Z"}}
status: {conditions: [{type: Ready, status: "True"}]}
"""
RUNS = "".join(f"""---
apiVersion: kruntimes.io/v1alpha1
kind: Run
metadata: {{name: r{i}, namespace: n, creationTimestamp: "2026-11-29T10:00:0{i}Z"}}
spec: {{runtime: r}}
""" for i in range(3))


def settings(value: str) -> str:
    return f"""---
apiVersion: v1
kind: ConfigMap
metadata: {{name: kruntimes-settings, namespace: kruntimes-system}}
data: {{defaultRunsCapacity: "{value}"}}
"""


@pytest.mark.parametrize("extra, placed", [("", 1), (settings("2"), 2), (settings("5"), 3)],
                         ids=["without the ConfigMap: 1", "the ConfigMap says 2", "the ConfigMap says 5"])
def test_simulate_reads_the_default_runs_capacity_from_the_same_configmap(extra: str, placed: int) -> None:
    placements = simulate(load_documents([("x.yaml", POD + RUNS + extra)]), NOW)
    assert sum(p.phase == "Scheduled" for p in placements) == placed


@pytest.mark.parametrize("extra, said", [(settings("-1"), "not a non-negative whole number"),
                                         (settings("2") + settings("3"), "a second kruntimes-settings")],
                         ids=["malformed", "given twice"])
def test_simulate_refuses_settings_it_cannot_use_naming_the_document(extra: str, said: str) -> None:
    with pytest.raises(InputError, match=said):
        simulate(load_documents([("x.yaml", POD + RUNS + extra)]), NOW)
