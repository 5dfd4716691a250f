"""`kruntimes runtime-server`: executes a Runtime Pod's Runs in the runtime container (SPEC §4.1, amended 2026-12-04).

runtimed, in its own container with the pod's API token, drives this server over the
Unix socket `--socket` (env `KRUNTIMES_RUNTIME_SERVER`) on a volume both containers
mount; the Runs' output is this container's log. With `--run-uids FIRST-LAST` (env
`KRUNTIMES_RUN_UIDS`; the server must then be able to change user) each Run is a user
of its own. It never talks to the Kubernetes API and imports no client. SIGTERM stops
every Run, waits (up to `--collect-seconds`) for runtimed to collect their ends, and
exits 0. A bad setting is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from kruntimes.cli import arg_types
from kruntimes.runtimed import run_users
from kruntimes.runtimed.executor import become_subreaper
from kruntimes.runtimed.runtime_server import RuntimeServer

log = logging.getLogger("kruntimes.cli.runtime_server")
REAP_SECONDS = 10.0


def _env(name: str, default: str | None = None) -> str | None:
    """The environment variable, or `default` when unset or empty (no `kube_args`: this command loads no client)."""
    return os.environ.get(name) or default


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("runtime-server", help="execute a Runtime Pod's Runs for its runtimed (no API credential)",
                       description="Execute the Runs runtimed starts over a Unix socket, each in a working directory "
                                   "of its own and, with --run-uids, as a user of its own.")
    p.set_defaults(run=run)
    p.add_argument("--socket", type=Path, default=_env("KRUNTIMES_RUNTIME_SERVER"),
                   help="the Unix socket runtimed connects to (env KRUNTIMES_RUNTIME_SERVER)")
    p.add_argument("--work-dir", type=Path,
                   default=Path(_env("KRUNTIMES_WORK_DIR", "/tmp/kruntimes-runs") or ""),
                   help="where each Run gets its working directory (env KRUNTIMES_WORK_DIR)")
    p.add_argument("--run-uids", default=_env("KRUNTIMES_RUN_UIDS"), metavar="FIRST-LAST",
                   help="run each Run as a user of this range (env KRUNTIMES_RUN_UIDS); needs root or "
                        "CAP_SETUID, CAP_SETGID, CAP_CHOWN and CAP_KILL")
    p.add_argument("--client-uid", type=int, default=_env("KRUNTIMES_RUNTIMED_UID"),
                   help="runtimed's user, the only one heard on the socket (env KRUNTIMES_RUNTIMED_UID; "
                        "default: this server's own user)")
    p.add_argument("--stop-grace", type=arg_types.seconds(float), default="10", metavar="SECONDS",
                   help="SIGTERM to a Run's process group, then SIGKILL after this long")
    p.add_argument("--collect-seconds", type=arg_types.seconds(float), default="15", metavar="SECONDS",
                   help="on SIGTERM, how long to wait for runtimed to collect the ends of the Runs stopped")
    p.add_argument("--log-level", default=_env("KRUNTIMES_LOG_LEVEL", "info"),
                   choices=["debug", "info", "warning", "error"])


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
    if not args.socket:
        print("kruntimes runtime-server: --socket (or KRUNTIMES_RUNTIME_SERVER) is required", file=sys.stderr)
        return 2
    users = None
    if args.run_uids:
        try:
            span = run_users.parse_range(args.run_uids)
        except run_users.BadUserRange as exc:
            print(f"kruntimes runtime-server: --run-uids {exc}", file=sys.stderr)
            return 2
        client = os.getuid() if args.client_uid is None else args.client_uid
        if client in span:
            print(f"kruntimes runtime-server: runtimed's user {client} is in --run-uids {args.run_uids}: a Run "
                  "could drive the server", file=sys.stderr)
            return 2
        users = run_users.RunUsers(span)
    become_subreaper()  # what a Run leaves behind is re-parented here, stopped with it and reaped
    server = RuntimeServer(args.socket, args.work_dir, users=users, client_uid=args.client_uid,
                           stop_grace_seconds=args.stop_grace)
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda signum, frame: stopping.set())
    server.start()
    log.info("runtime server listening on %s", args.socket)
    while not stopping.wait(REAP_SECONDS):
        server.executor.reap_orphans()
    if not server.stop(args.collect_seconds):
        log.warning("runtimed did not collect %d ends before the server stopped", server.unacknowledged())
    return 0
