"""A Pending message names what is short, and a Run no pod could ever fit waits for pods (issue 27).

"0/60 runtime pods available: 60 insufficient capacity" did not say which resource, and
a Run asking 4 GPUs of 2-GPU pods was retried on every release (46 times in 20 s). The
message names the resources (a few, in the message only: metric labels keep the bounded
reasons), says when no pod could fit the Run even idle, and such a Run is woken by pod
events only. A configuration recorded by planner version 1 still gets version 1's
message, so replay of an older journal reproduces it.
"""

from __future__ import annotations

from typing import Any

import pytest

from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.plugins.availability import NEVER_FITS
from tests.builders import Harness, cache_of, plan, pod, run

WAKEUPS = "kruntimes_scheduler_pending_run_wakeups_total"
GPU2 = {"runs": 4, "example.com/gpu": 2}

MESSAGES: dict[str, tuple[list[Any], list[Any], dict[str, int], str]] = {
    "a full pod names the resource it is short of": (
        [pod("p", capacity=GPU2)], [run("x", phase="Running", on="p", requests={"example.com/gpu": 2})],
        {"example.com/gpu": 1}, "0/1 runtime pods available: 1 insufficient capacity (example.com/gpu)"),
    "two short resources are both named, sorted": (
        [pod("p", capacity=GPU2)], [run("x", phase="Running", on="p", requests={"example.com/gpu": 2, "runs": 4})],
        {"example.com/gpu": 1, "runs": 1},
        "0/1 runtime pods available: 1 insufficient capacity (example.com/gpu, runs)"),
    "a request above every pod's capacity says no pod could ever fit it": (
        [pod("p", capacity=GPU2), pod("q", capacity=GPU2)], [], {"example.com/gpu": 4},
        f"0/2 runtime pods available: 2 insufficient capacity (example.com/gpu); {NEVER_FITS}"),
    "a resource no pod declares is named": (
        [pod("p"), pod("q", ready=False)], [], {"example.com/fpga": 1},
        f"0/2 runtime pods available: 1 resource not offered (example.com/fpga), 1 runtime pod not ready; "
        f"{NEVER_FITS}"),
    "one pod that could hold it when idle means it may fit later": (
        [pod("p", capacity=GPU2), pod("q", capacity={"runs": 4, "example.com/gpu": 8})],
        [run("x", phase="Running", on="q", requests={"example.com/gpu": 8})], {"example.com/gpu": 4},
        "0/2 runtime pods available: 2 insufficient capacity (example.com/gpu)"),
    "at most three names, then how many more": (
        [pod("p")], [], {"a.io/w": 1, "b.io/x": 1, "c.io/y": 1, "d.io/z": 1},
        f"0/1 runtime pods available: 1 resource not offered (a.io/w, b.io/x, c.io/y and 1 more); {NEVER_FITS}"),
}


@pytest.mark.parametrize("pods,active,requests,message", MESSAGES.values(), ids=list(MESSAGES))
def test_a_pending_message_names_the_resources_it_is_about(pods: list[Any], active: list[Any],
                                                           requests: dict[str, int], message: str) -> None:
    cache = cache_of(pods, active)
    outcome = plan(cache, run("r", requests=requests))
    assert outcome.message == message
    assert outcome.waits_for_pods is message.endswith(NEVER_FITS)
    assert all("." not in reason for _, reason, _ in outcome.rejection_counts())  # labels stay bounded


def test_a_configuration_of_planner_version_1_keeps_version_1s_message() -> None:
    cache = cache_of([pod("p", capacity=GPU2)], [])
    outcome = plan(cache, run("r", requests={"example.com/gpu": 4}), config=SchedulerConfig(planner_version="1"))
    assert outcome.message == "0/1 runtime pods available: 1 insufficient capacity"
    assert not outcome.waits_for_pods and outcome.planner_version == "1"


def _never_fits_world() -> Harness:
    """p (gpu 2) busy with x; Pending `big` (gpu 4, never fits) and `small` (gpu 1, fits once x ends)."""
    h = Harness()
    h.add_pods(pod("p", capacity=GPU2))
    h.api.create(run("x", phase="Running", on="p", pod_uid="uid-ns-p", requests={"example.com/gpu": 2}))
    h.create(run("big", requests={"example.com/gpu": 4}), run("small", requests={"example.com/gpu": 1}))
    h.drain()
    assert h.phase("big") == h.phase("small") == "Pending"
    return h


def test_released_capacity_does_not_wake_a_run_no_pod_could_ever_fit() -> None:
    h = _never_fits_world()
    h.api.finish(("ns", "x"), "Succeeded", h.now)
    assert h.take_all() == [("ns", "small")]
    assert h.sample(WAKEUPS, source="capacity_released") == 1


@pytest.mark.parametrize("event", [
    lambda h: h.scheduler.on_pod(pod("p", capacity={"runs": 4, "example.com/gpu": 6})),
    lambda h: h.scheduler.on_pod(pod("q", capacity={"runs": 4, "example.com/gpu": 4})),
], ids=["the pod's capacity grows", "a bigger pod appears"])
def test_a_pod_event_wakes_a_run_no_pod_could_fit_and_it_is_placed(event: Any) -> None:
    h = _never_fits_world()
    event(h)
    assert ("ns", "big") in h.take_all()
    h.scheduler.process(("ns", "big"))
    assert h.phase("big") == "Scheduled"
