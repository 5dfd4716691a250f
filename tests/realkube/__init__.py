"""A real Kubernetes control plane for the tests: etcd and kube-apiserver built from source.

`testbin/` builds the release's own binaries once per machine; `controlplane` starts them
on loopback for one test session (or for a person, through ``python -m tests.realkube
up``); `fixtures` gives the tests a session-wide one. Everything the emulator only
imitates (CEL type checking, admission policies, RBAC, TokenRequest) is the real thing here.
"""
