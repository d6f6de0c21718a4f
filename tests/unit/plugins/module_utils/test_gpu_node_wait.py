# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""GpuNodeWait.follow over the event queue the ListWatch threads feed (events put here by hand, as they would)."""

from __future__ import annotations

import json
import os
import queue
import time

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import gpu_node_wait
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.gpu_node_wait import GpuNodeWait, WatchFailed

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "k8s")
with open(os.path.join(FIXTURES, "node_gpulab-twin_h100x8_ready.json")) as stream:
    TWIN_NODE = json.load(stream)


def options(**given):
    wanted = dict(nodes=["gpu-node-01"], resource="nvidia.com/gpu", count=8, labels={}, boot_id_changed_from={},
                  require_ready=True, stable_seconds=0)
    wanted.update(given)
    return wanted


def events(*items):
    found = queue.Queue()
    for item in items:
        found.put(item)
    return found


def test_a_list_showing_the_node_back_ends_the_wait_at_once():
    started = time.monotonic()
    states = GpuNodeWait(options()).follow(events(("nodes", "SYNC", [TWIN_NODE])), 1, time.time() + 30)
    assert states["gpu-node-01"]["satisfied"] is True
    assert time.monotonic() - started < 5


def test_a_node_missing_from_the_list_is_judged_again_on_its_watch_event():
    wait = GpuNodeWait(options())
    states = wait.follow(events(("nodes", "SYNC", []), ("nodes", "ADDED", TWIN_NODE)), 1, time.time() + 30)
    assert states["gpu-node-01"]["satisfied"] is True


def test_check_mode_judges_the_first_list_without_waiting():
    states = GpuNodeWait(options()).follow(events(("nodes", "SYNC", [])), 1, time.time() + 30, check_mode=True)
    assert states["gpu-node-01"]["satisfied"] is False


def test_a_failed_watch_ends_the_wait_with_its_message():
    with pytest.raises(WatchFailed, match="watch nodes: 403"):
        GpuNodeWait(options()).follow(events(("nodes", "FAILED", "watch nodes: 403 Forbidden")), 1, time.time() + 30)


def test_without_a_first_list_the_wait_ends_after_the_grace_with_no_state(monkeypatch):
    monkeypatch.setattr(gpu_node_wait, "FIRST_LIST_GRACE_S", 0.2)
    started = time.monotonic()
    assert GpuNodeWait(options()).follow(events(), 1, time.time()) == {}
    assert 0.1 < time.monotonic() - started < 5


def mig_node(allocatable):
    """The twin's node with the mixed strategy's MIG resources of a layout (all GPUs in MIG mode)."""
    node = json.loads(json.dumps(TWIN_NODE))
    for key in ("capacity", "allocatable"):
        node["status"][key]["nvidia.com/gpu"] = "0"
        node["status"][key].update(allocatable)
    return node


def test_a_node_waited_for_by_its_mig_resources_is_back_once_each_is_allocatable():
    layout = {"nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-1g.10gb": 2}
    node = mig_node({"nvidia.com/mig-3g.40gb": "2", "nvidia.com/mig-1g.10gb": "2"})
    wait = GpuNodeWait(options(counts={"gpu-node-01": layout}))
    states = wait.follow(events(("nodes", "SYNC", [node])), 1, time.time() + 30)
    assert states["gpu-node-01"]["satisfied"] is True
    assert states["gpu-node-01"]["allocatable"] == 4


def test_a_mig_layout_not_advertised_fails_the_node_naming_the_missing_resources():
    layout = {"nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-1g.10gb": 2}
    node = mig_node({"nvidia.com/mig-1g.10gb": "2"})
    wait = GpuNodeWait(options(counts={"gpu-node-01": layout}))
    states = wait.follow(events(("nodes", "SYNC", [node])), 1, time.time() + 0.5)
    problems = states["gpu-node-01"]["problems"]
    assert [problem["code"] for problem in problems] == ["fewer_devices"]
    assert "nvidia.com/mig-3g.40gb 0 of 2" in problems[0]["message"]
    rebooted_bare = mig_node({})
    wait = GpuNodeWait(options(counts={"gpu-node-01": layout}))
    states = wait.follow(events(("nodes", "SYNC", [rebooted_bare])), 1, time.time() + 0.5)
    assert states["gpu-node-01"]["problems"][0]["code"] == "no_gpu_capacity"
