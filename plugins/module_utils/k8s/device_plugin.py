# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Decisions of device_plugin_restart on DaemonSet/Pod/Node JSON: which pod is the NVIDIA device plugin of a node,
when its replacement is up, and the node's GPU capacity and allocatable before and after."""

from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import pods as _pods
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import selectors as _label_selector

DAEMONSET_NAME = "nvidia-device-plugin-daemonset"
# Where the two usual installs put it: NVIDIA/k8s-device-plugin's static manifest (and its Helm chart's default
# release namespace in many clusters) and the GPU Operator's namespace.
KNOWN_NAMESPACES = ("kube-system", "gpu-operator")
GPU_RESOURCE_PREFIX = "nvidia.com/"


def _meta(obj):
    return obj.get("metadata") or {}


def pod_selector(daemonset):
    """The label selector query of a DaemonSet's pods."""
    return _label_selector.to_query((daemonset.get("spec") or {}).get("selector") or {})


def _owned_by(pod, daemonset):
    uid = _meta(daemonset).get("uid")
    return any(owner.get("uid") == uid and owner.get("kind") == "DaemonSet"
               for owner in _meta(pod).get("ownerReferences") or [])


def _plugin_of(pod, daemonset, node_name):
    return (pod.get("spec") or {}).get("nodeName") == node_name and _owned_by(pod, daemonset) \
        and _pods.is_alive(pod)


def plugin_pod(pods, daemonset, node_name):
    """The DaemonSet's live pod on the node (owned by it, bound to the node, not terminating), or None."""
    for pod in pods:
        if _plugin_of(pod, daemonset, node_name):
            return pod
    return None


def replacement(pods, daemonset, node_name, old_uid):
    """The pod that replaced ``old_uid`` on the node, or None: ``{"pod", "ready", "state"}`` (ready: Running and
    Ready; state: what keeps it from being ready, as `pods.not_ready_reason` says)."""
    for pod in pods:
        if _plugin_of(pod, daemonset, node_name) and _meta(pod).get("uid") != old_uid:
            ready = (pod.get("status") or {}).get("phase") == "Running" and _pods.is_ready(pod)
            return {"pod": _meta(pod).get("name"), "ready": ready,
                    "state": None if ready else _pods.not_ready_reason(pod)}
    return None


def gpu_resources(node):
    """``{"capacity": {...}, "allocatable": {...}}`` of the node's ``nvidia.com/*`` resources, counts as ints."""
    status = node.get("status") or {}

    def pick(values):
        return {name: int(value) for name, value in (values or {}).items()
                if name.startswith(GPU_RESOURCE_PREFIX) and str(value).isdigit()}
    return {"capacity": pick(status.get("capacity")), "allocatable": pick(status.get("allocatable"))}


def allocatable_restored(resources):
    """Every GPU resource the node has capacity for is allocatable again (and there is at least one device)."""
    capacity = resources["capacity"]
    allocatable = resources["allocatable"]
    return sum(capacity.values()) > 0 and all(allocatable.get(name, 0) == count for name, count in capacity.items())


def stale_ledger(resources):
    """Capacity without allocatable: the kubelet lost the plugin's registration (the runbook's case 1)."""
    return sum(resources["capacity"].values()) > 0 and sum(resources["allocatable"].values()) == 0


def choose_namespace(found):
    """The namespace to use from ``{namespace: daemonset or None}`` looked up in KNOWN_NAMESPACES; raises
    ValueError with what to set when the DaemonSet is in none or in several of them."""
    present = [namespace for namespace in KNOWN_NAMESPACES if found.get(namespace) is not None]
    if len(present) == 1:
        return present[0]
    if not present:
        raise ValueError("no DaemonSet %%s in %s: set daemonset and namespace" % " or ".join(KNOWN_NAMESPACES))
    raise ValueError("DaemonSet %%s exists in %s: set namespace to the one that runs the plugin"
                     % " and ".join(present))


def missing_pods_message(daemonset, nodes_without):
    return ("no running pod of DaemonSet %s/%s on node(s) %s: nothing was restarted (is the node a GPU node, is the "
            "plugin crash-looping, or is it another DaemonSet?)"
            % (_meta(daemonset).get("namespace"), _meta(daemonset).get("name"), ", ".join(sorted(nodes_without))))
