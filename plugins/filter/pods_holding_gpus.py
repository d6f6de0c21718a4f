# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: pods_holding_gpus
short_description: The pods that hold NVIDIA GPUs, from Pod JSON
version_added: 0.1.0
description:
  - Of a list of Pod objects (as C(kubernetes.core.k8s_info) returns them), the C(namespace/name) of those still
    alive (not Succeeded or Failed) whose containers limit or request an C(nvidia.com/*) resource.
  - A repair that must not run on a node whose GPU is in use (diagnose case 3, the version-skew reboot) reads it.
author: gpuops.nvidia contributors (@gpuops)
options:
  _input:
    description: Pod objects.
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: The pods that hold a GPU on the node
  ansible.builtin.debug:
    msg: "{{ node_pods.resources | gpuops.nvidia.pods_holding_gpus }}"
"""

RETURN = r"""
_value:
  description: C(namespace/name) of each pod holding a GPU, in the input's order.
  type: list
  elements: str
"""

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.fleet_health import pod_gpu_request


def pods_holding_gpus(pods):
    held = []
    for pod in pods or []:
        metadata = pod.get("metadata") or {}
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or not any(
                count for count in pod_gpu_request(pod).values()):
            continue
        held.append("%s/%s" % (metadata.get("namespace"), metadata.get("name")))
    return held


class FilterModule:
    def filters(self):
        return {"pods_holding_gpus": pods_holding_gpus}
