#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_smoke_test
short_description: Run a pod pinned to a GPU node that lists its GPUs, and check what it saw
version_added: 0.1.0
description:
  - The last gate before a GPU node is given back. A pod bound to the node (C(spec.nodeName), so it runs while the
    node is still cordoned) requests O(gpus) GPUs and runs C(nvidia-smi -L). The test passes when the pod
    succeeds and its log lists that many GPUs.
  - The pod is deleted afterwards, whatever the result, and its log is returned.
  - With O(nodes), the nodes of a batch are tested at once in one module process, each with its own pod; a node
    whose test fails fails alone, in RV(nodes), and the module itself does not fail.
author: gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.k8s_auth
attributes:
  check_mode:
    support: full
    details: Reports the pod it would run and runs nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  node:
    description: The node. Required unless O(nodes) is given.
    type: str
  nodes:
    description:
      - The nodes of a batch, instead of O(node), each mapped to the GPUs to request and expect in its listing (0,
        its whole allocatable count; O(gpus) is not used). Each node's outcome is in RV(nodes).
    type: dict
  gpus:
    description: GPUs to request and expect in the listing; 0 requests the node's whole allocatable count.
    type: int
    default: 0
  resource:
    description: The extended resource to request.
    type: str
    default: nvidia.com/gpu
  namespace:
    description: Namespace of the pod.
    type: str
    default: default
  image:
    description: Container image that has C(nvidia-smi) (the NVIDIA container runtime or CDI injects it).
    type: str
    default: nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04
  command:
    description: The command; its output must list the GPUs as C(nvidia-smi -L) does, one line per GPU starting with C(GPU N).
    type: list
    elements: str
    default: [nvidia-smi, -L]
  runtime_class:
    description: C(runtimeClassName) of the pod (for example V(nvidia)), when the cluster needs one.
    type: str
  timeout:
    description: Seconds to wait for the pod to finish.
    type: int
    default: 180
"""

EXAMPLES = r"""
- name: The node's GPUs work in a pod
  gpuops.nvidia.gpu_smoke_test:
    node: gpu-node-01
    gpus: 8
  delegate_to: localhost

- name: The GPUs of a batch of nodes work, each node in its own pod, all at once
  gpuops.nvidia.gpu_smoke_test:
    nodes: {gpu-node-01: 8, gpu-node-02: 8, gpu-node-03: 0}
  delegate_to: localhost
  register: smoke

- name: Each node that failed its test, with why
  ansible.builtin.debug:
    msg: "{{ smoke.nodes[item].msg }}"
  loop: "{{ smoke.failed_nodes }}"
"""

RETURN = r"""
pod:
  description: Name of the pod that ran.
  returned: with O(node)
  type: str
phase:
  description: The pod's final phase (C(Succeeded), C(Failed), or C(Pending)/C(Running) on timeout).
  returned: when the pod ran
  type: str
gpus_listed:
  description: The GPU lines of the pod's log.
  returned: when the pod ran
  type: list
  elements: str
log:
  description: The pod's log.
  returned: when the pod ran
  type: str
elapsed:
  description: Seconds from creation to the end.
  returned: always
  type: float
nodes:
  description:
    - With O(nodes), per node C(changed), C(failed), C(msg) and, once its pod ran, C(pod), C(phase), C(gpus_listed),
      C(log) and C(elapsed).
  returned: with O(nodes)
  type: dict
  sample: {gpu-node-01: {changed: false, failed: false, msg: "", pod: gpuops-smoke-1a2b3c4d, phase: Succeeded}}
failed_nodes:
  description: With O(nodes), the nodes whose test failed.
  returned: with O(nodes)
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.batch import DEFAULT_WORKERS, run_per_node, summarize
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC, api_client_from_module, set_connection_pool_size)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.smoke_pod import SmokePodError, smoke_node


def run_batch(module, api, started):
    """Every node of ``nodes`` tested at once; a node whose test fails fails alone, in the result's ``nodes``."""
    params = module.params
    set_connection_pool_size(api, 2 * DEFAULT_WORKERS + 1)
    warnings = []

    def one(name):
        try:
            return smoke_node(api, params, name, int(params["nodes"][name] or 0), warnings.append,
                              check_mode=module.check_mode)
        except SmokePodError as error:
            return dict(error.result, changed=False, failed=True, msg=str(error))

    per_node = run_per_node(list(params["nodes"]), one)
    for warning in warnings:
        module.warn(warning)
    summary = summarize(per_node)
    module.exit_json(changed=False, nodes=per_node, failed_nodes=summary["failed_nodes"],
                     elapsed=round(time.monotonic() - started, 1))


def main():
    argument_spec = dict(
        K8S_AUTH_ARG_SPEC,
        node=dict(type="str"),
        nodes=dict(type="dict"),
        gpus=dict(type="int", default=0),
        resource=dict(type="str", default="nvidia.com/gpu"),
        namespace=dict(type="str", default="default"),
        image=dict(type="str", default="nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04"),
        command=dict(type="list", elements="str", default=["nvidia-smi", "-L"]),
        runtime_class=dict(type="str"),
        timeout=dict(type="int", default=180),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True,
                           required_one_of=[("node", "nodes")], mutually_exclusive=[("node", "nodes")])
    params = module.params
    if params["nodes"] is not None:
        for name, gpus in params["nodes"].items():
            if not name or not str(gpus if gpus is not None else 0).isdigit():
                module.fail_json(msg="nodes: %r must map a node name to a number of GPUs (0: its allocatable)" % name)
    api = api_client_from_module(module)
    started = time.monotonic()
    if params["nodes"] is not None:
        run_batch(module, api, started)
    try:
        module.exit_json(**smoke_node(api, params, params["node"], params["gpus"], module.warn,
                                      check_mode=module.check_mode))
    except SmokePodError as error:
        module.fail_json(msg=str(error), **error.result)


if __name__ == "__main__":
    main()
