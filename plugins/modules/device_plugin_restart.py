#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: device_plugin_restart
short_description: Restart the NVIDIA device-plugin pod on the listed Kubernetes nodes only
version_added: 0.1.0
description:
  - The remedy for a node whose GPUs are in capacity but not allocatable after a kubelet restart (the device plugin
    did not register again, a stale ledger) - deletes the NVIDIA device-plugin pod on each listed node, waits until
    its DaemonSet's replacement pod on that node is Running and Ready, then (O(wait_allocatable)) until the node's
    C(nvidia.com/*) allocatable equals its capacity again.
  - Scoped to the listed nodes, in parallel; never a restart of the whole DaemonSet (C(kubectl rollout restart)
    would take the GPUs of every node away at once).
  - The plugin pod is found by the DaemonSet's own selector and owner reference, not by a name pattern. When a
    listed node has no running plugin pod, the task fails before any pod is deleted.
  - Reports per node the GPU capacity and allocatable before and after.
  - Runs on the controller (C(delegate_to=localhost)) and uses the C(kubernetes) Python client.
author: gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.k8s_auth
attributes:
  check_mode:
    support: full
    details: Reports the pod each node would lose and the resources before; deletes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  nodes:
    description:
      - The nodes whose device-plugin pod is restarted. At least one; there is no "all nodes".
    type: list
    elements: str
    required: true
  daemonset:
    description:
      - The device plugin's DaemonSet. C(nvidia-device-plugin-daemonset) is the name in NVIDIA's static manifest
        and in the GPU Operator.
    type: str
    default: nvidia-device-plugin-daemonset
  namespace:
    description:
      - The DaemonSet's namespace. Unset, the DaemonSet is looked up in C(kube-system) (NVIDIA's static
        manifest) and C(gpu-operator) (the GPU Operator); the task fails when it is in neither or in both.
    type: str
  wait_allocatable:
    description:
      - After the new pod is Ready, also wait until every C(nvidia.com/*) resource the node has capacity for is
        allocatable again.
    type: bool
    default: true
  timeout:
    description:
      - Seconds for all listed nodes together.
    type: int
    default: 180
notes:
  - The connection options and their C(K8S_AUTH_*) environment variables are those of kubernetes.core; set them
    once for every Kubernetes module of this collection with C(module_defaults) and C(group/gpuops.nvidia.k8s).
seealso:
  - module: gpuops.nvidia.node_drain
  - name: NVIDIA device plugin
    description: The NVIDIA device plugin for Kubernetes.
    link: https://github.com/NVIDIA/k8s-device-plugin
"""

EXAMPLES = r"""
- name: Restart the device plugin where GPUs are in capacity but not allocatable
  gpuops.nvidia.device_plugin_restart:
    nodes: [gpu-node-07]
  delegate_to: localhost

- name: The same with the GPU Operator
  gpuops.nvidia.device_plugin_restart:
    nodes: "{{ stale_nodes }}"
    namespace: gpu-operator
    timeout: 300
  delegate_to: localhost
"""

RETURN = r"""
daemonset:
  description: The DaemonSet, as C(namespace/name).
  returned: always
  type: str
  sample: kube-system/nvidia-device-plugin-daemonset
nodes:
  description: One entry per listed node.
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: The node.
      type: str
    deleted_pod:
      description: The plugin pod deleted (with check mode, that would be deleted).
      type: str
    new_pod:
      description: The replacement pod, once it exists.
      type: str
    ready:
      description: Whether the replacement pod is Running and Ready.
      type: bool
    pod_state:
      description:
        - What keeps the replacement pod from being ready, as C(kubectl get pods) and C(kubectl describe pod) say
          it (its waiting reason, restarts, the last exit code and message); null once it is ready. The module's
          message repeats it when the replacement is not ready in time.
      type: str
      sample: "CrashLoopBackOff, 3 restarts, last exit 1: failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND"
    capacity:
      description: The node's C(nvidia.com/*) capacity.
      type: dict
      sample: {nvidia.com/gpu: 8}
    allocatable_before:
      description: The node's C(nvidia.com/*) allocatable before the restart.
      type: dict
      sample: {nvidia.com/gpu: 0}
    allocatable_after:
      description: The node's C(nvidia.com/*) allocatable at the end (not with check mode).
      type: dict
      sample: {nvidia.com/gpu: 8}
    restored:
      description: Whether allocatable equals capacity (and is above 0) at the end.
      type: bool
    stale_ledger:
      description: Whether, before the restart, the node had GPU capacity but no GPU allocatable.
      type: bool
  sample: [{node: gpu-1, deleted_pod: nvidia-device-plugin-daemonset-x5htk, new_pod: nvidia-device-plugin-daemonset-8d2kq,
            ready: true, capacity: {nvidia.com/gpu: 8}, allocatable_before: {nvidia.com/gpu: 0},
            allocatable_after: {nvidia.com/gpu: 8}, restored: true, stale_ledger: true}]
elapsed:
  description: Seconds the module took.
  returned: always
  type: float
  sample: 3.2
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import device_plugin as _device_plugin
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC, NodeApi, api_client_from_module, api_error_message, list_call, request_json, resource_path,
    status_of)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.device_plugin_restart import NodeRestart, run_in_parallel
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.watch import list_json


def find_daemonset(module, api):
    name = module.params["daemonset"]
    namespaces = [module.params["namespace"]] if module.params["namespace"] else list(_device_plugin.KNOWN_NAMESPACES)
    found = {}
    for namespace in namespaces:
        try:
            found[namespace] = request_json(api, "GET", resource_path("apps/v1", "daemonsets", name, namespace))
        except Exception as error:
            if status_of(error)[0] != 404:
                module.fail_json(msg=api_error_message(error, "read DaemonSet %s/%s" % (namespace, name)))
            found[namespace] = None
    if module.params["namespace"]:
        if found[namespace] is None:
            module.fail_json(msg="no DaemonSet %s in namespace %s" % (name, namespace))
        return found[namespace]
    try:
        return found[_device_plugin.choose_namespace(found)]
    except ValueError as error:
        module.fail_json(msg=str(error) % name)


def main():
    argument_spec = dict(
        K8S_AUTH_ARG_SPEC,
        nodes=dict(type="list", elements="str", required=True),
        daemonset=dict(type="str", default=_device_plugin.DAEMONSET_NAME),
        namespace=dict(type="str"),
        wait_allocatable=dict(type="bool", default=True),
        timeout=dict(type="int", default=180),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    nodes = module.params["nodes"]
    if not nodes or any(not name for name in nodes):
        module.fail_json(msg="nodes must list at least one node name (there is no fleet-wide restart)")
    if len(set(nodes)) != len(nodes):
        twice = sorted(name for name in set(nodes) if nodes.count(name) > 1)
        module.fail_json(msg="nodes lists a node twice: %s" % ", ".join(twice))
    if module.params["timeout"] <= 0:
        module.fail_json(msg="timeout must be a positive number of seconds, got %d" % module.params["timeout"])
    started = time.monotonic()
    api = api_client_from_module(module)
    daemonset = find_daemonset(module, api)
    namespace = daemonset["metadata"]["namespace"]
    result = dict(changed=False, daemonset="%s/%s" % (namespace, daemonset["metadata"]["name"]), nodes=[])
    try:
        pods = list_json(list_call(api, resource_path("v1", "pods", namespace=namespace)),
                         label_selector=_device_plugin.pod_selector(daemonset))[0]
        node_objects = [NodeApi(api).read_node(name) for name in nodes]
    except Exception as error:
        module.fail_json(msg=api_error_message(error, "read the nodes and the plugin pods"), **result)
    plugin_pods = {name: _device_plugin.plugin_pod(pods, daemonset, name) for name in nodes}
    without = [name for name, pod in plugin_pods.items() if pod is None]
    if without:
        module.fail_json(msg=_device_plugin.missing_pods_message(daemonset, without), **result)
    restarts = [NodeRestart(api, daemonset, node, plugin_pods[node["metadata"]["name"]],
                            started + module.params["timeout"], module.params["wait_allocatable"])
                for node in node_objects]
    befores = {restart.node_name: restart.resources for restart in restarts}
    if not module.check_mode:
        run_in_parallel(restarts)
    result["changed"] = True
    for restart in restarts:
        before = befores[restart.node_name]
        entry = dict(restart.report, capacity=before["capacity"], allocatable_before=before["allocatable"],
                     stale_ledger=_device_plugin.stale_ledger(before))
        if not module.check_mode:
            entry.update(capacity=restart.resources["capacity"], allocatable_after=restart.resources["allocatable"])
        entry["restored"] = _device_plugin.allocatable_restored(before if module.check_mode else restart.resources)
        result["nodes"].append(entry)
    result["elapsed"] = round(time.monotonic() - started, 3)
    errors = [restart.error for restart in restarts if restart.error]
    if errors:
        module.fail_json(msg="; ".join(errors), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
