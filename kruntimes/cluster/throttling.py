"""Throttling by the API server, made visible: a log line and a counter for every 429.

API Priority and Fairness answers a request it will not serve now with 429 and a
`Retry-After` header (in plain text, not a `Status`). The client never retries it
(`client`); the caller decides when to try again with its own backoff - the elector
waits at least `Retry-After` before its next Lease write, a status write goes back to
the work queue's per-key backoff (SPEC §3.2 step 6, §3.6). This module only records
that it happened, with a label from a bounded set of calls (SPEC §3.8: no label
carries a name).
"""

from __future__ import annotations

import collections
import logging
import threading

from prometheus_client import CollectorRegistry, Counter

from kruntimes.cluster import errors

log = logging.getLogger(__name__)

#: The calls that can be throttled, the only values of the `call` label.
CALLS = ("lease_read", "lease_write", "status_write", "run_read")


class Throttling:
    """Counts 429s per call (in `counts`, and as a metric when given a registry)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self._lock = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter()
        self._metric = Counter("kruntimes_cluster_api_throttled",
                               "Requests the API server answered 429 Too Many Requests, by call; "
                               "kruntimes backs off itself, the client never re-sends.",
                               ["call"], registry=registry) if registry is not None else None

    def note(self, call: str, exc: BaseException) -> float | None:
        """Record a 429 for `call`; return its `Retry-After` in seconds, if it had one."""
        return self.record(call, errors.retry_after(exc))

    def record(self, call: str, wait: float | None) -> float | None:
        """Record a 429 for `call` whose `Retry-After` was already read (a binder process's answer)."""
        if call not in CALLS:
            raise ValueError(f"unknown call {call!r}: the label must come from {CALLS}")
        with self._lock:
            self.counts[call] += 1
        if self._metric is not None:
            self._metric.labels(call=call).inc()
        log.warning("the API server throttled a %s (429, Retry-After %s); kruntimes backs off itself",
                    call.replace("_", " "), "none" if wait is None else f"{wait:g}s")
        return wait
