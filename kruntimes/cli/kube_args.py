"""What the commands that talk to the Kubernetes API share: `--kubeconfig`/`--context`, the
client they configure, and settings read from flags or the environment.

A module of its own so that `runtimed`, `controller` and `release` import the client
and nothing of the scheduler's journal (SQLAlchemy), which they never use.
"""

from __future__ import annotations

import argparse
import functools
import os
from pathlib import Path
from typing import Any, Callable

import kubernetes.client
import kubernetes.config
import yaml

from kruntimes import bounded_yaml
from kruntimes.cli import arg_types
from kruntimes.cluster import client as cluster_client

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
KUBECONFIG_DEFAULT = "~/.kube/config"


class UsageError(Exception):
    """A setting that cannot work: printed as one line, exit code 2."""


def env(name: str, default: Any = None) -> Any:
    """The environment variable ``name``, or ``default`` when it is unset or empty."""
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def boolean(text: str | bool) -> bool:
    if isinstance(text, bool):
        return text
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


# Kubernetes-free argument types, used here and by the journal's commands.
positive = arg_types.positive
seconds = arg_types.seconds


def lease_namespace() -> str:
    if env("POD_NAMESPACE"):
        return str(env("POD_NAMESPACE"))
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"



def add_kube_options(group: Any) -> None:
    """`--kubeconfig` and `--context`, read by `api_client`: the same for every command that talks to the API."""
    group.add_argument("--kubeconfig", default=env("KUBECONFIG"), metavar="PATH",
                       help="kubeconfig to use (env KUBECONFIG); default: in-cluster configuration when running "
                            "in a pod, else ~/.kube/config")
    group.add_argument("--context", default=env("KRUNTIMES_KUBE_CONTEXT"),
                       help="kubeconfig context (env KRUNTIMES_KUBE_CONTEXT; default: the current one)")


def api_client(args: argparse.Namespace, pool_size: int) -> kubernetes.client.ApiClient:
    """In-cluster configuration inside a pod (unless a kubeconfig is named), else the kubeconfig."""
    configuration = load_configuration(args.kubeconfig, args.context)
    # The watches, the elector and the binders' reads each hold a connection at times.
    configuration.connection_pool_maxsize = pool_size
    return kubernetes.client.ApiClient(cluster_client.configure(configuration))  # writes are never re-sent


def configuration_source(args: argparse.Namespace) -> Callable[[], kubernetes.client.Configuration]:
    """`load_configuration` for these flags, to be called in another process (a binder): it loads
    its own credentials there, token refresh included, which a copied configuration could not."""
    return functools.partial(load_configuration, args.kubeconfig, args.context)


def load_configuration(kubeconfig: str | None, context: str | None) -> kubernetes.client.Configuration:
    """The client configuration `api_client` uses. Raises `UsageError`."""
    configuration = kubernetes.client.Configuration()
    try:
        if not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
            kubernetes.config.load_incluster_config(client_configuration=configuration)
        else:
            paths = kubeconfig or KUBECONFIG_DEFAULT
            check_kubeconfig(paths)
            try:
                kubernetes.config.load_kube_config(config_file=paths, context=context,
                                                   client_configuration=configuration)
            except (kubernetes.config.ConfigException, OSError, yaml.YAMLError,
                    ValueError, TypeError, AttributeError, KeyError, IndexError) as exc:
                # The client trusts the file's shape: a cluster entry that is a number fails deep inside it.
                raise UsageError(f"kubeconfig {paths}: not usable ({first_line(exc)}); pass --kubeconfig PATH "
                                 "or run in a pod") from exc
    except (kubernetes.config.ConfigException, OSError) as exc:
        raise UsageError(f"no usable Kubernetes configuration ({first_line(exc)}); pass --kubeconfig PATH "
                         "or run in a pod") from exc
    return configuration


def check_kubeconfig(paths: str) -> None:
    """Read each kubeconfig the client will read, bounded, so a bad file is one line naming it.

    The client reads with ``yaml.safe_load`` and formats its entries into strings: a
    binary file raised ``UnicodeDecodeError``, an alias bomb would exhaust memory, and a
    file that is a list raised ``TypeError``. Like the client (and kubectl), ``paths``
    may list several files separated by ``os.pathsep``; missing ones are skipped.
    """
    for path in paths.split(os.pathsep):
        path = os.path.expanduser(path)
        if not path or not os.path.exists(path):
            continue
        try:
            config = bounded_yaml.load(path, bounded_yaml.read_text(path))
        except bounded_yaml.Unreadable as exc:
            raise UsageError(f"kubeconfig {exc}") from exc
        if config is not None and not isinstance(config, dict):
            raise UsageError(f"kubeconfig {path}: not a kubeconfig (expected a YAML mapping, got a "
                             f"{type(config).__name__})")


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
