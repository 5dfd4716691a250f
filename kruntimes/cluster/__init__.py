"""The live scheduler's adapter to a Kubernetes API: everything between the client and the core.

The pure core (`kruntimes.scheduler`) plans on projections and writes through a
`Sender`; this package feeds it from the API server and writes back to it, with the
official `kubernetes` client. One concept per module, from the wire inwards:

- ``errors``: this package's own exception types, each chaining the client's error;
- ``client``: the client's retry policy - a write is never re-sent behind kruntimes' back;
- ``throttling``: every 429 logged and counted; callers back off themselves;
- ``settings``: every setting of the live scheduler, validated in one place;
- ``sources``: how to list and watch Runs, Runtimes and Runtime Pods (all namespaces or one);
- ``informer``: list + watch of one resource with resume, bookmarks, relist on 410 Gone
  (diffed against what was delivered) and reconnect with backoff (``backoff``);
- ``intake``: informer events -> ingest projections -> the Scheduler's handlers while
  leading, straight into the cache while standing by;
- ``binder``: the `Binder` that writes a Run's status, guarded by its resourceVersion,
  and tells an unanswered write (it may have landed) from a failed one (``kube``), and
  the binder processes that send those writes for the scheduling loop, each before the
  deadline it carries, and bring the answers back (``processes``; ``child``: what runs
  inside one);
- ``leader``: leader election on a coordination.k8s.io/v1 Lease;
- ``term``: what starts and ends a leadership term (journal, queue, the scheduling loop, assumptions);
- ``runner``: `ClusterScheduler`, which wires all of the above into one process (and its binders);
- ``probes``: `/metrics`, `/healthz` and `/readyz` on one port; ``logs``: JSON log lines.

Nothing in the core imports this package (tests/unit/test_layering.py).
"""
