"""In-process stand-ins for the Kubernetes API, used by `kruntimes demo`, `simulate` and tests."""
