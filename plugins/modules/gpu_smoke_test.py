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
    description: The node.
    type: str
    required: true
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
"""

RETURN = r"""
pod:
  description: Name of the pod that ran.
  returned: always
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
"""

import time
import uuid

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC, api_client_from_module, api_error_message, request_json, resource_path)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.smoke_pod import SmokePodError, listed_gpus, run_smoke_pod


def main():
    argument_spec = dict(
        K8S_AUTH_ARG_SPEC,
        node=dict(type="str", required=True),
        gpus=dict(type="int", default=0),
        resource=dict(type="str", default="nvidia.com/gpu"),
        namespace=dict(type="str", default="default"),
        image=dict(type="str", default="nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04"),
        command=dict(type="list", elements="str", default=["nvidia-smi", "-L"]),
        runtime_class=dict(type="str"),
        timeout=dict(type="int", default=180),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    params = module.params
    api = api_client_from_module(module)
    started = time.monotonic()
    gpus = params["gpus"]
    if gpus <= 0:
        try:
            node = request_json(api, "GET", resource_path("v1", "nodes", params["node"]))
            allocatable = (node.get("status") or {}).get("allocatable") or {}
        except Exception as error:
            module.fail_json(msg=api_error_message(error, "read node %s" % params["node"]))
        gpus = int(allocatable.get(params["resource"], "0"))
        if gpus <= 0:
            module.fail_json(msg="%s has no allocatable %s: nothing to test" % (params["node"], params["resource"]))
    name = "gpuops-smoke-%s" % uuid.uuid4().hex[:8]
    if module.check_mode:
        module.exit_json(changed=False, pod=name, elapsed=0.0)
    try:
        phase, log = run_smoke_pod(api, name, params, gpus, module.warn)
    except SmokePodError as error:
        module.fail_json(msg=str(error), **({} if error.phase is None else dict(pod=name, phase=error.phase)))
    listed = listed_gpus(log)
    # the pod is gone again: the test leaves nothing changed, so a re-run of a runbook reports no change
    result = dict(changed=False, pod=name, phase=phase, gpus_listed=listed, log=log,
                  elapsed=round(time.monotonic() - started, 1))
    if phase != "Succeeded":
        module.fail_json(msg="smoke-test pod on %s ended %s: %s" % (params["node"], phase, log.strip()[-500:]),
                         **result)
    if len(listed) != gpus:
        module.fail_json(msg="smoke-test pod on %s listed %d GPU(s), %d expected" % (
            params["node"], len(listed), gpus), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
