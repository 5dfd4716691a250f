"""kruntimes: a Kubernetes-native scheduler for Runs on pools of Runtime Pods.

The package is layered so that the architecture is visible from the tree:
``kruntimes.scheduler`` is the pure planner core (no Kubernetes client, no SQL,
no threads inside decisions); ``kruntimes.api`` holds the pydantic API models and
the quantity rules; adapters (journal, cluster, CLI) sit around them.
"""

__version__ = "0.1.0"
