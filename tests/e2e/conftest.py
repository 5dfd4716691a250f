"""End-to-end tests: the Runtime controller, the scheduler and one runtimed per pod, together.

Through the real `kubernetes` client, against the API emulator by default and against
a real cluster (the kubeconfig in ``KRUNTIMES_E2E_KUBECONFIG``, CRDs of ``deploy/crds``
applied) when it is set. Every test plays kubelet itself (the Runtime's template names
a scheduler nobody serves, so no real kubelet touches the pods): it writes the pods'
Ready condition and starts their runtimed. The tests wait for observed state, never
for a watch to be synchronous, and delete pods with grace period 0 where they need
them gone at once, so they hold on a real API server too.
"""

from __future__ import annotations

from tests.emulator.fixtures import emulator, emulator_factory, kube_api, kube_namespace, real_cluster  # noqa: F401
from tests.integration.conftest import cluster_api, start_scheduler  # noqa: F401
from tests.integration.processes import kubeconfig  # noqa: F401
from tests.e2e.system import system  # noqa: F401
