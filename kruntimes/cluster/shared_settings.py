"""Reading the cluster settings ConfigMap that the scheduler and runtimed share (SPEC §2.3, amended 2026-12-04).

The parsing lives in `kruntimes.api.cluster_settings` (simulate reads the same
ConfigMap from a file); this is the one GET both components make. A ConfigMap that
does not exist gives the built-in settings; one that cannot be read or parsed is an
error, so a component never runs with a value of its own while the others follow
the ConfigMap.
"""

from __future__ import annotations

from typing import Any

import kubernetes.client
import urllib3
from kubernetes.client import ApiException

from kruntimes.api import cluster_settings
from kruntimes.cluster import errors


class SettingsUnreadable(errors.ApiError):
    """The settings ConfigMap could not be read, or holds a value nobody can use."""


def read(api: kubernetes.client.ApiClient, namespace: str, timeout: float = 10.0) -> cluster_settings.ClusterSettings:
    """The cluster settings from `namespace`/kruntimes-settings (built-in ones when it does not exist)."""
    where = f"ConfigMap {namespace}/{cluster_settings.CONFIGMAP}"
    try:
        found: Any = kubernetes.client.CoreV1Api(api).read_namespaced_config_map(
            cluster_settings.CONFIGMAP, namespace, _request_timeout=timeout)
    except ApiException as exc:
        if errors.status_code(exc) == 404:
            return cluster_settings.ClusterSettings()
        raise SettingsUnreadable(f"reading the cluster settings {where} failed: {errors.describe(exc)}; the "
                                 "scheduler and every runtimed must be allowed to get it (deploy/base)",
                                 errors.status_code(exc), errors.retry_after(exc)) from exc
    except (OSError, urllib3.exceptions.HTTPError) as exc:
        raise SettingsUnreadable(f"reading the cluster settings {where} failed: {exc}") from exc
    try:
        return cluster_settings.from_configmap({"data": found.data})
    except cluster_settings.SettingsError as exc:
        raise SettingsUnreadable(f"{where}: {exc}") from exc
