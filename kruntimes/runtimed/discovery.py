"""runtimed publishes its pod's device inventory from `discover` (SPEC §7.1, publisher Runtimed).

With `Runtime.spec.devices.publisher: Runtimed` the controller gives runtimed's container
`KRUNTIMES_DEVICE_DISCOVER` (`{"argv": [...], "driver": d}`) and never touches the pod's
`kruntimes.io/devices` annotation. At start runtimed runs the argv (no shell, in its own
container, without the `KRUNTIMES_*` variables, at most `DEFAULT_TIMEOUT` seconds, its
stdout read up to the annotation's own bound) and reads stdout as the §7.1 annotation
encoding, through the codec the controller, the scheduler and `simulate` use: the same
bounds, and the canonical text (so the digest is the one the scheduler computes).

A discover that fails (cannot start, exits non-zero, times out, prints too much) or
prints a malformed inventory, or one naming another driver than the Runtime's, is
published as a malformed inventory, `{"discoverError": "<why>"}` (an unknown field, so
every reader rejects it): SPEC §7.1 says what a malformed inventory means (Runs WITH
device requests see `invalid device inventory`; others don't), and §7.7 that it admits
nothing new. Not writing would leave whatever the pod carried before (an earlier
runtimed's inventory, perhaps of devices that are gone) in force, and removing it would
say "no device inventory", hiding that discovery broke; the reason in the annotation is
what `kubectl get pod -o yaml` shows beside runtimed's log line.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import dataclass
from typing import IO, Any, Mapping

from kruntimes.devices import inventory_codec, runtime_spec
from kruntimes.runtimed import devices
from kruntimes.wire import DEVICES_ANNOTATION

DISCOVER_VARIABLE = runtime_spec.DEVICE_DISCOVER_VARIABLE
DEFAULT_TIMEOUT = 20.0  # seconds: inside the scheduler's 30 s heartbeat window, runtimed's first heartbeat waits on it
MAX_OUTPUT = inventory_codec.MAX_TEXT_BYTES  # stdout beyond the annotation's bound can never be a valid inventory
MAX_STDERR = 512  # what of stderr the log line and the published reason quote
MAX_REASON = 1024
ERROR_KEY = "discoverError"
PIPE_GRACE = 5.0  # seconds to read what is left in the pipes after discover exited


@dataclass(frozen=True, slots=True)
class Discover:
    argv: tuple[str, ...]
    driver: str


@dataclass(frozen=True, slots=True)
class Published:
    """What runtimed writes as `kruntimes.io/devices`; `problem` is None when it is a valid inventory."""

    text: str
    problem: str | None = None
    digest: str | None = None


def discover_of(pod: Mapping[str, Any]) -> Discover | None:
    """The discover the controller put in runtimed's container env; None: the controller publishes (or no devices).

    A value runtimed cannot read is reported as a Discover with an empty argv, so the
    failure is published (and logged) instead of leaving a stale inventory in force.
    """
    text = devices.runtimed_env(pod, DISCOVER_VARIABLE)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        return Discover((), "")
    argv, driver = value.get("argv"), value.get("driver")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv) or not isinstance(driver, str):
        return Discover((), "")
    return Discover(tuple(argv), driver)


def publish(discover: Discover, timeout: float = DEFAULT_TIMEOUT) -> Published:
    """Run `discover` and say what to publish: the canonical inventory, or why it is malformed."""
    if not discover.argv or not discover.driver:
        return failed(f"{DISCOVER_VARIABLE} in runtimed's container is not {{\"argv\": [...], \"driver\": ...}}; "
                      "the controller sets it from Runtime.spec.devices")
    try:
        output = run(discover.argv, timeout)
    except DiscoverFailed as exc:
        return failed(str(exc))
    try:
        found = inventory_codec.parse_annotation(output)
    except inventory_codec.InvalidInventory as exc:
        return failed(f"discover printed no valid device inventory: {exc}")
    if found.driver != discover.driver:
        return failed(f"discover printed an inventory of driver {found.driver!r}; the Runtime's is "
                      f"{discover.driver!r}")
    return Published(found.text, digest=found.digest)


def failed(reason: str) -> Published:
    """A malformed inventory that says why (SPEC §7.1: Runs with device requests are not placed here)."""
    reason = reason if len(reason) <= MAX_REASON else reason[:MAX_REASON - 3] + "..."
    return Published(inventory_codec.canonical_text({ERROR_KEY: reason}), problem=reason)


class DiscoverFailed(Exception):
    """discover did not print an inventory (could not start, failed, timed out, printed too much)."""


def run(argv: tuple[str, ...], timeout: float, limit: int = MAX_OUTPUT) -> str:
    """discover's stdout (UTF-8), at most `limit` bytes, within `timeout` seconds; else DiscoverFailed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KRUNTIMES_")}
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, start_new_session=True)
    except (OSError, ValueError) as exc:
        raise DiscoverFailed(f"discover {argv[0][:120]!r} could not start: {exc}") from None
    assert proc.stdout is not None and proc.stderr is not None
    out, err = _Collector(proc.stdout, limit, proc), _Collector(proc.stderr, MAX_STDERR, None)
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise DiscoverFailed(f"discover {argv[0][:120]!r} did not finish within {timeout:g}s") from None
    finally:
        out.join()
        err.join()
        proc.stdout.close()
        proc.stderr.close()
    if out.overflow:
        raise DiscoverFailed(f"discover {argv[0][:120]!r} printed more than {limit:,} bytes")
    if code != 0:
        said = err.text().strip()
        raise DiscoverFailed(f"discover {argv[0][:120]!r} exited with code {code}" + (f": {said}" if said else ""))
    try:
        return bytes(out.data).decode("utf-8")
    except UnicodeDecodeError:
        raise DiscoverFailed(f"discover {argv[0][:120]!r} printed text that is not UTF-8") from None


class _Collector:
    """Reads a pipe to its end on a thread, keeping at most `limit` bytes; past it, kills `proc` (if given)."""

    def __init__(self, stream: IO[bytes], limit: int, proc: subprocess.Popen[bytes] | None) -> None:
        self.data = bytearray()
        self.overflow = False
        self._stream, self._limit, self._proc = stream, limit, proc
        self._thread = threading.Thread(target=self._read, name="runtimed-discover-pipe", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while chunk := os.read(self._stream.fileno(), 65536):
                room = self._limit - len(self.data)
                self.data += chunk[:max(room, 0)]
                if len(chunk) > room and not self.overflow:
                    self.overflow = True
                    if self._proc is not None:
                        _kill(self._proc)
        except (OSError, ValueError):  # the pipe was closed under a reader runtimed stopped waiting for
            pass

    def join(self) -> None:
        # A process that left its session may hold the pipe open: runtimed does not wait for it.
        self._thread.join(PIPE_GRACE)

    def text(self) -> str:
        return bytes(self.data).decode("utf-8", "replace")


def _kill(proc: subprocess.Popen[bytes]) -> None:
    # Its own session: whatever it started goes with it, and no pipe stays open past the kill.
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
