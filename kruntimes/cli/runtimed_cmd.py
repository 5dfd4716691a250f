"""`kruntimes runtimed`: the agent in a Runtime Pod (SPEC §4.1).

It knows its pod from the downward API (`KRUNTIMES_POD_NAME`, `_NAMESPACE`, `_UID`,
which the Runtime controller sets on the runtimed container), or from flags when run
outside a pod (a demo playing kubelet, a test). The pod log (stdout) carries the
Runs' output, one `namespace/name: line` at a time; runtimed's own logs are JSON
lines on stderr. SIGTERM (or Ctrl-C) stops every execution (each Run ends Failed,
saying runtimed stopped) and exits 0. A missing identity or configuration is one
line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

from kruntimes.api import cluster_settings
from kruntimes.cli import kube_args
from kruntimes.cli.kube_args import UsageError, add_kube_options, api_client
from kruntimes.cluster import logs
from kruntimes.cluster.errors import ApiError
from kruntimes.runtimed.agent import DEFAULT_HEARTBEAT_PERIOD, Agent, Settings
from kruntimes.runtimed.executor import become_subreaper

log = logging.getLogger("kruntimes.cli.runtimed")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("runtimed", help="run the agent of one Runtime Pod: admit, execute and end its Runs",
                       description="Admit the Runs assigned to this Runtime Pod against its capacity, execute "
                                   "them and write their end; renew the pod's heartbeat.")
    p.set_defaults(run=run)
    add_kube_options(p)
    p.add_argument("--pod-name", default=kube_args.env("KRUNTIMES_POD_NAME"), help="this pod (env KRUNTIMES_POD_NAME)")
    p.add_argument("--pod-namespace", default=kube_args.env("KRUNTIMES_POD_NAMESPACE"),
                   help="its namespace (env KRUNTIMES_POD_NAMESPACE)")
    p.add_argument("--pod-uid", default=kube_args.env("KRUNTIMES_POD_UID"), help="its UID (env KRUNTIMES_POD_UID)")
    p.add_argument("--work-dir", type=Path,
                   default=Path(kube_args.env("KRUNTIMES_WORK_DIR", "/tmp/kruntimes-runs") or ""),
                   help="where each Run gets its working directory (env KRUNTIMES_WORK_DIR)")
    p.add_argument("--state-dir", type=Path, default=kube_args.env("KRUNTIMES_STATE_DIR"),
                   help="runtimed's own files, kept across its restarts: Run ends not yet written, its Runs' pid "
                        "files (env KRUNTIMES_STATE_DIR; default WORK_DIR/.runtimed); put it on a volume that "
                        "outlives the container, e.g. an emptyDir")
    p.add_argument("--runtime-server", type=Path, default=kube_args.env("KRUNTIMES_RUNTIME_SERVER"),
                   metavar="SOCKET", help="the Runtime Server's socket: Runs execute there, in the runtime container, "
                                          "with no API credential (env KRUNTIMES_RUNTIME_SERVER, which the Runtime "
                                          "controller sets); without it Runs are runtimed's own processes")
    # String defaults go through `type` like the flag itself, so a malformed environment
    # variable is argparse's one-line usage error, not a traceback at start-up.
    p.add_argument("--heartbeat-period", type=kube_args.seconds(float),
                   default=kube_args.env("KRUNTIMES_HEARTBEAT_PERIOD", str(DEFAULT_HEARTBEAT_PERIOD)),
                   metavar="SECONDS", help="heartbeat renewal period; keep it well inside the scheduler's "
                                           f"staleness (env KRUNTIMES_HEARTBEAT_PERIOD; default {DEFAULT_HEARTBEAT_PERIOD:g})")
    p.add_argument("--settings-namespace", metavar="NAMESPACE",
                   default=kube_args.env(cluster_settings.NAMESPACE_ENV, cluster_settings.DEFAULT_NAMESPACE),
                   help=f"where the ConfigMap {cluster_settings.CONFIGMAP} is: the cluster settings runtimed, the "
                        "scheduler and simulate read alike (the default runs capacity; re-read every minute) "
                        f"(env {cluster_settings.NAMESPACE_ENV}; default {cluster_settings.DEFAULT_NAMESPACE})")
    p.add_argument("--metrics-port", type=int, default=kube_args.env("KRUNTIMES_METRICS_PORT"), metavar="PORT",
                   help="serve runtimed's Prometheus metrics at /metrics on this port, e.g. "
                        "kruntimes_runtimed_device_waits_total (env KRUNTIMES_METRICS_PORT; default: not served)")
    p.add_argument("--log-level", default=kube_args.env("KRUNTIMES_LOG_LEVEL", "info"),
                   choices=["debug", "info", "warning", "error"])


def run(args: argparse.Namespace) -> int:
    logs.configure(args.log_level)
    legacy = cluster_settings.legacy_setting_problem(os.environ)
    if legacy is not None:
        print(f"kruntimes runtimed: {legacy}", file=sys.stderr)
        return 2
    missing = [flag for flag, value in (("--pod-name", args.pod_name), ("--pod-namespace", args.pod_namespace),
                                        ("--pod-uid", args.pod_uid)) if not value]
    if missing:
        print(f"kruntimes runtimed: this pod's identity is missing ({', '.join(missing)}); in a Runtime Pod the "
              "controller sets KRUNTIMES_POD_NAME, _NAMESPACE and _UID from the downward API", file=sys.stderr)
        return 2
    if args.heartbeat_period <= 0:
        print("kruntimes runtimed: --heartbeat-period must be positive", file=sys.stderr)
        return 2
    try:
        api = api_client(args, pool_size=8)
    except UsageError as exc:
        print(f"kruntimes runtimed: {exc}", file=sys.stderr)
        return 2
    # Processes a Run leaves behind are re-parented to runtimed (not to an init that
    # may not reap them), which stops them with the Run and reaps them.
    become_subreaper()
    agent = Agent(api, Settings(pod_name=args.pod_name, pod_namespace=args.pod_namespace, pod_uid=args.pod_uid,
                                work_dir=args.work_dir, state_dir=args.state_dir or None,
                                settings_namespace=args.settings_namespace,
                                runtime_server=args.runtime_server or None,
                                heartbeat_period=args.heartbeat_period,
                                metrics_port=args.metrics_port))
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda signum, frame: agent.stop())
    try:
        agent.run()
    except ApiError as exc:
        print(f"kruntimes runtimed: {exc}", file=sys.stderr)
        return 1
    finally:
        api.close()
    log.info("stopped")
    return 0
