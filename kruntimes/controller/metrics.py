"""What the Runtime controller counts for its dashboard panels and alerts (deploy/monitoring).

Labels come from bounded sets only (SPEC §3.8): a pass's result, what was done to a pod;
never a Runtime's or a pod's name (those go to the log and to the Runtime's Events).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

#: A pass's result: every write landed, or some failed (the Runtime is requeued with backoff).
OK, ERROR = "ok", "error"


class ControllerMetrics:
    """The controller's counters, in the registry its /metrics serves."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.passes = Counter("kruntimes_controller_reconciles", "Reconcile passes of one Runtime, by result.",
                              ["result"], registry=registry)
        self.pods = Counter("kruntimes_controller_runtime_pods",
                            "Runtime Pods the controller created or deleted, by action.", ["action"], registry=registry)
        self.lost = Counter("kruntimes_controller_runs_lost",
                            "Runs the controller ended Failed RuntimePodLost: their pod was gone.", registry=registry)
        self.leader = Gauge("kruntimes_controller_leader",
                            "1 while this controller holds its lease and reconciles.", registry=registry)
        for result in (OK, ERROR):
            self.passes.labels(result)
        for action in ("created", "deleted"):
            self.pods.labels(action)
