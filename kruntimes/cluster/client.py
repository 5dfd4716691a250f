"""The Kubernetes client as kruntimes uses it: no write is ever re-sent behind its back.

The official client hands every request to urllib3, whose default `Retry(total=3)`
silently re-sends a PUT after a read timeout or a dropped connection, and any
request answered 429/503 with `Retry-After`, after sleeping for it. For kruntimes
that is wrong twice over (SPEC §3.2 step 6, §3.6):

- a status write whose outcome is unknown may have landed; a hidden re-send means
  the scheduler believes the write failed while one of its copies lands later, after
  the assumption was released (two active Runs on a one-slot pod, measured);
- the binder's fence bounds how long a write may take (`LeaseSettings.write_timeout`);
  three hidden re-sends with their own timeouts and Retry-After sleeps multiply it.

So the policy here lets the client re-send only a read (GET/HEAD, once, on a
connection-level failure such as a pooled keep-alive connection the server closed:
a read has no effect, and failing it would cost an informer a reconnect). Writes
(PUT, POST, PATCH, DELETE) are sent exactly once; whatever happens is the caller's to
handle. Status codes are never retried, `Retry-After` never slept on: a 429 reaches
the caller, whose own backoff handles it visibly (`throttling`).
"""

from __future__ import annotations

import copy
from types import TracebackType
from typing import Any

import kubernetes.client
from urllib3.exceptions import MaxRetryError, ResponseError
from urllib3.util.retry import Retry

READS = frozenset({"GET", "HEAD"})


class WritesNeverRetried(Retry):
    """urllib3's `Retry`, except that any method but a read is never re-sent."""

    def increment(self, method: str | None = None, url: str | None = None, response: Any = None,
                  error: Exception | None = None, _pool: Any = None,
                  _stacktrace: TracebackType | None = None) -> WritesNeverRetried:
        if method is None or method.upper() not in READS:
            if error is not None:
                raise error.with_traceback(_stacktrace)
            raise MaxRetryError(_pool, url, ResponseError(f"{method} is never re-sent by the client"))
        return super().increment(method, url, response, error, _pool, _stacktrace)


def retry_policy() -> WritesNeverRetried:
    """One re-send of a read after a connection-level failure; nothing else, ever."""
    return WritesNeverRetried(total=1, connect=1, read=1, status=0, other=0, redirect=0,
                              allowed_methods=READS, status_forcelist=(), respect_retry_after_header=False,
                              raise_on_status=False, raise_on_redirect=True)


def configure(configuration: kubernetes.client.Configuration) -> kubernetes.client.Configuration:
    """Set the retry policy on `configuration` (before an `ApiClient` is built from it)."""
    configuration.retries = retry_policy()
    configuration.client_go_retries = False  # the client's own Retry-After loop for reads
    return configuration


def without_write_retries(api: kubernetes.client.ApiClient) -> kubernetes.client.ApiClient:
    """A new `ApiClient` like `api` (host, credentials, pool size) with `retry_policy()`.

    urllib3 fixes the retry policy of a connection pool when the client is built, so
    the policy cannot be changed on `api` itself; the caller closes the copy.
    """
    return kubernetes.client.ApiClient(configure(copy.deepcopy(api.configuration)))


def never_retries_writes(api: kubernetes.client.ApiClient) -> bool:
    """True when `api` was built with this module's policy."""
    return isinstance(api.configuration.retries, WritesNeverRetried)
