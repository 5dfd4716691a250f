"""Start and stop a real control plane on loopback: etcd, kube-apiserver, optionally kube-controller-manager.

The API server serves TLS on a free loopback port with RBAC authorization, an admin
token (group ``system:masters``) for the tests and for people, and a service-account
issuer with its own signing key, so TokenRequest and pod-bound tokens work as on a
cluster. Without the controller manager nothing creates a namespace's ``default``
ServiceAccount, so the ServiceAccount admission plugin is off then; pods still get the
``serviceAccountName`` they name. With it, the garbage collector, namespace lifecycle and
ServiceAccount controllers run as on a cluster, and so does the one that
type-checks ValidatingAdmissionPolicies and writes the result into their status.

Everything lives under one directory: certificates, keys, etcd's data, each component's
log (``*.log``) and ``kubeconfig``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from tests.realkube import binaries

ISSUER = "https://kubernetes.default.svc.cluster.local"
# Only what a test suite needs: nothing here runs a kubelet, a node or a cloud. The
# ValidatingAdmissionPolicy status controller is the one that type-checks policies.
CONTROLLERS = ",".join((
    "garbage-collector-controller", "namespace-controller", "serviceaccount-controller",
    "validatingadmissionpolicy-status-controller",
))
START_TIMEOUT = 60.0


class ControlPlaneFailed(Exception):
    """A component did not start; the message names it and ends with its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ControlPlane:
    """One etcd and one kube-apiserver (plus, if asked, a kube-controller-manager) in ``directory``."""

    def __init__(self, directory: Path, *, with_controller_manager: bool = False,
                 bin_dir: Path | None = None, cpus: set[int] | None = None) -> None:
        self.directory = directory.resolve()
        # The CPUs its processes may run on (None: any). Go sizes GOMAXPROCS from them at start.
        self.cpus = cpus
        self.with_controller_manager = with_controller_manager
        self.bin_dir = bin_dir or binaries.bin_dir()
        self.kubeconfig = self.directory / "kubeconfig"
        self.token = secrets.token_hex(16)
        self.port = 0
        self._processes: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = []

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def kubectl(self) -> list[str]:
        """The argv prefix of the release's kubectl talking to this server as admin."""
        return [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig)]

    # -- starting --------------------------------------------------------------------
    def start(self) -> "ControlPlane":
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._write_credentials()
            etcd = f"http://127.0.0.1:{free_port()}"
            self._spawn("etcd", ["--data-dir", str(self.directory / "etcd"), "--listen-client-url", etcd,
                                 "--listen-peer-url", f"http://127.0.0.1:{free_port()}"])
            self.port = free_port()
            self._spawn("kube-apiserver", self._apiserver_args(etcd))
            self._write_kubeconfig()
            self._wait_ready()
            if self.with_controller_manager:
                self._spawn("kube-controller-manager", self._controller_manager_args())
        except BaseException:
            self.stop()
            raise
        return self

    def _write_credentials(self) -> None:
        (self.directory / "tokens.csv").write_text(f'{self.token},admin,admin,"system:masters"\n')
        key, public = self.directory / "service-account.key", self.directory / "service-account.pub"
        if not public.exists():
            subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                            "-out", str(key)], check=True, capture_output=True)
            subprocess.run(["openssl", "pkey", "-in", str(key), "-pubout", "-out", str(public)],
                           check=True, capture_output=True)

    def _apiserver_args(self, etcd: str) -> list[str]:
        key, public = self.directory / "service-account.key", self.directory / "service-account.pub"
        admission = [] if self.with_controller_manager else ["--disable-admission-plugins=ServiceAccount"]
        return [
            f"--etcd-servers={etcd}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
            f"--cert-dir={self.directory / 'certs'}",
            "--authorization-mode=RBAC",
            f"--token-auth-file={self.directory / 'tokens.csv'}",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={public}", f"--service-account-signing-key-file={key}",
            "--service-cluster-ip-range=10.0.0.0/24",
            # The default reconciler refuses a loopback address; nothing here needs the endpoints.
            "--endpoint-reconciler-type=none",
            *admission,
        ]

    def _controller_manager_args(self) -> list[str]:
        return [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
            "--authentication-skip-lookup",  # no client CA here to look up
            f"--controllers={CONTROLLERS}",
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            f"--service-account-private-key-file={self.directory / 'service-account.key'}",
        ]

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.directory / f"{name}.log", "ab")
        cpus = self.cpus
        process = subprocess.Popen([str(self.bin_dir / name), *args], stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus))
        self._processes.append((name, process, log))

    def _write_kubeconfig(self) -> None:
        # The API server writes its self-signed certificate and CA into --cert-dir at start.
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "realkube",
            "clusters": [{"name": "realkube", "cluster": {
                "server": self.server, "certificate-authority": str(self.directory / "certs" / "apiserver.crt")}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "realkube", "context": {"cluster": "realkube", "user": "admin"}}],
        }
        self.kubeconfig.write_text(json.dumps(config, indent=2) + "\n")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        certificate = self.directory / "certs" / "apiserver.crt"
        while time.monotonic() < deadline:
            self.check_running()
            if certificate.exists() and self._ready(certificate):
                return
            time.sleep(0.2)
        raise ControlPlaneFailed(f"kube-apiserver was not ready after {START_TIMEOUT:.0f} s\n"
                                 + self.log_tail("kube-apiserver"))

    def _ready(self, certificate: Path) -> bool:
        request = urllib.request.Request(f"{self.server}/readyz", headers={"Authorization": f"Bearer {self.token}"})
        try:
            context = ssl.create_default_context(cafile=str(certificate))
            with urllib.request.urlopen(request, timeout=2, context=context) as response:
                return response.status == 200
        except (OSError, ssl.SSLError, urllib.error.URLError):
            return False

    def check_running(self) -> None:
        for name, process, _ in self._processes:
            if process.poll() is not None:
                raise ControlPlaneFailed(f"{name} exited with {process.returncode}\n" + self.log_tail(name))

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.directory / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    # -- stopping --------------------------------------------------------------------
    def stop(self) -> None:
        """SIGTERM each component, newest first (etcd last), then SIGKILL what lingers."""
        for name, process, log in reversed(self._processes):
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
            log.close()
        self._processes.clear()

    def __enter__(self) -> "ControlPlane":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
