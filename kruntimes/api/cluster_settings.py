"""The settings every kruntimes component must read alike, from one ConfigMap (SPEC §2.3, amended 2026-12-04).

The default `runs` capacity (what a Runtime Pod without a `runs` entry holds) used to
be a flag of the scheduler and one of runtimed: set one and not the other, and the
scheduler placed Runs that runtimed then refused, leaving them Scheduled. So it is
one cluster setting: the ConfigMap `kruntimes-settings` in the kruntimes namespace
(`kruntimes-system`, or `KRUNTIMES_SETTINGS_NAMESPACE`), key `defaultRunsCapacity`,
read by the scheduler at start-up, by runtimed at start-up and every minute,
and by `kruntimes simulate` from the same ConfigMap given among its input documents.
No ConfigMap, or no key: 1. A malformed value is an error for every reader alike,
never a guess one of them makes on its own.

Pure: parsing only; `kruntimes.cluster.shared_settings` fetches the ConfigMap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from kruntimes.api import quantity

CONFIGMAP = "kruntimes-settings"
DEFAULT_NAMESPACE = "kruntimes-system"
NAMESPACE_ENV = "KRUNTIMES_SETTINGS_NAMESPACE"
DEFAULT_RUNS_CAPACITY_KEY = "defaultRunsCapacity"
BUILT_IN_DEFAULT_RUNS_CAPACITY = 1


class SettingsError(ValueError):
    """The settings ConfigMap holds something no component can use; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """What the scheduler, runtimed and simulate must agree on."""

    default_runs_capacity: int = BUILT_IN_DEFAULT_RUNS_CAPACITY


def is_settings(doc: Mapping[str, Any]) -> bool:
    """Whether an object is the settings ConfigMap (in any namespace: `simulate` reads files)."""
    meta = doc.get("metadata")
    return (doc.get("apiVersion"), doc.get("kind")) == ("v1", "ConfigMap") and isinstance(meta, Mapping) \
        and meta.get("name") == CONFIGMAP


def from_configmap(configmap: Mapping[str, Any] | None) -> ClusterSettings:
    """The settings a ConfigMap declares; None (no ConfigMap) gives the built-in ones."""
    if configmap is None:
        return ClusterSettings()
    data = configmap.get("data")
    if data is None:
        return ClusterSettings()
    if not isinstance(data, Mapping):
        raise SettingsError(f"ConfigMap {CONFIGMAP}: data must be a mapping of strings")
    raw = data.get(DEFAULT_RUNS_CAPACITY_KEY)
    if raw is None:
        return ClusterSettings()
    if not isinstance(raw, str):
        raise SettingsError(f"ConfigMap {CONFIGMAP}: data.{DEFAULT_RUNS_CAPACITY_KEY} must be a string")
    try:
        value = quantity.parse_count(raw)
    except quantity.InvalidQuantity as exc:
        raise SettingsError(f"ConfigMap {CONFIGMAP}: data.{DEFAULT_RUNS_CAPACITY_KEY} {quantity.describe_input(raw)} "
                            f"is not a non-negative whole number; set it to e.g. \"1\" or \"4\"") from exc
    return ClusterSettings(default_runs_capacity=value)


LEGACY_ENV = "KRUNTIMES_DEFAULT_RUNS_CAPACITY"


def legacy_setting_problem(environ: Mapping[str, str]) -> str | None:
    """What to do when the environment still sets the default the old way (each component its own)."""
    if environ.get(LEGACY_ENV):
        return (f"{LEGACY_ENV} is no longer read: the default runs capacity is one cluster setting, "
                f"data.{DEFAULT_RUNS_CAPACITY_KEY} of the ConfigMap {CONFIGMAP} (SPEC §2.3); set it there and "
                f"remove {LEGACY_ENV}")
    return None
