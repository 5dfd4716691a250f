"""``python -m tests.realkube up --dir DIR [--with-controller-manager]``: a real API server for a person.

Starts the control plane (see `tests.realkube.controlplane`), prints the kubeconfig's
path, and stays in the foreground until SIGTERM or Ctrl-C, then stops all it started.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path

from tests.realkube import binaries, controlplane


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.realkube")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start etcd and kube-apiserver on loopback; stop on SIGTERM")
    up.add_argument("--dir", required=True, type=Path, help="where certificates, data, logs and kubeconfig go")
    up.add_argument("--with-controller-manager", action="store_true",
                    help="also run the garbage collector, namespace lifecycle and ServiceAccount controllers")
    args = parser.parse_args(argv)

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    started = time.monotonic()
    try:
        plane = controlplane.ControlPlane(args.dir, with_controller_manager=args.with_controller_manager).start()
    except (binaries.BinariesMissing, controlplane.ControlPlaneFailed) as exc:
        print(f"realkube: {exc}", file=sys.stderr)
        return 1
    try:
        print(f"realkube: {plane.server} ready in {time.monotonic() - started:.1f} s", file=sys.stderr)
        print(plane.kubeconfig, flush=True)
        while not stop.wait(1.0):
            plane.check_running()
    except controlplane.ControlPlaneFailed as exc:
        print(f"realkube: {exc}", file=sys.stderr)
        return 1
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
