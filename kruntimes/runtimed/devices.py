"""runtimed's side of device claims: the pod's inventory, a Run's claim and results, the verdict (SPEC §7.7).

runtimed admits by device name, atomically with the capacity check (the guard calls
`verdict` under its lock), and evaluates no CEL and reads no class: the decision
itself is `kruntimes.devices.admission`'s. This module only reads what that decision
needs from API objects (its pod's `kruntimes.io/devices` annotation and the env mapping
the controller put in runtimed's container env, a Run's `spec.devices` and `status.devices`) and
says what the guard does with each verdict:

- admit: claim the Run (its devices are free);
- wait (busy, or a malformed inventory, which admits nothing new): the Run stays
  Scheduled and is re-checked when an admitted Run ends or the inventory changes;
- refuse (`DeviceAllocationMissing`, `AllocatedDeviceMissing`): the Run ends Failed.

A Run without a device claim is never looked at here: it is admitted exactly as before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from kruntimes.devices import admission, claims, inventory, inventory_codec, results, runtime_spec, usage
from kruntimes.wire import DEVICES_ANNOTATION

# The Runtime's `spec.devices.env`, in runtimed's container env of the pod the controller made:
# runtimed reads no Runtime (SPEC §7.7), and reads it from the pod object it watches anyway.
DEVICE_ENV_VARIABLE = runtime_spec.DEVICE_ENV_VARIABLE
RUNTIMED_CONTAINER = "runtimed"  # the controller's name for it (controller.reconcile.RUNTIMED_CONTAINER)

WAIT_BUSY = "a device it was allocated is in use by a Run admitted earlier"
WAIT_MALFORMED = ("the pod's device inventory (kruntimes.io/devices) is malformed; "
                  "nothing that asks for devices is admitted until it is fixed")
REFUSED_MESSAGES = {
    admission.DEVICE_ALLOCATION_MISSING: "its status.devices does not cover spec.devices (no allocation, or one "
                                         "for other requests): the scheduler must allocate its devices; create "
                                         "the Run again",
    admission.ALLOCATED_DEVICE_MISSING: "a device it was allocated is no longer in its runtime pod's inventory; "
                                        "create the Run again to be allocated devices the pod has",
}


@dataclass(frozen=True, slots=True)
class PodDevices:
    """The pod's inventory as runtimed reads it; `malformed` when the annotation is there but broken."""

    inventory: inventory.Inventory | None = None
    malformed: bool = False
    env: tuple[tuple[str, str], ...] = ()  # sorted (variable, qualified attribute)


@dataclass(frozen=True, slots=True, eq=False)
class RunDevices:
    """A Run's device claim and the `status.devices` the scheduler wrote with its assignment."""

    claim: claims.DeviceClaim
    status: Any  # status.devices as written (judged entry by entry by `kruntimes.devices`)


def pod_devices(annotations: Mapping[str, Any], env_text: str | None = None) -> PodDevices:
    """The pod's device inventory from its annotations, with the env mapping (`device_env` of the pod)."""
    text = annotations.get(DEVICES_ANNOTATION)
    env = _env(env_text)
    if text is None:
        return PodDevices(env=env)
    try:
        return PodDevices(inventory_codec.parse_annotation(text), env=env)
    except inventory_codec.InvalidInventory:
        return PodDevices(malformed=True, env=env)


def device_env(pod: Mapping[str, Any]) -> str | None:
    """`KRUNTIMES_DEVICE_ENV` of the pod's runtimed container, as the controller set it; None: no mapping."""
    return runtimed_env(pod, DEVICE_ENV_VARIABLE)


def runtimed_env(pod: Mapping[str, Any], name: str) -> str | None:
    """The value the controller gave `name` in the pod's runtimed container env; None when it is not there."""
    spec = pod.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    for container in containers if isinstance(containers, list) else []:
        if isinstance(container, Mapping) and container.get("name") == RUNTIMED_CONTAINER:
            for var in container.get("env") or []:
                if isinstance(var, Mapping) and var.get("name") == name:
                    value = var.get("value")
                    return value if isinstance(value, str) else None
    return None


def _env(text: Any) -> tuple[tuple[str, str], ...]:
    try:
        value = json.loads(text) if isinstance(text, str) else {}
    except ValueError:
        return ()
    if not isinstance(value, dict):
        return ()
    return tuple(sorted((k, v) for k, v in value.items() if isinstance(k, str) and isinstance(v, str)))


def run_devices(run: Mapping[str, Any]) -> RunDevices | None:
    """The Run's claim and results; None for a Run without a (valid) claim.

    An invalid claim is not runtimed's to judge here: the Run's problems (the API
    model runs the same parser) end it Failed before it is offered to the guard.
    """
    spec = run.get("spec")
    raw = spec.get("devices") if isinstance(spec, Mapping) else None
    if raw is None:
        return None
    try:
        claim = claims.parse_claim(raw)
    except claims.InvalidClaim:
        return None
    status = run.get("status")
    return RunDevices(claim, status.get("devices") if isinstance(status, Mapping) else None)


def holders(admitted: list[RunDevices]) -> list[usage.Holder]:
    """What the admitted Runs hold, from their own results."""
    return [h for run in admitted for h in results.holders(run.status)]


def verdict(pod: PodDevices, admitted: list[RunDevices], run: RunDevices) -> admission.Verdict:
    """`kruntimes.devices.admission.admit` for this pod, given the admitted Runs' devices."""
    return admission.admit(pod.inventory, pod.malformed, holders(admitted), run.claim, run.status)


def process_env(pod: PodDevices, run: RunDevices) -> dict[str, str]:
    """`KRUNTIMES_DEVICES` and the env mapping's variables for the Run's process."""
    if pod.inventory is None:
        return {}
    return admission.process_env(pod.inventory, run.status, pod.env)
