"""Tests against a real kube-apiserver and etcd, built from source (`tests.realkube.fixtures`)."""

from tests.realkube.fixtures import deployed, real_server, team  # noqa: F401 - fixtures are found by name
