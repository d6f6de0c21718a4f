#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_workload_report
short_description: Name the CUDA pods that hold no GPU limit and the nodes served by the device plugin and DRA both
version_added: 0.1.0
description:
  - The seed runbook's case 2, "pod Running without GPUs". Lists pods (all namespaces, or O(namespaces)), nodes
    and, where the API server serves C(resource.k8s.io), ResourceSlices - at most three list calls and one
    discovery request, whatever the cluster's size.
  - "Names each pod that runs a CUDA image (C(nvcr.io/nvidia/cuda), the NGC PyTorch and TensorFlow images,
    C(tritonserver), C(pytorch/pytorch), C(tensorflow/tensorflow:*-gpu), ...) or sets C(NVIDIA_VISIBLE_DEVICES) /
    C(CUDA_VISIBLE_DEVICES) to a value that asks for GPUs, without a C(nvidia.com/gpu) or C(nvidia.com/mig-*) limit
    on any container and without a DRA resource claim. The scheduler does not count such a pod's GPU; the NVIDIA
    runtime may show it every GPU of the node, or none. The GPU stack's own images (device plugin, DCGM, GPU
    Operator operands) are not workloads."
  - Names each node where the device plugin (allocatable C(nvidia.com/gpu)) and the DRA driver (ResourceSlices of
    driver C(gpu.nvidia.com)) both serve GPUs, so one GPU can be handed out twice.
  - Each finding has the fix. Reads only. C(deploy/admission/) in the collection keeps new
    pods labelled C(gpuops.nvidia/cuda-workload=true) from arriving without a limit.
author: gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.k8s_auth
attributes:
  check_mode:
    support: full
    details: Reads and judges as usual (it changes nothing).
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  namespaces:
    description: Judge only the pods of these namespaces; all namespaces when empty.
    type: list
    elements: str
    default: []
notes:
  - The connection options and their C(K8S_AUTH_*) environment variables are those of kubernetes.core; set them
    once for every Kubernetes module of this collection with C(module_defaults) and C(group/gpuops.nvidia.k8s).
seealso:
  - module: gpuops.nvidia.gpu_fleet_report
  - module: gpuops.nvidia.gpu_memory_leak_report
"""

EXAMPLES = r"""
- name: CUDA pods without a GPU limit, and nodes served twice
  gpuops.nvidia.gpu_workload_report:
    namespaces: [ml, serving]
  delegate_to: localhost
  run_once: true
  register: gpuops_workloads
"""

RETURN = r"""
pods:
  description: The CUDA pods without a GPU limit, those Running on a node first.
  returned: always
  type: list
  elements: dict
  sample: [{namespace: ml, pod: trainer-7f9c8d-abcde, node: gpu-node-02, phase: Running,
            owner: ReplicaSet/trainer-7f9c8d, containers: [pytorch], case: 2, severity: error,
            reasons: [{container: pytorch, why: image, image: "nvcr.io/nvidia/pytorch:24.05-py3"}],
            message: "pod ml/trainer-7f9c8d-abcde on gpu-node-02 has no nvidia.com/gpu (or nvidia.com/mig-*) limit ...",
            remedy: "set resources.limits[\"nvidia.com/gpu\"] ..."}]
nodes:
  description: The nodes where the device plugin and the DRA driver both serve GPUs.
  returned: always
  type: list
  elements: dict
  sample: [{node: gpu-node-07, device_plugin_gpus: "8", dra_devices: 8, case: 2, severity: error,
            message: "gpu-node-07: the device plugin advertises nvidia.com/gpu=8 and ...", remedy: "..."}]
api:
  description: The lists read (C(lists)) and the number of list calls (C(list_calls)).
  returned: always
  type: dict
  sample: {list_calls: 3, lists: [pods, nodes, resourceslices]}
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC,
    api_client_from_module,
    api_error_message,
    list_call,
    resource_path,
    served_versions,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.gpu_workloads import (
    cuda_pods_without_gpu_limit,
    double_served_nodes,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.node_readiness import dra_api_version
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.watch import list_json

try:
    import kubernetes
except ImportError:
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()
    kubernetes = None
else:
    KUBERNETES_IMPORT_ERROR = None


def read(module, api):
    calls = [("pods", list_call(api, resource_path("v1", "pods"))), ("nodes", list_call(api, resource_path("v1", "nodes")))]
    try:
        version = dra_api_version(served_versions(api, "resource.k8s.io"))
    except Exception as error:  # ApiError, urllib3 connection and TLS errors
        module.fail_json(msg=api_error_message(error, "discover API groups"))
    if version is not None:
        calls.append(("resourceslices", list_call(api, resource_path("resource.k8s.io/" + version, "resourceslices"))))
    found = {"resourceslices": []}
    for key, call in calls:
        try:
            found[key] = list_json(call)[0]
        except Exception as error:  # ApiError, urllib3 connection and TLS errors
            module.fail_json(msg=api_error_message(error, "list %s" % key))
    return found, [key for key, _call in calls]


def main():
    module = AnsibleModule(
        argument_spec=dict(K8S_AUTH_ARG_SPEC, namespaces=dict(type="list", elements="str", default=[])),
        supports_check_mode=True,
    )
    if kubernetes is None:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR)
    api = api_client_from_module(module)
    found, lists = read(module, api)
    pods = cuda_pods_without_gpu_limit(found["pods"], namespaces=module.params["namespaces"])
    nodes = double_served_nodes(found["nodes"], found["resourceslices"])
    module.exit_json(changed=False, pods=pods, nodes=nodes, api={"list_calls": len(lists), "lists": lists})


if __name__ == "__main__":
    main()
