"""`kruntimes release NAMESPACE/NAME`: release a function Run (SPEC §2.2, §4.1).

A function Run stays active until a user releases it. Releasing is one annotation on
the Run, `kruntimes.io/release: "true"` (documented, so `kubectl annotate` does the
same); the runtimed of the Run's pod sees it, stops the function's process, marks the
Run `released` and frees its capacity. This command only writes the annotation; it
refuses a Run that is not a function or already ended, saying why.
"""

from __future__ import annotations

import argparse
import sys

import kubernetes.client
import urllib3
from kubernetes.client import ApiException

from kruntimes import wire
from kruntimes.api import models
from kruntimes.cli.kube_args import UsageError, add_kube_options, api_client
from kruntimes.cluster import decode, errors
from kruntimes.cluster.sources import RUNS
from kruntimes.runtimed.lifecycle import RELEASE_ANNOTATION


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("release", help="release a function Run (its runtimed stops it and frees its capacity)",
                       description=f"Annotate a function Run with {RELEASE_ANNOTATION}: \"true\"; the runtimed "
                                   "of its pod then stops it, marks it released and frees its capacity.")
    p.add_argument("run_ref", metavar="NAMESPACE/NAME", help="the function Run to release")
    add_kube_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    namespace, _, name = args.run_ref.partition("/")
    if not namespace or not name or "/" in name:
        print(f"kruntimes release: expected NAMESPACE/NAME, got {args.run_ref!r}", file=sys.stderr)
        return 2
    try:
        api = api_client(args, pool_size=1)
    except UsageError as exc:
        print(f"kruntimes release: {exc}", file=sys.stderr)
        return 2
    custom = kubernetes.client.CustomObjectsApi(api)
    try:
        # Read as the informers read (`decode`): a Run nested too deeply for the client's
        # parser (Kubernetes takes 10,000 levels) keeps the mode and status judged here.
        obj = decode.response_value(custom.get_namespaced_custom_object(
            models.GROUP, models.VERSION, namespace, RUNS, name, _preload_content=False))
        problem = _why_not(obj)
        if problem:
            print(f"kruntimes release: Run {namespace}/{name} {problem}", file=sys.stderr)
            return 1
        decode.drain(custom.patch_namespaced_custom_object(  # the answer is the whole Run: not decoded
            models.GROUP, models.VERSION, namespace, RUNS, name,
            {"metadata": {"annotations": {RELEASE_ANNOTATION: "true"}}},
            _content_type="application/merge-patch+json", _preload_content=False))
    except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
        print(f"kruntimes release: Run {namespace}/{name}: {errors.describe(exc)}", file=sys.stderr)
        return 1
    finally:
        api.close()
    print(f"Run {namespace}/{name}: release requested; its runtimed stops it and marks it released")
    return 0


def _why_not(obj: dict) -> str | None:  # type: ignore[type-arg]
    mode = (obj.get("spec") or {}).get("mode") or {}
    status = obj.get("status") or {}
    if "function" not in mode:
        return "is not a function Run (only function Runs are released; a task Run ends by itself)"
    if status.get("released"):
        return "is already released"
    if status.get("phase") in wire.TERMINAL_PHASES:
        return f"has already ended ({status['phase']})"
    return None
