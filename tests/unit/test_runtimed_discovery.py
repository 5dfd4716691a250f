"""runtimed runs `discover` and publishes what it prints as the pod's inventory, or why it is malformed (SPEC §7.1)."""

from __future__ import annotations

import json
import sys
import time

import pytest

from kruntimes.devices import inventory_codec
from kruntimes.runtimed import discovery

PY = sys.executable
G = "gpu.example.com"
# Spaced and with keys out of order, as a tool prints it: published canonical.
PRINTED = '{ "driver": "gpu.example.com", "devices": [ {"name": "gpu-0", "attributes": {"numa": {"int": 0}}} ] }'
CANONICAL = '{"devices":[{"attributes":{"numa":{"int":0}},"name":"gpu-0"}],"driver":"gpu.example.com"}'


def printing(text: str, code: int = 0, stderr: str = "") -> discovery.Discover:
    script = f"import sys; sys.stdout.write({text!r}); sys.stderr.write({stderr!r}); sys.exit({code})"
    return discovery.Discover((PY, "-c", script), G)


def test_a_discover_that_prints_an_inventory_publishes_its_canonical_text_and_the_scheduler_s_digest() -> None:
    published = discovery.publish(printing(PRINTED))
    assert (published.text, published.problem) == (CANONICAL, None)
    assert published.digest == inventory_codec.parse_annotation(CANONICAL).digest


FAILURES = [
    ("a discover that exits non-zero says its code and stderr", printing(PRINTED, 3, "no driver loaded"),
     "exited with code 3: no driver loaded"),
    ("a discover that cannot start says so", discovery.Discover(("/nonexistent/list-gpus",), G), "could not start"),
    ("a discover that prints no JSON is malformed", printing("gpu-0 gpu-1"), "no valid device inventory"),
    ("a discover that breaks a bound is malformed", printing(json.dumps(
        {"driver": G, "devices": [{"name": f"g-{i}"} for i in range(65)]})), "at most 64"),
    ("a discover that names a device twice is malformed", printing(json.dumps(
        {"driver": G, "devices": [{"name": "g"}, {"name": "g"}]})), "used twice"),
    ("a discover of another driver is malformed", printing(json.dumps({"driver": "nic.example.com", "devices": []})),
     "the Runtime's is 'gpu.example.com'"),
    ("a discover that prints more than the annotation may hold is stopped", discovery.Discover(
        (PY, "-c", "import sys\nwhile True: sys.stdout.write('x' * 65536)"), G), "printed more than 65,536 bytes"),
    ("a discover value runtimed cannot read is published as a failure", discovery.Discover((), ""),
     "KRUNTIMES_DEVICE_DISCOVER"),
]


@pytest.mark.parametrize("_, discover, says", FAILURES, ids=[f[0] for f in FAILURES])
def test_a_failing_discover_publishes_a_malformed_inventory_that_says_why(
        _: str, discover: discovery.Discover, says: str) -> None:
    published = discovery.publish(discover)
    assert published.problem is not None and says in published.problem
    assert json.loads(published.text) == {"discoverError": published.problem}
    # Every reader (scheduler, runtimed's guard, simulate) takes it for a malformed inventory (SPEC §7.1).
    with pytest.raises(inventory_codec.InvalidInventory):
        inventory_codec.parse_annotation(published.text)


def test_a_discover_that_hangs_is_killed_at_its_timeout() -> None:
    started = time.monotonic()
    published = discovery.publish(discovery.Discover((PY, "-c", "import time; time.sleep(60)"), G), timeout=0.5)
    assert published.problem is not None and "did not finish within 0.5s" in published.problem
    assert time.monotonic() - started < 10


def test_discover_runs_without_a_shell_and_without_runtimed_s_own_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KRUNTIMES_POD_NAME", "gpu-a")
    script = ("import os, json, sys; sys.stdout.write(json.dumps({'driver': 'gpu.example.com', 'devices': [{'name': "
              "'seen-' + str(sum(k.startswith('KRUNTIMES_') for k in os.environ)), "
              "'attributes': {'arg': {'string': sys.argv[1]}}}]}))")
    published = discovery.publish(discovery.Discover((PY, "-c", script, "$(echo x)"), G))
    # The argument reached it as written (no shell expanded it), and no KRUNTIMES_ variable did.
    assert json.loads(published.text)["devices"] == [{"name": "seen-0", "attributes": {"arg": {"string": "$(echo x)"}}}]


def pod(env: list[dict[str, str]]) -> dict[str, object]:
    return {"spec": {"containers": [{"name": "runtime"}, {"name": "runtimed", "env": env}]}}


@pytest.mark.parametrize("env, expected", [
    ([{"name": discovery.DISCOVER_VARIABLE, "value": '{"argv":["/bin/gpus","--json"],"driver":"gpu.example.com"}'}],
     discovery.Discover(("/bin/gpus", "--json"), G)),
    ([], None),
    ([{"name": discovery.DISCOVER_VARIABLE, "value": "not json"}], discovery.Discover((), "")),
], ids=["the controller's value is read from runtimed's container", "no value: the controller publishes",
        "an unreadable value is a failure to publish, not silence"])
def test_what_to_discover_comes_from_runtimed_s_container_env(env: list[dict[str, str]],
                                                                  expected: discovery.Discover | None) -> None:
    assert discovery.discover_of(pod(env)) == expected
