"""Every setting of the live scheduler, validated in one place.

The CLI maps flags and environment variables onto these values; tests build them
directly with tiny lease durations. Timing rules that keep leader election safe are
checked here, once, instead of being hoped for at run time.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field

from kruntimes.journal.write.recorder import DEFAULT_CHECKPOINT_EVERY, DEFAULT_CHECKPOINT_SIZE_RATIO
from kruntimes.scheduler.config import ConfigError, SchedulerConfig

DETAILS = ("summary", "full")


def default_identity() -> str:
    """The Lease holder identity: the pod name when the Deployment passes it, else host + a nonce."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class LeaseSettings:
    """Leader election on a coordination.k8s.io/v1 Lease (client-go's defaults: 15 s, 10 s, 2 s).

    `duration` is whole seconds because the Lease stores `leaseDurationSeconds` as an
    integer. A leader that has not renewed for `renew_deadline` stops scheduling; the
    others may take over `duration` after they last saw the lease change, so the gap
    between the two is the time a deposed leader has to stop, and the upper bound of
    any status write it still sends.
    """

    name: str = "kruntimes-scheduler"
    namespace: str = "default"
    identity: str = field(default_factory=default_identity)
    duration: int = 15
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.name or not self.namespace or not self.identity:
            raise ConfigError("the lease needs a name, a namespace and a holder identity")
        if not isinstance(self.duration, int) or self.duration < 1:
            raise ConfigError(f"lease duration must be a whole number of seconds >= 1 (got {self.duration!r})")
        if not 0 < self.retry_period < self.renew_deadline < self.duration:
            raise ConfigError(
                f"need 0 < retry period ({self.retry_period}) < renew deadline ({self.renew_deadline}) "
                f"< lease duration ({self.duration}): a leader must notice it lost the lease before "
                "another can take it")

    @property
    def fence_margin(self) -> float:
        """How long after its renew deadline a deposed leader's writes may still land safely."""
        return self.duration - self.renew_deadline

    @property
    def write_timeout(self) -> float:
        """The longest a fenced write may take: half the fence margin (the binder's docstring
        derives it; the other half covers the delay between the fence check and the send)."""
        return self.fence_margin / 2


MIGRATE_MODES = ("auto", "never")  # see kruntimes.journal.store.migrate.default_migrate_mode


@dataclass(frozen=True)
class ClusterSettings:
    """What `kruntimes scheduler` runs with. `namespace=None` watches every namespace."""

    namespace: str | None = None
    binders: int = 1                  # binder processes sending the status writes
    # Requests in flight per binder process. The real API server spends less CPU per write
    # the more it has at once (etcd batches them): bench/realkube.py measured 8 -> 16 -> 32
    # -> 64 in flight at 673, ~690, ~710, ~720 binds/s with the journal on (2 shared cores).
    bind_concurrency: int = 32
    heartbeat_staleness: int = 30
    default_runs_capacity: int = 1
    journal_url: str | None = None
    journal_detail: str = "summary"
    journal_checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY
    journal_checkpoint_size_ratio: int = DEFAULT_CHECKPOINT_SIZE_RATIO
    journal_spool: str | None = None
    journal_writer: str = "process"
    # "inline": history rows in each batch's transaction; "follow": records only, the rows
    # left to `kruntimes journal index` (kruntimes.journal.history.indexer.HISTORY_MODES, spelled out
    # here: the controller reads these settings and must not load SQLAlchemy).
    journal_history: str = "inline"
    # The HMAC key of the journal's chain (SPEC §5 "Integrity"); None: $KRUNTIMES_JOURNAL_KEY_FILE, else unkeyed.
    journal_key_file: str | None = None
    # "auto" migrates on start (one writer: embedded SQLite); "never" only waits, up to
    # journal_schema_wait seconds, for the `kruntimes db upgrade` Job (SPEC §5).
    journal_migrate: str = "auto"
    journal_schema_wait: float = 300.0
    # Seconds the journal writer waits for the database to answer a call before it spools the
    # batch (SPEC §5 "Availability"; kruntimes.journal.store.deadline.DEFAULT_SECONDS, spelled out here).
    journal_write_timeout: float = 5.0
    leader_elect: bool = True
    lease: LeaseSettings = field(default_factory=LeaseSettings)
    watch_timeout: int = 300          # server-side timeoutSeconds of one watch request
    # The API server's bookmark period; a watch silent for twice this long is restarted.
    bookmark_interval: float = 60.0
    request_timeout: float = 30.0     # lists, gets and (without leader election) status writes
    backoff_initial: float = 0.2      # first reconnect delay of an informer
    backoff_max: float = 30.0
    shutdown_timeout: float = 20.0    # for the cycle in flight and the journal flush
    # Events on Runs (kruntimes.cluster.events): writes of one Run's FailedScheduling
    # Event at least this many seconds apart; 0 turns Events off.
    event_interval: float = 60.0

    def __post_init__(self) -> None:
        if self.journal_detail not in DETAILS:
            raise ConfigError(f"journal detail must be one of {', '.join(DETAILS)} (got {self.journal_detail!r})")
        if self.journal_writer not in ("process", "thread"):
            raise ConfigError(f"journal writer must be process or thread (got {self.journal_writer!r})")
        if self.journal_history not in ("inline", "follow"):
            raise ConfigError(f"journal history must be inline or follow (got {self.journal_history!r})")
        if self.journal_migrate not in MIGRATE_MODES:
            raise ConfigError(f"journal migrate must be {' or '.join(MIGRATE_MODES)} (got {self.journal_migrate!r})")
        if self.journal_schema_wait < 0:
            raise ConfigError("the journal schema wait must be >= 0 seconds")
        if self.journal_checkpoint_every < 1:
            raise ConfigError("the journal checkpoint interval must be >= 1 record")
        if self.journal_checkpoint_size_ratio < 0:
            raise ConfigError("the journal checkpoint size ratio must be >= 0")
        if self.watch_timeout < 1 or self.request_timeout <= 0 or self.bookmark_interval <= 0:
            raise ConfigError("watch and request timeouts and the bookmark interval must be positive")
        if not 0 < self.backoff_initial <= self.backoff_max:
            raise ConfigError("need 0 < initial backoff <= maximum backoff")
        if self.binders < 1 or self.bind_concurrency < 1:
            raise ConfigError("need at least one binder process and one request in flight per binder")
        if self.namespace == "":
            raise ConfigError("an empty namespace: leave it unset to watch all namespaces")
        self.scheduler_config()  # staleness and capacity are checked there

    def scheduler_config(self) -> SchedulerConfig:
        """The core's configuration; the namespace scope goes into `extra` for the audit trail."""
        return SchedulerConfig(heartbeat_staleness_seconds=self.heartbeat_staleness,
                               default_runs_capacity=self.default_runs_capacity, workers=1,
                               extra=(("namespace", self.namespace or "*"),))

    @property
    def write_timeout(self) -> float:
        """The request timeout of a status write: within the fence margin under leader election."""
        return min(self.request_timeout, self.lease.write_timeout) if self.leader_elect else self.request_timeout
