"""The plugin registry: one literal map from name to factory.

Built through `_registry`, which refuses duplicate names, so two plugins can never
silently shadow each other.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from kruntimes.scheduler.plugins.affinity import RunAffinity
from kruntimes.scheduler.plugins.availability import RuntimePodAvailability
from kruntimes.scheduler.plugins.device_allocation import DeviceAllocation
from kruntimes.scheduler.plugins.device_preference import DevicePreference
from kruntimes.scheduler.plugins.least_loaded import LeastLoaded
from kruntimes.scheduler.plugins.preferred_affinity import PreferredRunAffinity


def _registry(*factories: Callable[[], Any]) -> Mapping[str, Callable[[], Any]]:
    out: dict[str, Callable[[], Any]] = {}
    for factory in factories:
        name = factory().name
        if name in out:
            raise ValueError(f"plugin {name} registered twice")
        out[name] = factory
    return out


REGISTRY = _registry(RuntimePodAvailability, RunAffinity, DeviceAllocation, PreferredRunAffinity, LeastLoaded,
                     DevicePreference)
