"""runtimed's metrics (SPEC §7.8, §3.8): why Runs with devices wait or are refused on this pod.

`kruntimes_runtimed_device_waits_total{reason}` counts, from the admission guard's own
verdicts, each Run that starts waiting for a device (`busy`: one it was allocated is
held by a Run admitted earlier; `malformed_inventory`: the pod's inventory is broken
and admits nothing new) and each Run refused for its devices (`missing`:
`DeviceAllocationMissing` or `AllocatedDeviceMissing`). Labels come from these three
values only, so a pod's series are bounded whatever its Runs ask. The registry is
runtimed's own; `kruntimes runtimed --metrics-port` serves it (`cluster.probes`).

`kruntimes_runtimed_device_discoveries_total{result}` counts, with publisher Runtimed
(SPEC §7.1), each inventory runtimed published from `discover` (`published`) or each
failure it published as a malformed inventory (`malformed`: `runtimed.discovery`).
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter

from kruntimes.runtimed import devices

BUSY: Final = "busy"
MISSING: Final = "missing"
MALFORMED_INVENTORY: Final = "malformed_inventory"
WAIT_REASONS: Final = (BUSY, MISSING, MALFORMED_INVENTORY)
PUBLISHED: Final = "published"
MALFORMED: Final = "malformed"
DISCOVER_RESULTS: Final = (PUBLISHED, MALFORMED)


def wait_reason(why: str | None) -> str | None:
    """The metric's reason for a guard's reason text; None when the Run waits for no device."""
    if why == devices.WAIT_BUSY:
        return BUSY
    if why == devices.WAIT_MALFORMED:
        return MALFORMED_INVENTORY
    if why in devices.REFUSED_MESSAGES:
        return MISSING
    return None


class RuntimedMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.device_waits = Counter(
            "kruntimes_runtimed_device_waits_total",
            "Runs with devices this runtimed made wait (busy, malformed_inventory) or refused (missing)",
            ["reason"], registry=self.registry)
        for reason in WAIT_REASONS:  # every series from the start, so a rate is defined before the first wait
            self.device_waits.labels(reason=reason)

        self.device_discoveries = Counter(
            "kruntimes_runtimed_device_discoveries_total",
            "Device inventories this runtimed published from discover (published) or as malformed (malformed)",
            ["result"], registry=self.registry)
        for result in DISCOVER_RESULTS:
            self.device_discoveries.labels(result=result)

    def device_wait(self, reason: str) -> None:
        self.device_waits.labels(reason=reason).inc()

    def device_discovery(self, result: str) -> None:
        self.device_discoveries.labels(result=result).inc()
