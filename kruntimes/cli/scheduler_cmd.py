"""`kruntimes scheduler`: the live scheduler, in a cluster or against a kubeconfig.

Every setting is a flag and an environment variable (the flag wins); the names of
the leader-election flags are kube-scheduler's. Logs are JSON lines on stderr;
`/metrics`, `/healthz` and `/readyz` share one port. SIGTERM (or Ctrl-C) shuts down
gracefully: the cycle in flight finishes, the journal is flushed, the lease is
released. A bad setting is one line on stderr and exit code 2, before scheduling
starts. The journal's database is never waited for (SPEC §5 "Availability"): the
scheduler starts and leads with it unreachable, its records wait in the spool and
drain when it answers. With ``--journal-migrate never`` (the default for PostgreSQL)
the writer only waits for `kruntimes db upgrade` (migrations run once, never raced by
replicas), in the background, while the scheduler schedules.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Gauge, GCCollector, PlatformCollector, ProcessCollector

from kruntimes import gctuning
from kruntimes.api import cluster_settings
from kruntimes.cli import journal_args, kube_args
from kruntimes.cli.kube_args import UsageError, add_kube_options, api_client
from kruntimes.journal.write.recorder import DEFAULT_CHECKPOINT_EVERY, DEFAULT_CHECKPOINT_SIZE_RATIO
from kruntimes.cluster import logs, shared_settings
from kruntimes.cluster.probes import ProbeServer
from kruntimes.cluster.runner import ClusterScheduler
from kruntimes.cluster.settings import DETAILS, MIGRATE_MODES, ClusterSettings, LeaseSettings, default_identity
from kruntimes.journal import chain, redact
from kruntimes.journal.history import indexer
from kruntimes.journal.store import schema_wait
from kruntimes.scheduler.config import ConfigError

if TYPE_CHECKING:
    import kubernetes.client

log = logging.getLogger("kruntimes.cli.scheduler")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("scheduler", help="run the live scheduler against a Kubernetes API",
                       description="Watch Runs, Runtimes and Runtime Pods and place Pending Runs, with leader "
                                   "election. Each flag also reads the environment variable named in its help.")
    p.set_defaults(run=run)
    _add_api_options(p)
    _add_journal_options(p)
    _add_election_options(p)
    _add_process_options(p)


def _option(group: Any, flag: str, env: str, default: Any, help_text: str, **kwargs: Any) -> None:
    """A flag that also reads `env`, its help naming both and the default."""
    shown = "" if default is None else f"; default {default}"
    group.add_argument(flag, default=kube_args.env(env, default), help=f"{help_text} (env {env}{shown})", **kwargs)


def _add_api_options(p: argparse.ArgumentParser) -> None:
    """The API server, the namespace, the binder processes and the cluster settings."""
    api = p.add_argument_group("API server and scheduling")
    add_kube_options(api)
    api.add_argument("--namespace", default=kube_args.env("KRUNTIMES_NAMESPACE"),
                     help="watch and schedule in this namespace only (env KRUNTIMES_NAMESPACE; default: all)")

    _option(api, "--binders", "KRUNTIMES_BINDERS", ClusterSettings.binders,
            "binder processes sending the status writes (one scheduling loop plans; writes leave it)",
            type=kube_args.positive(int), metavar="N")
    _option(api, "--bind-concurrency", "KRUNTIMES_BIND_CONCURRENCY", ClusterSettings.bind_concurrency,
            "status writes in flight per binder process", type=kube_args.positive(int), metavar="N")
    _option(api, "--heartbeat-staleness", "KRUNTIMES_HEARTBEAT_STALENESS", 30,
            "seconds after which a runtimed heartbeat is stale", type=kube_args.seconds(int), metavar="SECONDS")
    _option(api, "--settings-namespace", cluster_settings.NAMESPACE_ENV, cluster_settings.DEFAULT_NAMESPACE,
            f"where the ConfigMap {cluster_settings.CONFIGMAP} is: the cluster settings the scheduler, every "
            "runtimed and simulate read alike (the default runs capacity)", metavar="NAMESPACE")


def _add_journal_options(p: argparse.ArgumentParser) -> None:
    """Where the journal is and how it is written."""
    journal = p.add_argument_group("journal")
    journal.add_argument("--journal-url", "--journal", dest="journal_url", default=kube_args.env(journal_args.URL_ENV),
                         metavar="URL", help=f"journal database, e.g. postgresql+psycopg://USER@HOST/DB or "
                                             f"sqlite:///PATH (env {journal_args.URL_ENV}; default: no journal)")
    _option(journal, "--journal-detail", "KRUNTIMES_JOURNAL_DETAIL", "summary", "cycle records: summary or full",
            choices=DETAILS)
    _option(journal, "--journal-checkpoint-every", "KRUNTIMES_JOURNAL_CHECKPOINT_EVERY", DEFAULT_CHECKPOINT_EVERY,
            "fewest records between checkpoints of the cache", type=kube_args.positive(int), metavar="N")
    _option(journal, "--journal-checkpoint-size-ratio", "KRUNTIMES_JOURNAL_CHECKPOINT_SIZE_RATIO",
            DEFAULT_CHECKPOINT_SIZE_RATIO, "also at least this many records between checkpoints per object in the "
            "cache (0: every --journal-checkpoint-every records)", type=int, metavar="N")
    _option(journal, "--journal-spool", "KRUNTIMES_JOURNAL_SPOOL", None,
            "file where records wait while the database is away (default: next to an SQLite journal, "
            "else ./kruntimes-journal.spool)", metavar="PATH")
    _option(journal, "--journal-writer", "KRUNTIMES_JOURNAL_WRITER", "process",
            "where records are built and stored: process (its own process, off the scheduler's core) or thread",
            choices=("process", "thread"))
    _option(journal, "--journal-history", "KRUNTIMES_JOURNAL_HISTORY", indexer.DEFAULT_HISTORY,
            "inline: the history tables are written with each batch of records, in its transaction; follow: "
            "records only (the writer keeps its full rate) and `kruntimes journal index --follow` writes them after",
            choices=indexer.HISTORY_MODES)
    _option(journal, "--journal-key-file", chain.KEY_FILE_ENV, None,
            "file holding the HMAC key of the journal's hash chain (at least 32 bytes; e.g. the mounted "
            "kruntimes-journal-key Secret); without it the chain is plain SHA-256", metavar="PATH")
    _option(journal, "--journal-migrate", "KRUNTIMES_JOURNAL_MIGRATE", None,
            "auto: migrate the schema on start (one writer); never: only wait for `kruntimes db upgrade` "
            "(replicas in a cluster; default: auto for SQLite, never for PostgreSQL)", choices=MIGRATE_MODES)
    _option(journal, "--journal-schema-wait", "KRUNTIMES_JOURNAL_SCHEMA_WAIT", 300.0,
            "with --journal-migrate never: seconds of waiting for the schema's head revision after which an error "
            "naming the kruntimes-db-upgrade Job is logged (scheduling goes on; records wait in the spool)",
            type=kube_args.seconds(float), metavar="SECONDS")
    _option(journal, "--journal-write-timeout", "KRUNTIMES_JOURNAL_WRITE_TIMEOUT", 5.0,
            "seconds the journal writer waits for the database to answer before it spools the batch, like a refused "
            "one: a record is durable (database or spool) within about this long, whatever the database does",
            type=kube_args.seconds(float), metavar="SECONDS")


def _add_election_options(p: argparse.ArgumentParser) -> None:
    """Leader election on a Lease."""
    election = p.add_argument_group("leader election")
    _option(election, "--leader-elect", "KRUNTIMES_LEADER_ELECT", True,
            "elect one active scheduler on a Lease (--no-leader-elect: this one always leads)",
            type=kube_args.boolean, nargs="?", const=True, metavar="BOOL")
    election.add_argument("--no-leader-elect", dest="leader_elect", action="store_false",
                          help="run without leader election (one replica only)")
    _option(election, "--leader-elect-resource-name", "KRUNTIMES_LEASE_NAME", "kruntimes-scheduler",
            "the Lease's name", metavar="NAME")
    _option(election, "--leader-elect-resource-namespace", "KRUNTIMES_LEASE_NAMESPACE", None,
            "the Lease's namespace (default: $POD_NAMESPACE, the pod's own namespace, or 'default')",
            metavar="NAMESPACE")
    _option(election, "--leader-elect-identity", "KRUNTIMES_LEASE_IDENTITY", None,
            "this replica's holder identity (default: $POD_NAME, else host name and a nonce)", metavar="ID")
    _option(election, "--leader-elect-lease-duration", "KRUNTIMES_LEASE_DURATION", 15,
            "seconds a standby waits after the last renewal it saw before taking the lease",
            type=kube_args.positive(kube_args.seconds(int)), metavar="SECONDS")
    _option(election, "--leader-elect-renew-deadline", "KRUNTIMES_LEASE_RENEW_DEADLINE", 10.0,
            "seconds the leader keeps trying to renew before it stops scheduling",
            type=kube_args.positive(kube_args.seconds(float)), metavar="SECONDS")
    _option(election, "--leader-elect-retry-period", "KRUNTIMES_LEASE_RETRY_PERIOD", 2.0,
            "seconds between attempts to acquire or renew",
            type=kube_args.positive(kube_args.seconds(float)), metavar="SECONDS")


def _add_process_options(p: argparse.ArgumentParser) -> None:
    """The HTTP endpoints, watches, shutdown, Events and logging of the process."""
    process = p.add_argument_group("process")
    _option(process, "--http-address", "KRUNTIMES_HTTP_ADDRESS", "0.0.0.0",
            "address of /metrics, /healthz and /readyz", metavar="ADDRESS")
    _option(process, "--http-port", "KRUNTIMES_HTTP_PORT", 8080,
            "port of /metrics, /healthz and /readyz (0: any free port)", type=int, metavar="PORT")
    _option(process, "--watch-timeout", "KRUNTIMES_WATCH_TIMEOUT", 300,
            "seconds one watch request lasts before it is resumed",
            type=kube_args.positive(kube_args.seconds(int)), metavar="SECONDS")
    _option(process, "--watch-bookmark-interval", "KRUNTIMES_WATCH_BOOKMARK_INTERVAL", 60.0,
            "seconds between the API server's watch bookmarks; a watch silent twice as long is restarted",
            type=kube_args.positive(kube_args.seconds(float)), metavar="SECONDS")
    _option(process, "--shutdown-timeout", "KRUNTIMES_SHUTDOWN_TIMEOUT", 20.0,
            "seconds for the cycle in flight and the journal flush at shutdown",
            type=kube_args.positive(kube_args.seconds(float)), metavar="SECONDS")
    _option(process, "--event-interval", "KRUNTIMES_EVENT_INTERVAL", 60.0,
            "seconds between two writes of one Run's FailedScheduling Event (repeats in between are "
            "counted into its series); 0 emits no Events", type=kube_args.seconds(float), metavar="SECONDS")
    _option(process, "--log-level", "KRUNTIMES_LOG_LEVEL", "info", "debug, info, warning or error",
            choices=("debug", "info", "warning", "error"))


def settings_from(args: argparse.Namespace) -> ClusterSettings:
    try:
        lease = LeaseSettings(name=args.leader_elect_resource_name,
                              namespace=args.leader_elect_resource_namespace or kube_args.lease_namespace(),
                              identity=args.leader_elect_identity or default_identity(),
                              duration=args.leader_elect_lease_duration,
                              renew_deadline=args.leader_elect_renew_deadline,
                              retry_period=args.leader_elect_retry_period)
        return ClusterSettings(namespace=args.namespace or None, binders=args.binders,
                               bind_concurrency=args.bind_concurrency,
                               heartbeat_staleness=args.heartbeat_staleness,
                               journal_url=args.journal_url,
                               journal_detail=args.journal_detail,
                               journal_checkpoint_every=args.journal_checkpoint_every,
                               journal_checkpoint_size_ratio=args.journal_checkpoint_size_ratio,
                               journal_spool=args.journal_spool, journal_writer=args.journal_writer,
                               journal_history=args.journal_history,
                               journal_key_file=_key_file(args),
                               journal_migrate=_migrate_mode(args), journal_schema_wait=args.journal_schema_wait,
                               journal_write_timeout=_write_timeout(args),
                               leader_elect=args.leader_elect, lease=lease,
                               watch_timeout=args.watch_timeout, bookmark_interval=args.watch_bookmark_interval,
                               shutdown_timeout=args.shutdown_timeout,
                               event_interval=args.event_interval)
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc


def _write_timeout(args: argparse.Namespace) -> float:
    if args.journal_write_timeout <= 0:
        raise UsageError(f"--journal-write-timeout must be positive, got {args.journal_write_timeout:g}")
    return float(args.journal_write_timeout)


def _key_file(args: argparse.Namespace) -> str | None:
    """The chain key's file, read once here so that a missing or short key is a usage error at start."""
    path: str | None = args.journal_key_file or None
    if path is not None and args.journal_url:
        try:
            chain.load_key(path)
        except chain.ChainKeyError as exc:
            raise UsageError(f"--journal-key-file: {exc}") from exc
    return path


def _migrate_mode(args: argparse.Namespace) -> str:
    if args.journal_migrate or not args.journal_url:
        return str(args.journal_migrate or "auto")
    from kruntimes.journal.store import migrate  # alembic is only needed with a journal

    try:
        return migrate.default_migrate_mode(args.journal_url)
    except Exception:  # noqa: BLE001 - check_journal reports a bad URL; never migrate on a guess
        return "never"


def check_journal(url: str | None) -> None:
    """Check the journal URL now, so that a typo fails at once - but never reach for the database.

    An unreachable database must not stop a scheduler from starting (SPEC §5
    "Availability"): its writer checks the schema and writes once the database answers.
    """
    if not url:
        return
    try:
        journal_args.checked_url(url, must_exist=False)
    except journal_args.UsageError as exc:
        raise UsageError(redact.text(str(exc), url)) from exc


def watch_schema(settings: ClusterSettings, registry: CollectorRegistry) -> schema_wait.SchemaWatch | None:
    """With ``--journal-migrate never``: a ``SchemaWatch`` (started) saying in logs and a gauge that the
    replica waits for `kruntimes db upgrade`; None otherwise. It blocks nothing."""
    waiting = Gauge("kruntimes_journal_schema_waiting", "1 until this scheduler has seen the journal schema at "
                    "the revision it needs (`kruntimes db upgrade`); its records wait in the spool meanwhile.",
                    registry=registry)
    if not settings.journal_url or settings.journal_migrate != "never":
        return None
    return schema_wait.SchemaWatch(settings.journal_url, patience=settings.journal_schema_wait,
                                   on_waiting=lambda value: waiting.set(1 if value else 0)).start()


def run(args: argparse.Namespace) -> int:
    logs.configure(args.log_level)
    prepared = _prepare(args)
    if isinstance(prepared, int):
        return prepared
    settings, api = prepared
    registry = CollectorRegistry()
    for collector in (ProcessCollector, PlatformCollector, GCCollector):
        collector(registry=registry)
    started: list[ClusterScheduler] = []
    try:
        probes = ProbeServer(registry, healthy=lambda: not started or started[0].healthy(),
                             ready=lambda: bool(started) and started[0].ready(),
                             address=args.http_address, port=args.http_port).start()
    except OSError as exc:
        print(f"kruntimes scheduler: cannot listen on {args.http_address}:{args.http_port}: {exc}", file=sys.stderr)
        api.close()
        return 2
    schema = watch_schema(settings, registry)
    scheduler = ClusterScheduler(api, settings, registry=registry,
                                 configuration_source=kube_args.configuration_source(args))
    started.append(scheduler)
    gctuning.tune()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda signum, frame: stop.set())
    log.info("starting", extra=_starting(settings, probes.port))
    scheduler.start()
    try:
        while not stop.wait(0.5):
            pass
        log.info("shutting down")
    finally:
        scheduler.stop()
        if schema is not None:
            schema.stop()
        probes.stop()
        api.close()
    log.info("stopped")
    return 0


def _prepare(args: argparse.Namespace) -> tuple[ClusterSettings, kubernetes.client.ApiClient] | int:
    """The settings and the API client to start with, or the exit code of what stops the start (said on stderr)."""
    legacy = cluster_settings.legacy_setting_problem(os.environ)
    if legacy is not None:
        print(f"kruntimes scheduler: {legacy}", file=sys.stderr)
        return 2
    try:
        settings = settings_from(args)
        api = api_client(args, pool_size=8)
    except UsageError as exc:
        print(f"kruntimes scheduler: {exc}", file=sys.stderr)
        return 2
    try:
        check_journal(settings.journal_url)
    except UsageError as exc:
        print(f"kruntimes scheduler: {exc}", file=sys.stderr)
        api.close()
        return 2
    try:
        shared = shared_settings.read(api, args.settings_namespace, settings.request_timeout)
    except shared_settings.SettingsUnreadable as exc:
        print(f"kruntimes scheduler: {exc}", file=sys.stderr)
        api.close()
        return 1
    return dataclasses.replace(settings, default_runs_capacity=shared.default_runs_capacity), api


def _starting(settings: ClusterSettings, http_port: int) -> dict[str, object]:
    """What the "starting" log line says of the settings."""
    return {"namespace": settings.namespace or "*", "binders": settings.binders, "identity": settings.lease.identity,
            "leader_elect": settings.leader_elect, "default_runs_capacity": settings.default_runs_capacity,
            "lease": f"{settings.lease.namespace}/{settings.lease.name}",
            "journal": journal_args.shown(settings.journal_url) if settings.journal_url else None,
            "http_port": http_port}
