"""gpuops.nvidia.device_plugin_restart over real HTTPS against the Kubernetes twin of a gpulab lab whose nodes run an
NVIDIA driver: the stale device-plugin ledger (capacity without allocatable) is repaired on the faulty node only."""
from __future__ import annotations

import os
import shutil
import time

import pytest

from conftest import collections_path, start_lab, stop_lab
from gates_helpers import KUBECTL, eventually, get_json, run_in_playbook
from gpulab.testkit.api_records import requests

pytestmark = pytest.mark.skipif(not os.path.exists(KUBECTL) or collections_path() is None,
                                reason="needs /usr/bin/kubectl and the collection on ANSIBLE_COLLECTIONS_PATH")

DRIVER = "550.54.15"
PLUGIN_LABEL = "name=nvidia-device-plugin-ds"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("gates-device-plugin") / "state")
    running = start_lab(state_dir, "--nodes", "3", "--driver", DRIVER, "--boot-delay", "0.3")
    eventually(lambda: allocatable(running) == {"gpu-node-01": 8, "gpu-node-02": 8, "gpu-node-03": 8},
               timeout_s=60, what="8 allocatable GPUs per node")
    yield running
    stop_lab(running)
    shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


def allocatable(lab):
    return {node["metadata"]["name"]: int(node["status"].get("allocatable", {}).get("nvidia.com/gpu", "0"))
            for node in get_json(lab, "nodes")["items"]}


def plugin_pods(lab):
    """node -> (pod name, uid) of the device-plugin pods."""
    pods = get_json(lab, "pods", "-n", "kube-system", "-l", PLUGIN_LABEL)["items"]
    return {pod["spec"]["nodeName"]: (pod["metadata"]["name"], pod["metadata"]["uid"]) for pod in pods
            if not pod["metadata"].get("deletionTimestamp")}


def test_stale_ledger_repaired_on_the_faulty_node_only(lab):
    lab.gpulab("fault", "gpu-node-02", "stale-device-plugin")
    eventually(lambda: allocatable(lab)["gpu-node-02"] == 0, what="allocatable 0 on gpu-node-02")
    before = plugin_pods(lab)

    checked = run_in_playbook(lab, "device_plugin_restart", {"nodes": ["gpu-node-02"]}, check_mode=True)
    assert not checked.get("failed"), checked.get("msg")
    [entry] = checked["nodes"]
    assert entry["deleted_pod"] == before["gpu-node-02"][0] and entry["stale_ledger"] and not entry["restored"]
    assert plugin_pods(lab) == before and allocatable(lab)["gpu-node-02"] == 0

    result = run_in_playbook(lab, "device_plugin_restart", {"nodes": ["gpu-node-02"], "timeout": 60})
    assert not result.get("failed"), result.get("msg")
    assert result["daemonset"] == "kube-system/nvidia-device-plugin-daemonset"
    [entry] = result["nodes"]
    assert entry["node"] == "gpu-node-02" and entry["deleted_pod"] == before["gpu-node-02"][0]
    assert entry["stale_ledger"] and entry["ready"] and entry["restored"]
    assert entry["allocatable_before"] == {"nvidia.com/gpu": 0}
    assert entry["allocatable_after"] == entry["capacity"] == {"nvidia.com/gpu": 8}
    after = plugin_pods(lab)
    assert after["gpu-node-02"][0] == entry["new_pod"] and after["gpu-node-02"][1] != before["gpu-node-02"][1]
    assert after["gpu-node-01"] == before["gpu-node-01"] and after["gpu-node-03"] == before["gpu-node-03"]
    assert allocatable(lab) == {"gpu-node-01": 8, "gpu-node-02": 8, "gpu-node-03": 8}


def test_nothing_is_deleted_when_a_listed_node_has_no_plugin_pod_or_the_daemonset_is_elsewhere(lab):
    before = plugin_pods(lab)
    since = time.time()
    unknown = run_in_playbook(lab, "device_plugin_restart", {"nodes": ["gpu-node-01", "gpu-node-09"]})
    assert unknown["failed"] and "gpu-node-09" in unknown["msg"]
    operator = run_in_playbook(lab, "device_plugin_restart", {"nodes": ["gpu-node-01"], "namespace": "gpu-operator"})
    assert operator["failed"]
    assert operator["msg"] == "no DaemonSet nvidia-device-plugin-daemonset in namespace gpu-operator"
    empty = run_in_playbook(lab, "device_plugin_restart", {"nodes": []})
    assert empty["failed"] and "there is no fleet-wide restart" in empty["msg"]
    assert [record for record in requests(lab.state_dir, since) if record["method"] == "DELETE"] == []
    assert plugin_pods(lab) == before
