"""What runs inside a binder process: requests in from a pipe, sent with the real client, answers out.

The scheduler's side (`processes`) starts these processes and gives the answers their
meaning; here a request only becomes an HTTP call and whatever happened becomes an
answer - never an exception, never a re-send. A write is sent only if its deadline
(the leader fence, on `time.monotonic()`, the same clock in every process of the
machine) has not passed when the request is about to go out.

The client configuration is built here, by a source the scheduler passes (`Fixed`
for a plain one; a loader for in-cluster or exec credentials, whose token refresh
only works in the process that loaded them).
"""

from __future__ import annotations

import copy
import logging
import pickle
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any, Callable

import kubernetes.client

from kruntimes.cluster import client, direct
from kruntimes.cluster.binder.kube import KubernetesBinder
from kruntimes.cluster.throttling import Throttling
from kruntimes.scheduler import status as st
from kruntimes.scheduler.projection import RunInfo

GATHER = 0.001  # seconds an outbox lets messages gather after each send

# A request: (id, kind, namespace, name, uid, resourceVersion, body, deadline); kind "w" or "r".
Request = tuple[int, str, str, str, str, str, Any, float]
# An answer: (id, outcome, message, code, retry_after, seconds, observed).
# outcome: ok | conflict | ambiguous | late | error | gone (a read of a Run that is not there);
# observed: (uid, resourceVersion, phase, podUID) for a read that found the Run.
Answer = tuple[int, str, str, int | None, float | None, float, tuple[str, str, str, str | None] | None]

ConfigurationSource = Callable[[], kubernetes.client.Configuration]


class Fixed:
    """A configuration source that hands out a copy of one configuration: a plain host and
    credentials (the emulator, tests). Refused for a configuration with a token refresh hook
    (in-cluster, exec credentials): only a loader run in the binder itself can refresh there."""

    def __init__(self, configuration: kubernetes.client.Configuration) -> None:
        if configuration.refresh_api_key_hook is not None:
            raise ValueError("this client configuration refreshes its credentials through a hook that only the "
                             "process that loaded it can run: give the binder processes a loader instead "
                             "(ClusterScheduler(configuration_source=...), as `kruntimes scheduler` does)")
        self._configuration = copy.deepcopy(configuration)

    def __call__(self) -> kubernetes.client.Configuration:
        return copy.deepcopy(self._configuration)


def serve(conn: Connection, configuration_source: ConfigurationSource, concurrency: int, timeout: float,
          read_timeout: float) -> None:
    """A binder process's main: requests in from `conn`, answers out, until told to stop or orphaned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us; Ctrl-C is for it
    quiet = logging.getLogger("kruntimes")  # throttling is logged by the parent, from the answers
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    configuration = configuration_source()  # loaded here: credentials (and their refresh) are this process's
    configuration.connection_pool_maxsize = concurrency
    api = kubernetes.client.ApiClient(client.configure(configuration))
    lean = direct.Direct(configuration, api.default_headers, concurrency) if direct.supports(configuration) else None
    binder = KubernetesBinder(api, timeout=timeout, read_timeout=read_timeout, throttling=Throttling(),
                              sender=lean)
    outbox = Outbox(conn)
    sender = threading.Thread(target=outbox.run, name="binder-answers", daemon=True)
    sender.start()
    conn.send([])  # ready: the client is imported and built
    pool = ThreadPoolExecutor(concurrency, thread_name_prefix="binder")
    orphaned = False
    try:
        while True:
            try:
                batch = conn.recv()
            except (EOFError, OSError):
                orphaned = True  # the scheduler is gone: nobody would settle what is still queued
                break
            stop = None in batch  # None: stop, after the requests before it
            for request in batch[:batch.index(None)] if stop else batch:
                pool.submit(lambda r=request: outbox.put(answer(binder, r)))
            if stop:
                break
    finally:
        # Requests already being sent finish either way (each passed its deadline check).
        pool.shutdown(wait=True, cancel_futures=orphaned)
        outbox.close()
        sender.join(10)
        api.close()
        if lean is not None:
            lean.close()


def answer(binder: KubernetesBinder, request: Request) -> Answer:
    """Carry out one request; whatever happens becomes an answer, never an exception."""
    rid, kind, namespace, name, uid, resource_version, body, deadline = request
    run = RunInfo(namespace=namespace, name=name, uid=uid, resource_version=resource_version)
    started = time.perf_counter()
    try:
        if kind == "r":
            seen = binder.observe(run)
            return (rid, "gone" if seen is None else "ok", "", None, None, time.perf_counter() - started,
                    None if seen is None else (seen.uid, seen.resource_version, seen.phase, seen.pod_uid))
        if time.monotonic() >= deadline:  # the fence, checked next to the send
            return (rid, "late", "", None, None, 0.0, None)
        binder.update_status(run, body)
        return (rid, "ok", "", None, None, time.perf_counter() - started, None)
    except st.Conflict as exc:
        return (rid, "conflict", str(exc), None, None, time.perf_counter() - started, None)
    except st.Ambiguous as exc:
        return (rid, "ambiguous", str(exc), getattr(exc, "code", None), None, time.perf_counter() - started, None)
    except Exception as exc:  # noqa: BLE001 - an ApiError, or anything unforeseen: not landed
        return (rid, "error", str(exc) or type(exc).__name__, getattr(exc, "code", None),
                getattr(exc, "retry_after", None), time.perf_counter() - started, None)


class Outbox:
    """Messages for the other end of a pipe, sent in batches by one thread (a send never blocks its caller)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._items: list[Any] = []
        self._cond = threading.Condition()
        self._closed = False

    def put(self, item: Any) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._items or self._closed)
                batch, self._items = self._items, []
                closed = self._closed
            if batch:
                try:
                    # Plain pickle, read by the other end's `recv` as any message: `send` would
                    # build a ForkingPickler (a copy of copyreg's table) for every message.
                    self._conn.send_bytes(pickle.dumps(batch, pickle.HIGHEST_PROTOCOL))
                except (OSError, ValueError):
                    return  # the other end is gone: it will see EOF
            if closed:
                with self._cond:
                    if not self._items:
                        return
            # Let the next moment's messages gather: then one wake-up and one send carry
            # them all. Waking a waiting thread costs the caller of `put` a lock hand-over
            # while it holds the interpreter - on the scheduling loop, once per write.
            time.sleep(GATHER)
