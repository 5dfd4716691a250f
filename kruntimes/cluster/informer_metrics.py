"""What an informer counts that an operator should see: objects it had to skip, watches it restarted.

Both are signs of trouble an informer survives on its own (issue 23 items 6 and 7), so
they must be visible without reading logs. Labels come from bounded sets only (SPEC
§3.8): the kind watched (`Run`, `Runtime`, `Pod`) and a fixed reason, never an
object's name or namespace (those go to the log line beside each count).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

#: Reasons a watch is restarted by the informer itself.
SILENT = "silent"


class InformerMetrics:
    """The counters every informer of one process shares."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.skipped = Counter(
            "kruntimes_informer_objects_skipped",
            "Listed or watched objects an informer could not take and skipped (the rest is delivered).",
            ["kind", "reason"], registry=registry)
        self.watch_restarts = Counter(
            "kruntimes_informer_watch_restarts",
            "Watches an informer ended and resumed itself, e.g. silent for twice the bookmark interval.",
            ["kind", "reason"], registry=registry)
