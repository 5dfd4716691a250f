"""`Runtime.spec.devices`: who publishes a pod's inventory, what it holds, and the env mapping (SPEC §7.1).

With `publisher: Controller` (the default) the Runtime itself declares the devices and
the controller projects them onto every pod as the `kruntimes.io/devices` annotation,
like capacity; the annotation text is computed here (canonical, so re-projection is
idempotent). With `publisher: Runtimed`, runtimed runs `discover` (an argv, no shell) at
start and publishes its output on its own pod; the Runtime then declares no devices.
`env` maps an environment variable of the Run's process to an attribute: runtimed sets
it to the allocated devices' values of that attribute, joined by `,` (§7.7).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from kruntimes.devices import inventory, inventory_codec

# The env mapping (§7.1 `env`, canonical JSON: variable → qualified attribute) reaches runtimed,
# which reads no Runtime (§7.7), as an environment variable of its container in the pod the
# controller creates: SPEC §2.1 and §7.1 name every annotation kruntimes owns on a Runtime Pod,
# and a mapping annotation is not among them (§4.2: "runtimed and its ... env present").
DEVICE_ENV_VARIABLE = "KRUNTIMES_DEVICE_ENV"
# With `publisher: Runtimed`, what runtimed runs at start and the driver its output must name
# (canonical JSON `{"argv": [...], "driver": d}`), in its container env as the mapping is. Its
# presence is also what lets runtimed write its own pod's inventory (deploy/base/runtimed-policy.yaml):
# a pod's env is fixed at creation, and only the controller creates Runtime Pods.
DEVICE_DISCOVER_VARIABLE = "KRUNTIMES_DEVICE_DISCOVER"

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
_KEYS = {"driver", "devices", "sharedCounters", "env", "publisher", "discover"}
MAX_ENV = 32
MAX_DISCOVER_ARGS = 64


class InvalidRuntimeDevices(ValueError):
    """`Runtime.spec.devices` that cannot be projected or published; the message says what to fix."""


@dataclass(frozen=True)
class RuntimeDevices:
    publisher: Literal["Controller", "Runtimed"]
    driver: str
    inventory: inventory.Inventory | None  # Controller: what every pod gets; Runtimed: None
    env: tuple[tuple[str, str], ...]  # env var → fully qualified attribute, sorted by var
    discover: tuple[str, ...]  # Runtimed: the argv runtimed runs at start


def parse(spec: object) -> RuntimeDevices:
    """The validated device part of a Runtime, else InvalidRuntimeDevices."""
    if not isinstance(spec, dict):
        raise InvalidRuntimeDevices("spec.devices must be an object")
    unknown = sorted(k for k in spec if k not in _KEYS)
    if unknown:
        raise InvalidRuntimeDevices(f"spec.devices has an unknown field {str(unknown[0])[:72]!r}")
    publisher = spec.get("publisher", "Controller")
    if publisher not in ("Controller", "Runtimed"):
        raise InvalidRuntimeDevices("spec.devices.publisher must be Controller or Runtimed")
    part = {k: spec[k] for k in ("driver", "devices", "sharedCounters") if k in spec}
    try:
        if publisher == "Controller":
            declared: inventory.Inventory | None = inventory_codec.parse_document(part)
            driver = declared.driver
        else:
            if "devices" in spec or "sharedCounters" in spec:
                raise InvalidRuntimeDevices("with publisher Runtimed the devices come from discover; "
                                            "remove spec.devices.devices and sharedCounters")
            declared = None
            driver = inventory_codec.parse_document({"driver": spec.get("driver"), "devices": []}).driver
    except inventory_codec.InvalidInventory as exc:
        raise InvalidRuntimeDevices(f"spec.devices: {exc}") from None
    discover = spec.get("discover")
    if publisher == "Runtimed":
        if (not isinstance(discover, list) or not 1 <= len(discover) <= MAX_DISCOVER_ARGS
                or not all(isinstance(a, str) for a in discover)):
            raise InvalidRuntimeDevices(f"spec.devices.discover must be an argv of 1 to {MAX_DISCOVER_ARGS} strings "
                                        "with publisher Runtimed, e.g. [\"/bin/list-gpus\", \"--json\"]")
    elif discover is not None:
        raise InvalidRuntimeDevices("spec.devices.discover is only for publisher Runtimed")
    return RuntimeDevices(publisher, driver, declared, _env(spec.get("env", {}), driver),
                          tuple(discover) if publisher == "Runtimed" else ())


def env_text(env: tuple[tuple[str, str], ...]) -> str | None:
    """The `KRUNTIMES_DEVICE_ENV` value of runtimed's container for a mapping; None when it is empty."""
    return inventory_codec.canonical_text(dict(env)) if env else None


def discover_text(devices: RuntimeDevices) -> str | None:
    """The `KRUNTIMES_DEVICE_DISCOVER` value of runtimed's container; None unless the publisher is Runtimed."""
    if devices.publisher != "Runtimed":
        return None
    return inventory_codec.canonical_text({"argv": list(devices.discover), "driver": devices.driver})


def _env(value: object, driver: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or len(value) > MAX_ENV:
        raise InvalidRuntimeDevices(f"spec.devices.env must map at most {MAX_ENV} variable names to attributes")
    mapping = []
    for name, attribute in value.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name) or name.startswith("KRUNTIMES_"):
            raise InvalidRuntimeDevices(f"spec.devices.env: {str(name)[:72]!r} is not a variable name a Run may get "
                                        "(letters, digits and '_', not starting with KRUNTIMES_)")
        problem = inventory_codec.qualified_name_error(attribute)
        if problem is not None:
            raise InvalidRuntimeDevices(f"spec.devices.env[{name}]: the attribute {str(attribute)[:72]!r} {problem}")
        assert isinstance(attribute, str)
        mapping.append((name, inventory.qualify(attribute, driver)))
    return tuple(sorted(mapping))
