"""`Runtime.spec.devices`: publisher, projected inventory, discover and env mapping (SPEC §7.1)."""

from __future__ import annotations

import pytest

from kruntimes.devices import inventory_codec, runtime_spec

G = "gpu.example.com"
DEVICES = [{"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-1"}}}]


def test_a_controller_published_runtime_projects_its_canonical_annotation() -> None:
    parsed = runtime_spec.parse({"driver": G, "devices": DEVICES, "env": {"CUDA_VISIBLE_DEVICES": "uuid"}})
    assert parsed.publisher == "Controller" and parsed.inventory is not None
    assert parsed.inventory == inventory_codec.parse_annotation(parsed.inventory.text)
    assert parsed.env == (("CUDA_VISIBLE_DEVICES", f"{G}/uuid"),)


def test_a_runtimed_published_runtime_names_the_discover_argv() -> None:
    parsed = runtime_spec.parse({"driver": G, "publisher": "Runtimed", "discover": ["/bin/gpus", "--json"]})
    assert parsed.inventory is None and parsed.discover == ("/bin/gpus", "--json")


@pytest.mark.parametrize("spec,message", [
    ({"driver": G, "publisher": "Kubelet"}, "Controller or Runtimed"),
    ({"driver": G, "publisher": "Runtimed"}, "argv of 1 to 64"),
    ({"driver": G, "publisher": "Runtimed", "discover": "gpus --json"}, "argv"),
    ({"driver": G, "publisher": "Runtimed", "discover": ["x"], "devices": DEVICES}, "come from discover"),
    ({"driver": G, "discover": ["x"]}, "only for publisher Runtimed"),
    ({"driver": G, "devices": DEVICES * 2}, "used twice"),
    ({"driver": "Bad Driver"}, "DNS subdomain"),
    ({"driver": G, "env": {"KRUNTIMES_DEVICES": "uuid"}}, "not a variable name"),
    ({"driver": G, "env": {"1X": "uuid"}}, "not a variable name"),
    ({"driver": G, "env": {"X": "a/b/c"}}, "attribute"),
    ({"driver": G, "replicas": 2}, "unknown field"),
], ids=["an unknown publisher", "Runtimed without discover", "discover as one string",
        "Runtimed with declared devices", "discover with Controller", "a duplicate device", "a bad driver",
        "an env var in kruntimes' own namespace", "an env var starting with a digit", "an env attribute that is no name",
        "an unknown field"])
def test_invalid_runtime_devices_say_what_to_fix(spec: dict, message: str) -> None:
    with pytest.raises(runtime_spec.InvalidRuntimeDevices, match=message):
        runtime_spec.parse(spec)
