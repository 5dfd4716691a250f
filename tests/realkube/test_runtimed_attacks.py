"""What a runtimed token can still do on a real API server, and each status attack of issue 23 refused (SPEC §4.1).

A Run no longer holds runtimed's token (the Runtime Server split); should the token
leak anyway, the admission policies of ``deploy/base/runtimed-policy.yaml`` bound it.
Here the release's own kube-apiserver judges: a Runtime Pod object (it never runs: no
kubelet), its ServiceAccount and RoleBinding as the examples create them, a token
bound to that pod (as the projected volume gets it, with the pod's name and UID in
the user's extra), and status writes made with it by kubectl, one per attack.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

import pytest

from tests.realkube.controlplane import ControlPlane
from tests.realkube.test_deploy_apply import DEPLOY, apply, kubectl

POD = "python-7xk2q"


class Team:
    """One namespace with a Runtime Pod object, runtimed's identity and a token bound to the pod."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.namespace = f"team-{uuid.uuid4().hex[:6]}"
        kubectl(plane, "create", "namespace", self.namespace)
        apply(plane, "-n", self.namespace, "-f", str(DEPLOY / "examples" / "runtimed-serviceaccount.yaml"))
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD, "namespace": self.namespace},
               "spec": {"serviceAccountName": "kruntimes-runtimed", "automountServiceAccountToken": False,
                        "containers": [{"name": "runtimed", "image": "ghcr.io/kruntimes/kruntimes:0.1.0"}]}}
        created = json.loads(kubectl(plane, "create", "-o", "json", "-f", "-", stdin=json.dumps(pod)))
        self.pod_uid = created["metadata"]["uid"]
        self.token = kubectl(plane, "-n", self.namespace, "create", "token", "kruntimes-runtimed",
                             "--bound-object-kind", "Pod", "--bound-object-name", POD,
                             "--bound-object-uid", self.pod_uid).strip()

    def run(self, name: str, phase: str) -> None:
        """A Run the scheduler assigned to this pod, then (as admin) in `phase`."""
        body = {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"runtime": "python", "mode": {"task": {"args": ["true"]}}}}
        kubectl(self.plane, "create", "-f", "-", stdin=json.dumps(body))
        status = {"phase": phase, "assignment": {"podName": POD, "podUID": self.pod_uid}}
        kubectl(self.plane, "-n", self.namespace, "patch", "run", name, "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": status}))

    def as_runtimed(self, name: str, status: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        """The Run's status replaced (PUT, as runtimed writes it) with `status` merged in, with the runtimed token."""
        obj = json.loads(kubectl(self.plane, "-n", self.namespace, "get", "run", name, "-o", "json"))
        obj["status"] = {**obj.get("status", {}), **status}
        argv = [str(self.plane.bin_dir / "kubectl"), "--kubeconfig", "/dev/null", "--server", self.plane.server,
                "--token", self.token, "--insecure-skip-tls-verify=true", "-n", self.namespace, "replace",
                "--subresource=status", "-f", "-"]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, input=json.dumps(obj))


@pytest.fixture(scope="module")
def team(real_server: ControlPlane) -> Team:
    apply(real_server, "-k", str(DEPLOY / "crds"))
    kubectl(real_server, "wait", "--for=condition=Established", "--timeout=60s", "crd/runs.kruntimes.io")
    apply(real_server, "-k", str(DEPLOY / "overlays/dev"))  # runtimed's ClusterRole and both policies
    return Team(real_server)


FINAL = "a runtimed writes only Runs that are Scheduled or Running; a finished Run stays as it ended"
BACK = "a runtimed moves a Run forward only (Scheduled, Running, Succeeded or Failed), never back"
ATTACKS = [
    ("setting a finished Run back to Scheduled, so it runs again after a restart", "Succeeded",
     {"phase": "Scheduled"}, FINAL),
    ("making a failed Run Running again", "Failed", {"phase": "Running"}, FINAL),
    ("rewriting a finished Run's result", "Failed", {"phase": "Succeeded"}, FINAL),
    ("setting a Running Run back to Pending, so it is placed and runs twice", "Running", {"phase": "Pending"}, BACK),
    ("setting a Running Run back to Scheduled", "Running", {"phase": "Scheduled"}, BACK),
    ("marking a Running Run released without ending it, so its room looks free", "Running", {"released": True},
     "a runtimed marks a Run released only as it ends it Succeeded"),
    ("moving a Run to another pod", "Running", {"assignment": {"podName": "python-other", "podUID": "other"}},
     "a runtimed keeps a Run's assignment as the scheduler wrote it"),
]


@pytest.mark.parametrize("why,phase,status,refusal", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_each_status_attack_with_runtimeds_token_is_refused_by_the_server(team: Team, why: str, phase: str,
                                                                           status: dict[str, Any],
                                                                           refusal: str) -> None:
    name = f"r-{uuid.uuid4().hex[:6]}"
    team.run(name, phase)
    done = team.as_runtimed(name, status)
    assert done.returncode != 0 and "kruntimes-runtimed-run-status" in done.stderr and refusal in done.stderr


def test_the_writes_runtimed_makes_itself_pass_claim_then_end(team: Team) -> None:
    # Also what no policy can stop with the token: ending a co-tenant's Running Run with any result.
    team.run("claimed", "Scheduled")
    assert team.as_runtimed("claimed", {"phase": "Running"}).returncode == 0
    done = team.as_runtimed("claimed", {"phase": "Succeeded"})
    assert done.returncode == 0, done.stderr


def _event(team: Team, *, kind: str = "Run", api_version: str = "kruntimes.io/v1alpha1",
           controller: str = "kruntimes.io/runtimed", instance: str = POD) -> subprocess.CompletedProcess[str]:
    """An Event created with the runtimed token, as its recorder builds one (kruntimes.cluster.events)."""
    body = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": f"e-{uuid.uuid4().hex[:8]}", "namespace": team.namespace},
            "eventTime": "2026-12-01T10:00:00.500000Z", "reportingController": controller,
            "reportingInstance": instance, "action": "Admitted", "reason": "Admitted", "type": "Normal",
            "note": "n", "regarding": {"apiVersion": api_version, "kind": kind, "namespace": team.namespace,
                                       "name": "claimed"}}
    argv = [str(team.plane.bin_dir / "kubectl"), "--kubeconfig", "/dev/null", "--server", team.plane.server,
            "--token", team.token, "--insecure-skip-tls-verify=true", "-n", team.namespace, "create", "-f", "-"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, input=json.dumps(body))


EVENT_ATTACKS = [
    ("an Event about a pod", {"kind": "Pod", "api_version": "v1"},
     "a runtimed writes Events about Runs of its namespace only"),
    ("an Event speaking for the scheduler", {"controller": "kruntimes.io/scheduler"},
     "a runtimed reports Events as kruntimes.io/runtimed, instance its own pod"),
    ("an Event in another pod's name", {"instance": "python-other"},
     "a runtimed reports Events as kruntimes.io/runtimed, instance its own pod"),
]


@pytest.mark.parametrize("why,fields,refusal", EVENT_ATTACKS, ids=[a[0] for a in EVENT_ATTACKS])
def test_an_event_runtimed_never_writes_is_refused_by_the_server(team: Team, why: str, fields: dict[str, str],
                                                                  refusal: str) -> None:
    done = _event(team, **fields)
    assert done.returncode != 0 and "kruntimes-runtimed-events" in done.stderr and refusal in done.stderr


def test_the_events_runtimed_writes_itself_pass(team: Team) -> None:
    done = _event(team)
    assert done.returncode == 0, done.stderr
