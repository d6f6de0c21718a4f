# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# DaemonSet/Pod/Node JSON shaped as the API serves NVIDIA/k8s-device-plugin's static manifest
# (deployments/static/nvidia-device-plugin.yml: selector name=nvidia-device-plugin-ds).

from __future__ import annotations

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import device_plugin as _device_plugin

DAEMONSET = {"apiVersion": "apps/v1", "kind": "DaemonSet",
             "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system", "uid": "ds-uid"},
             "spec": {"selector": {"matchLabels": {"name": "nvidia-device-plugin-ds"}}}}


def plugin_pod(name, node, uid, phase="Running", ready=True, terminating=False, owner_uid="ds-uid"):
    metadata = {"name": name, "namespace": "kube-system", "uid": uid, "labels": {"name": "nvidia-device-plugin-ds"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "controller": True,
                                     "name": "nvidia-device-plugin-daemonset", "uid": owner_uid}]}
    if terminating:
        metadata["deletionTimestamp"] = "2026-12-03T03:00:00Z"
    return {"metadata": metadata, "spec": {"nodeName": node},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def gpu_node(capacity, allocatable):
    return {"metadata": {"name": "gpu-1"},
            "status": {"capacity": {"cpu": "64", "memory": "1Ti", "nvidia.com/gpu": str(capacity)},
                       "allocatable": {"cpu": "63", "memory": "1000Gi", "nvidia.com/gpu": str(allocatable)}}}


def test_selector_of_the_static_manifest():
    assert _device_plugin.pod_selector(DAEMONSET) == "name=nvidia-device-plugin-ds"


def test_plugin_pod_is_the_live_pod_of_this_daemonset_on_the_node():
    pods = [plugin_pod("old", "gpu-1", "u0", terminating=True), plugin_pod("other-node", "gpu-2", "u1"),
            plugin_pod("foreign", "gpu-1", "u2", owner_uid="another-ds"), plugin_pod("mine", "gpu-1", "u3")]
    assert _device_plugin.plugin_pod(pods, DAEMONSET, "gpu-1")["metadata"]["name"] == "mine"
    assert _device_plugin.plugin_pod(pods[:3], DAEMONSET, "gpu-1") is None


def test_replacement_must_be_a_new_uid_running_and_ready():
    assert _device_plugin.replacement([plugin_pod("p", "gpu-1", "old")], DAEMONSET, "gpu-1", "old") is None
    starting = plugin_pod("n", "gpu-1", "new", phase="Pending", ready=False)
    assert _device_plugin.replacement([starting], DAEMONSET, "gpu-1", "old") == \
        {"pod": "n", "ready": False, "state": "Pending"}
    assert _device_plugin.replacement([plugin_pod("n", "gpu-1", "new")], DAEMONSET, "gpu-1", "old") == \
        {"pod": "n", "ready": True, "state": None}


def test_a_crash_looping_replacement_says_why_it_is_not_ready():
    # chaos seed 2008: the restart's error named no reason; `kubectl get pods` would have said CrashLoopBackOff
    crashing = plugin_pod("n", "gpu-1", "new", ready=False)
    crashing["status"]["containerStatuses"] = [{
        "name": "nvidia-device-plugin-ctr", "ready": False, "restartCount": 3,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                     "message": "failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND\n"}}}]
    assert _device_plugin.replacement([crashing], DAEMONSET, "gpu-1", "old")["state"] == \
        "CrashLoopBackOff, 3 restarts, last exit 1: failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND"


def test_stale_ledger_and_restored_allocatable():
    stale = _device_plugin.gpu_resources(gpu_node(8, 0))
    assert stale == {"capacity": {"nvidia.com/gpu": 8}, "allocatable": {"nvidia.com/gpu": 0}}
    assert _device_plugin.stale_ledger(stale) and not _device_plugin.allocatable_restored(stale)
    back = _device_plugin.gpu_resources(gpu_node(8, 8))
    assert _device_plugin.allocatable_restored(back) and not _device_plugin.stale_ledger(back)
    unhealthy = _device_plugin.gpu_resources(gpu_node(8, 7))
    assert not _device_plugin.allocatable_restored(unhealthy) and not _device_plugin.stale_ledger(unhealthy)
    no_gpu = _device_plugin.gpu_resources({"status": {"capacity": {"cpu": "4"}}})
    assert not _device_plugin.allocatable_restored(no_gpu) and not _device_plugin.stale_ledger(no_gpu)


def test_namespace_is_the_one_known_install_found():
    assert _device_plugin.choose_namespace({"kube-system": None, "gpu-operator": DAEMONSET}) == "gpu-operator"
    assert _device_plugin.choose_namespace({"kube-system": DAEMONSET, "gpu-operator": None}) == "kube-system"
    with pytest.raises(ValueError, match="kube-system or gpu-operator: set daemonset and namespace"):
        _device_plugin.choose_namespace({"kube-system": None, "gpu-operator": None})
    with pytest.raises(ValueError, match="exists in kube-system and gpu-operator"):
        _device_plugin.choose_namespace({"kube-system": DAEMONSET, "gpu-operator": DAEMONSET})


def test_missing_pods_message_names_nodes_and_says_nothing_restarted():
    message = _device_plugin.missing_pods_message(DAEMONSET, ["gpu-3", "gpu-2"])
    assert "kube-system/nvidia-device-plugin-daemonset on node(s) gpu-2, gpu-3: nothing was restarted" in message
