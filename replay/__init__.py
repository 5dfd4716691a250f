"""Deterministic replay: rebuild any recorded cycle from the journal alone and re-run the planner (SPEC §6).

After an incident an operator holds only the journal. This package turns it back
into exactly what the scheduler saw - the cluster cache, the assumed cache, the
cycle's `now` and the incarnation's configuration - by feeding the recorded
records through the same `ClusterCache` the live scheduler uses, then runs the
same `Planner` on the same `Snapshot` type and compares every recorded field and
the digest of the full outcome.

It depends on the planner core (`kruntimes.scheduler`) and the journal
(`kruntimes.journal`) only; it never imports the Kubernetes client (a test holds
that). Modules, from the inside out:

- ``errors``: what a damaged or tampered journal raises, always naming the LSN.
- ``source``: checked reading (gaps, schema versions, hashes) and the look-ups
  replay needs (a cycle, its incarnation, the checkpoint to start from).
- ``lockstep``: the replay cache's recorder; every change the cache makes while
  replaying must be the journal's next record, and checkpoints are compared.
- ``rebuild``: applies records to a fresh cache, starting from a checkpoint or an
  incarnation's first record.
- ``engine``: walks the journal once, plans each selected cycle when the state
  reaches its snapshot LSN, hands the result over when its record is reached.
- ``compare``: recorded cycle vs replayed outcome, field by field.
- ``verify``, ``explain``, ``whatif``: the three things `kruntimes replay` does.

Import the module you need (``from replay import verify``); this file imports nothing.
"""
