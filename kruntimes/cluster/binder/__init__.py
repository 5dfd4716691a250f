"""The binder: how the scheduler's Run status writes (and the reads that settle them) reach the API server.

One concept in three parts, as kube-scheduler splits its binding cycle from its
scheduling cycle (the answers' meaning is the loop's: `kruntimes.scheduler.binding`):

- ``kube``: `KubernetesBinder`, one write or read over the real client, guarded by the
  Run's resourceVersion and fenced by the leader lease; tells an unanswered write (it
  may have landed) from a failed one;
- ``processes``: `BinderProcesses`, the scheduling process's side: hands each write, with
  the deadline it carries, to a binder process over a pipe and brings the answer back;
- ``child``: what runs inside a binder process: requests in, HTTP out, answers back.
"""
