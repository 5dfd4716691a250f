"""`kruntimes controller`: the Runtime controller, in a cluster or against a kubeconfig (SPEC §4.2).

Leader-elected on a Lease like the scheduler (the same flags, another Lease name),
so two replicas never both create pods. Logs are JSON lines on stderr; `/healthz`
(informers alive), `/readyz` (caches synced, on standbys too) and `/metrics` share
one port. SIGTERM (or
Ctrl-C) stops the pass in flight, releases the lease and exits 0. A bad setting is
one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from kruntimes import __version__
from kruntimes.cli import kube_args
from kruntimes.cli.kube_args import UsageError, add_kube_options, api_client
from kruntimes.cluster import logs
from kruntimes.cluster.informer_metrics import InformerMetrics
from kruntimes.cluster.probes import ProbeServer
from kruntimes.cluster.settings import LeaseSettings, default_identity
from kruntimes.controller.metrics import ControllerMetrics
from kruntimes.controller.reconcile import PodDefaults
from kruntimes.controller.runner import ControllerRunner
from kruntimes.scheduler.config import ConfigError

log = logging.getLogger("kruntimes.cli.controller")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("controller", help="run the Runtime controller against a Kubernetes API",
                       description="Keep every Runtime's pods (replicas, capacity annotation, runtimed), fail Runs "
                                   "whose pod is gone and write Runtime.status, with leader election.")
    p.set_defaults(run=run)
    add_kube_options(p)
    p.add_argument("--namespace", default=kube_args.env("KRUNTIMES_NAMESPACE"),
                   help="manage Runtimes in this namespace only (env KRUNTIMES_NAMESPACE; default: all)")
    p.add_argument("--runtimed-image", default=kube_args.env("KRUNTIMES_RUNTIMED_IMAGE", f"ghcr.io/kruntimes/kruntimes:"
                                                                                f"{__version__}"),
                   help="image of the runtimed container added to templates that have none")
    p.add_argument("--resync-period", type=kube_args.positive(kube_args.seconds(float)),
                   default=kube_args.env("KRUNTIMES_RESYNC_PERIOD", "30"),
                   metavar="SECONDS", help="every Runtime is reconciled at least this often (default 30)")
    p.add_argument("--leader-elect", type=kube_args.boolean, nargs="?", const=True,
                   default=kube_args.boolean(kube_args.env("KRUNTIMES_LEADER_ELECT", "true")), metavar="BOOL",
                   help="elect one active controller on a Lease (env KRUNTIMES_LEADER_ELECT; default true)")
    p.add_argument("--no-leader-elect", dest="leader_elect", action="store_false",
                   help="run without leader election (one replica only)")
    p.add_argument("--leader-elect-resource-name",
                   default=kube_args.env("KRUNTIMES_LEASE_NAME", "kruntimes-controller"),
                   metavar="NAME", help="the Lease's name (default kruntimes-controller)")
    p.add_argument("--leader-elect-resource-namespace", default=kube_args.env("KRUNTIMES_LEASE_NAMESPACE"),
                   metavar="NAMESPACE", help="the Lease's namespace (default: the pod's own, or 'default')")
    p.add_argument("--leader-elect-identity", default=kube_args.env("KRUNTIMES_LEASE_IDENTITY"), metavar="ID",
                   help="this replica's holder identity (default: $POD_NAME, else host name and a nonce)")
    p.add_argument("--http-address", default=kube_args.env("KRUNTIMES_HTTP_ADDRESS", "0.0.0.0"), metavar="ADDRESS",
                   help="address of /metrics, /healthz and /readyz")
    p.add_argument("--http-port", type=int, default=int(kube_args.env("KRUNTIMES_HTTP_PORT", 8080)), metavar="PORT",
                   help="port of /metrics, /healthz and /readyz (0: any free port; default 8080)")
    p.add_argument("--log-level", default=kube_args.env("KRUNTIMES_LOG_LEVEL", "info"),
                   choices=["debug", "info", "warning", "error"])


def run(args: argparse.Namespace) -> int:
    logs.configure(args.log_level)
    try:
        lease = None
        if args.leader_elect:
            lease = LeaseSettings(name=args.leader_elect_resource_name,
                                  namespace=args.leader_elect_resource_namespace or kube_args.lease_namespace(),
                                  identity=args.leader_elect_identity or default_identity())
        api = api_client(args, pool_size=8)
    except (UsageError, ConfigError) as exc:
        print(f"kruntimes controller: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda signum, frame: stop.set())
    registry = CollectorRegistry()
    runner = ControllerRunner(api, args.namespace or None, defaults=PodDefaults(runtimed_image=args.runtimed_image),
                              resync_period=args.resync_period, lease=lease, informer_metrics=InformerMetrics(registry),
                              instance=lease.identity if lease else default_identity(),
                              metrics=ControllerMetrics(registry))
    for collector in (ProcessCollector, PlatformCollector, GCCollector):
        collector(registry=registry)
    try:
        probes = ProbeServer(registry, healthy=runner.healthy, ready=runner.ready, address=args.http_address,
                             port=args.http_port).start()
    except OSError as exc:
        print(f"kruntimes controller: cannot listen on {args.http_address}:{args.http_port}: {exc}", file=sys.stderr)
        api.close()
        return 2
    log.info("starting", extra={"namespace": args.namespace or "*", "leader_elect": lease is not None,
                                "http_port": probes.port})
    try:
        runner.start()
        while not stop.wait(0.5):
            pass
        log.info("shutting down")
    finally:
        runner.stop()
        probes.stop()
        api.close()
    log.info("stopped")
    return 0
