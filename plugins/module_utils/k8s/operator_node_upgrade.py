# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The API side of operator_upgrade_wait: ``OperatorNodeUpgrade(api, fail)`` reads a node, its driver and
validator pods and their DaemonSet's revisions, deletes a driver pod and relabels the node; ``observe(...)`` gives
what k8s/gpu_operator.py judges."""

from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import gpu_operator as operator
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    NodeApi, list_call, request, request_json, resource_path, status_of)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.selectors import to_query
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.watch import list_json


class OperatorNodeUpgrade:
    """The reads and writes of one node's driver upgrade; an API error goes to ``fail(error, action)``, which must
    not return (the module's fail_json)."""

    def __init__(self, api, fail):
        self.api = api
        self.nodes = NodeApi(api)
        self.fail = fail

    def node(self, name):
        try:
            return self.nodes.read_node(name)
        except Exception as error:
            self.fail(error, "read node %s" % name)

    def pods(self, node, selector):
        try:
            return list_json(list_call(self.api, resource_path("v1", "pods")), label_selector=selector,
                             field_selector="spec.nodeName=%s" % node)[0]
        except Exception as error:
            self.fail(error, "list pods %s on %s" % (selector, node))

    def daemonset_and_revisions(self, namespace, name):
        """([the DaemonSet], its ControllerRevisions) or ([], []) when it is gone."""
        try:
            daemonset = request_json(self.api, "GET", resource_path("apps/v1", "daemonsets", name, namespace))
        except Exception as error:
            if status_of(error)[0] == 404:
                return [], []
            self.fail(error, "read DaemonSet %s/%s" % (namespace, name))
        selector = to_query((daemonset.get("spec") or {}).get("selector") or {})
        try:
            revisions = list_json(list_call(self.api, resource_path("apps/v1", "controllerrevisions",
                                                                    namespace=namespace)),
                                  label_selector=selector)[0]
        except Exception as error:
            self.fail(error, "list the ControllerRevisions of DaemonSet %s/%s" % (namespace, name))
        return [daemonset], revisions

    def delete_pod(self, namespace, name):
        try:
            request(self.api, "DELETE", resource_path("v1", "pods", name, namespace))
        except Exception as error:
            if status_of(error)[0] != 404:
                self.fail(error, "delete driver pod %s/%s" % (namespace, name))

    def set_state(self, node_name, patch):
        try:
            self.nodes.patch_node(node_name, patch)
        except Exception as error:
            self.fail(error, "relabel node %s" % node_name)


def observe(cluster, params):
    """(node, driver pod view, validator pods) now; ``params`` are operator_upgrade_wait's options."""
    node = cluster.node(params["node"])
    pods = cluster.pods(params["node"], params["driver_pod_selector"])
    daemonsets, revisions = [], []
    for name, namespace in sorted(set((operator.owner_daemonset_name(pod), (pod.get("metadata") or {}).get(
            "namespace")) for pod in pods if operator.owner_daemonset_name(pod))):
        found, owned = cluster.daemonset_and_revisions(namespace, name)
        daemonsets.extend(found)
        revisions.extend(owned)
    driver = operator.driver_pod_view(pods, daemonsets, revisions, params["version"])
    validators = cluster.pods(params["node"], params["validator_pod_selector"]) \
        if params["validator_pod_selector"] else []
    return node, driver, validators
