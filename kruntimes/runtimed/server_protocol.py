"""The words runtimed and the Runtime Server exchange over their Unix socket (SPEC §4.1, amended 2026-12-04).

runtimed holds the pod's API token; the Runtime Server, in the runtime container,
executes the Runs and holds no credential. Between them: one JSON object per line,
one request and one answer per connection (so a request blocked in `stop` or `ends`
never delays another). Requests:

- `start` {run, args (list or null), function, env (object or null: the variables
  that tell the process its devices, SPEC §7.7)}: execute a Run (`Executor.start_task`
  or `start_function`).
- `stop` {uid, why: "released" | "interrupted"}: stop it; answers `known`.
- `list`: `running` (Runs executing) and `ended` (ends not yet acknowledged).
- `ends` {wait}: the ends not yet acknowledged, waiting up to `wait` seconds for one.

`list` and `ends` also answer the server's `incarnation`: a server that restarted (its
container did) answers another, and has none of its predecessor's Runs.
- `ack` {uids}: runtimed has kept those ends (on its disk): the server forgets them.

An end stays on the server until acknowledged, so a runtimed that restarts finds the
ends that happened while it was away, and the Runs still executing, where it left them.
Answers are `{"ok": true, ...}` or `{"ok": false, "error": "..."}`.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from kruntimes.runtimed.outcomes import Ended, RunRef

MAX_LINE_BYTES = 4 * 1024 * 1024  # a Run's args are bounded by the API server's request size (3 MiB)


class ProtocolError(Exception):
    """A message that is not one of the protocol's, or a connection cut mid-message."""


def encode_run(run: RunRef) -> dict[str, str]:
    return {"namespace": run.namespace, "name": run.name, "uid": run.uid}


def decode_run(data: Any) -> RunRef:
    if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("namespace", "name", "uid")):
        raise ProtocolError("a run must be {namespace, name, uid} strings")
    return RunRef(data["namespace"], data["name"], data["uid"])


def encode_ended(ended: Ended) -> dict[str, Any]:
    return {"run": encode_run(ended.run), "phase": ended.phase, "reason": ended.reason, "message": ended.message,
            "exitCode": ended.exit_code, "released": ended.released}


def decode_ended(data: Any) -> Ended:
    if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("phase", "reason", "message")):
        raise ProtocolError("an end must have phase, reason and message strings")
    code = data.get("exitCode")
    return Ended(decode_run(data.get("run")), data["phase"], data["reason"], data["message"],
                 code if isinstance(code, int) and not isinstance(code, bool) else None, data.get("released") is True)


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    # surrogateescape: an argument the API accepted (a lone surrogate) reaches the executor, which refuses it.
    sock.sendall(json.dumps(message, ensure_ascii=True).encode("ascii") + b"\n")


def receive(sock: socket.socket) -> dict[str, Any]:
    """One message; ProtocolError when the peer closed first or sent something else."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            raise ProtocolError("the connection closed before a whole message came")
        newline = chunk.find(b"\n")
        if newline >= 0:
            chunks.append(chunk[:newline])
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_LINE_BYTES:
            raise ProtocolError("a message longer than the protocol allows")
    try:
        message = json.loads(b"".join(chunks))
    except ValueError as exc:
        raise ProtocolError(f"not JSON: {exc}") from exc
    if not isinstance(message, dict):
        raise ProtocolError("a message is a JSON object")
    return message
