"""The Runtime Server: executes the Runs of a Runtime Pod, in the runtime container, with no API credential (SPEC §4.1).

A Run's process is a tenant, not runtimed. Were it runtimed's child, it would run as
runtimed's user beside runtimed's API token, free to rewrite the status of every Run of
its pod and to signal runtimed. So the pod has two containers: runtimed's, the only one
that mounts the token, and the runtime container, where this server (started as
`kruntimes runtime-server`) runs the Runs. runtimed drives it over a Unix socket in a
volume both containers mount (`server_protocol` says the words); the containers share
no process namespace, so a Run cannot even see runtimed's processes.

The server is the `Executor` runtimed used in-process, behind the socket: the same
argv rules, working directories, output lines (now in the runtime container's log),
process groups and stop rules. Ends are kept until runtimed acknowledges them, so a
runtimed that restarts adopts the Runs still executing and collects the ends it missed.

Only runtimed may drive it; a connection is closed unanswered (SO_PEERCRED) when it
comes from a user other than `client_uid` (runtimed's; by default the server's own),
or from a process descended from this server: every Run's process is (the server is
its parent, or adopts its orphans as a subreaper or as the container's PID 1), while
runtimed, in another container's process namespace, is not even visible from here.
So no Run can start, stop or acknowledge anything, with or without users of its own.
"""

from __future__ import annotations

import logging
import os
import socket
import socketserver
import struct
import threading
import uuid
from pathlib import Path
from typing import Any, Callable

from kruntimes.runtimed import server_protocol as wire
from kruntimes.runtimed.executor import Executor, pod_log
from kruntimes.runtimed.outcomes import Ended
from kruntimes.runtimed.run_users import RunUsers

log = logging.getLogger(__name__)

MAX_ENDS_WAIT = 30.0  # seconds one `ends` request may wait for an end


class RuntimeServer:
    """The Runs executing in this container, and their ends until runtimed has kept them."""

    def __init__(self, socket_path: Path, work_root: Path, *, users: RunUsers | None = None,
                 client_uid: int | None = None, stop_grace_seconds: float = 10.0,
                 log_line: Callable[[str], None] = pod_log) -> None:
        self.socket_path = Path(socket_path)
        self.client_uid = os.getuid() if client_uid is None else client_uid
        # Which server this is: a restarted one (its container restarted) has none of its predecessor's Runs.
        self.incarnation = uuid.uuid4().hex
        self._ends: dict[str, Ended] = {}  # Run UID -> its end, until acknowledged
        self._changed = threading.Condition()
        self.executor = Executor(Path(work_root), self._ended, log=log_line, stop_grace_seconds=stop_grace_seconds,
                                 users=users)
        self._server: socketserver.ThreadingUnixStreamServer | None = None

    # -- what runtimed asks -----------------------------------------------------------

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """One request's answer (`server_protocol`)."""
        op = request.get("op")
        if op == "start":
            run = wire.decode_run(request.get("run"))
            args = request.get("args")
            if args is not None and not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
                raise wire.ProtocolError("args must be a list of strings or null")
            env = request.get("env")
            if env is not None and not (isinstance(env, dict)
                                        and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
                raise wire.ProtocolError("env must be an object of strings or null")
            with self._changed:
                if run.uid in self._ends:
                    raise wire.ProtocolError(f"{run.label} ended here and its end is not acknowledged yet")
            if request.get("function") is True:
                self.executor.start_function(run, args, env=env)
            else:
                self.executor.start_task(run, args or [], env=env)
            return {"ok": True}
        if op == "stop":
            uid, why = request.get("uid"), request.get("why")
            if not isinstance(uid, str) or why not in ("released", "interrupted"):
                raise wire.ProtocolError("stop needs a uid and why: released or interrupted")
            known = self.executor.release(uid) if why == "released" else self.executor.stop(uid)
            return {"ok": True, "known": known}
        if op == "list":
            with self._changed:
                ended = [wire.encode_ended(e) for e in self._ends.values()]
            return {"ok": True, "running": [wire.encode_run(r) for r in self.executor.active()], "ended": ended,
                    "incarnation": self.incarnation}
        if op == "ends":
            wait = request.get("wait", 0)
            wait = min(float(wait), MAX_ENDS_WAIT) if isinstance(wait, (int, float)) and wait > 0 else 0.0
            with self._changed:
                self._changed.wait_for(lambda: bool(self._ends), wait)
                return {"ok": True, "ended": [wire.encode_ended(e) for e in self._ends.values()],
                        "incarnation": self.incarnation}
        if op == "ack":
            uids = request.get("uids")
            if not isinstance(uids, list):
                raise wire.ProtocolError("ack needs a list of uids")
            with self._changed:
                for uid in uids:
                    if isinstance(uid, str):
                        self._ends.pop(uid, None)
                self._changed.notify_all()
            return {"ok": True}
        raise wire.ProtocolError(f"unknown op {op!r}")

    def _ended(self, ended: Ended) -> None:
        with self._changed:
            self._ends[ended.run.uid] = ended
            self._changed.notify_all()

    def unacknowledged(self) -> int:
        with self._changed:
            return len(self._ends)

    def wait_collected(self, timeout: float) -> bool:
        """Wait until runtimed has acknowledged every end (shutdown); False if it has not within `timeout`."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._ends, timeout)

    # -- the socket -------------------------------------------------------------------

    def start(self) -> None:
        """Listen (the socket is replaced if a previous server left it); serve on a thread of its own."""
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        server = _Listener(str(self.socket_path), _Handler, self)
        # runtimed runs as another user in another container: it may connect; SO_PEERCRED decides who is heard.
        os.chmod(self.socket_path, 0o666)
        self._server = server
        threading.Thread(target=server.serve_forever, name="runtime server", daemon=True).start()

    def stop(self, collect_seconds: float = 0.0) -> bool:
        """Stop every Run, give runtimed `collect_seconds` to collect their ends, stop listening.

        Each Run stopped so ends `RuntimedStopped` (runtimed says `RuntimePodLost` when its
        pod is going). Returns whether runtimed collected every end.
        """
        self.executor.stop_all()
        collected = self.wait_collected(collect_seconds)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.socket_path.unlink(missing_ok=True)
        return collected


class _Listener(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, handler: type[socketserver.BaseRequestHandler], owner: RuntimeServer) -> None:
        self.owner = owner
        super().__init__(path, handler)

    def verify_request(self, request: Any, client_address: Any) -> bool:
        pid, uid = peer_credentials(request)
        if uid != self.owner.client_uid:
            log.warning("refused a connection to the Runtime Server from user %s (only runtimed's user %s may "
                        "drive it)", uid, self.owner.client_uid)
            return False
        if pid and pid != os.getpid() and descends_from(pid, os.getpid()):  # itself: an in-process runtimed (tests)
            log.warning("refused a connection to the Runtime Server from process %s, a Run's (only runtimed may "
                        "drive it)", pid)
            return False
        return True


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        owner: RuntimeServer = self.server.owner  # type: ignore[attr-defined]
        self.request.settimeout(MAX_ENDS_WAIT + 60)  # a connection that never finishes its request holds no thread
        try:
            request = wire.receive(self.request)
            answer = owner.handle(request)
        except wire.ProtocolError as exc:
            answer = {"ok": False, "error": str(exc)}
        except (OSError, ValueError) as exc:  # a start the executor refused (e.g. the same Run twice)
            answer = {"ok": False, "error": str(exc)}
        try:
            wire.send(self.request, answer)
        except OSError:
            pass  # runtimed went away; what it asked is done, and `list` tells it after a restart


def peer_credentials(sock: socket.socket) -> tuple[int, int | None]:
    """(pid, user) of the process at the other end of a Unix socket (Linux SO_PEERCRED).

    The pid is as this process's namespace sees it: 0 for a process it cannot see (in
    another container). Elsewhere (0, None).
    """
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return 0, None
    pid, uid, _ = struct.unpack("3i", creds)
    return pid, uid


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether `pid` is `ancestor` or one of its descendants (/proc parent links; a vanished process: True).

    A process gone before it could be checked is refused too: its connection is not worth the doubt.
    """
    for _ in range(4096):  # deeper than any process tree; a cycle cannot happen, a bound costs nothing
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
                pid = int(stat.read().rsplit(")", 1)[1].split()[1])  # the parent; the name in (...) may hold spaces
        except (OSError, IndexError, ValueError):
            return True
    return True
