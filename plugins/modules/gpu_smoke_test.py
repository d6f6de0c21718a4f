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

import re
import time
import uuid

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC, api_client_from_module, api_error_message, request, request_json, resource_path, status_of)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.watch import watch_events

GPU_LINE = re.compile(r"^GPU [0-9]+: ", re.MULTILINE)


def pod_manifest(name, params, gpus):
    container = {"name": "smoke", "image": params["image"], "command": list(params["command"]),
                 "resources": {"limits": {params["resource"]: str(gpus)}}}
    spec = {"nodeName": params["node"], "restartPolicy": "Never", "containers": [container],
            "tolerations": [{"operator": "Exists"}]}
    if params["runtime_class"]:
        spec["runtimeClassName"] = params["runtime_class"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": params["namespace"],
                         "labels": {"app.kubernetes.io/managed-by": "gpuops.nvidia",
                                    "gpuops.nvidia/smoke-test": params["node"]}},
            "spec": spec}


def wait_finished(api, name, namespace, timeout):
    """The pod's final phase, watched (no polling); the last phase seen on timeout."""
    phase = "Pending"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = request(api, "GET", resource_path("v1", "pods", namespace=namespace), stream=True,
                           query=dict(watch=True, field_selector="metadata.name=%s" % name,
                                      timeout_seconds=max(1, int(deadline - time.monotonic()))))
        try:
            for dummy, obj in watch_events(response):
                phase = (obj.get("status") or {}).get("phase") or phase
                if phase in ("Succeeded", "Failed"):
                    return phase
        finally:
            response.release_conn()
    return phase


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
        request(api, "POST", resource_path("v1", "pods", namespace=params["namespace"]),
                body=pod_manifest(name, params, gpus))
    except Exception as error:
        module.fail_json(msg=api_error_message(error, "create the smoke-test pod on %s" % params["node"]))
    log, problems = "", []
    try:
        phase = wait_finished(api, name, params["namespace"], params["timeout"])
        try:
            log = request(api, "GET", resource_path("v1", "pods", name, params["namespace"], "log")).data.decode(
                "utf-8", "replace")
        except Exception as error:
            problems.append(api_error_message(error, "read the log of pod %s" % name))
    finally:
        try:
            request(api, "DELETE", resource_path("v1", "pods", name, params["namespace"]),
                    query=dict(grace_period_seconds=0))
        except Exception as error:
            if status_of(error)[0] != 404:   # gone already is fine; anything else leaves a pod behind: say so
                module.warn(api_error_message(error, "delete the smoke-test pod %s/%s" % (params["namespace"], name)))
    if problems:
        module.fail_json(msg="; ".join(problems), pod=name, phase=phase)
    listed = [line for line in log.splitlines() if GPU_LINE.match(line)]
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
