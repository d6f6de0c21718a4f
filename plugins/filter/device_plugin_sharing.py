# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: device_plugin_sharing
short_description: What one named config of the NVIDIA device plugin shares, and what a node then advertises
version_added: 0.1.0
description:
  - Reads one config of the NVIDIA device plugin's ConfigMap (the value of one key, the config a node's
    C(nvidia.com/device-plugin.config) label names) and says how it shares whole GPUs - the strategy
    (V(time-slicing), V(mps) or V(none)), the replicas per GPU, the resource name the plugin advertises them under
    (C(nvidia.com/gpu), or C(nvidia.com/gpu.shared) with C(renameByDefault), or the resource's own C(rename)).
  - With O(gpu_count), also what a node with that many GPUs must then show - the resource and its count (GPUs
    times replicas) and GPU Feature Discovery's C(nvidia.com/gpu.replicas) and C(nvidia.com/gpu.sharing-strategy)
    labels.
  - Fails on a config the plugin would refuse (not YAML, not version v1, replicas below 1).
author: gpuops.nvidia contributors (@gpuops)
options:
  _input:
    description: The config, as the ConfigMap holds it (YAML text) or already parsed.
    type: raw
    required: true
  gpu_count:
    description: The node's GPUs (its C(nvidia.com/gpu.count) label).
    type: int
"""

EXAMPLES = r"""
- name: What the config ts-4 of the plugin's ConfigMap shares, on a node of 8 GPUs
  ansible.builtin.set_fact:
    sharing: "{{ configmap.data['ts-4'] | gpuops.nvidia.device_plugin_sharing(gpu_count=8) }}"
  # sharing.expected: {resource: nvidia.com/gpu, count: 32, labels: {nvidia.com/gpu.replicas: '4', ...}}
"""

RETURN = r"""
_value:
  description: The sharing.
  type: dict
  contains:
    strategy:
      description: V(time-slicing), V(mps) or V(none).
      type: str
    replicas:
      description: Replicas per GPU (1 without sharing).
      type: int
    resource:
      description: The extended resource the plugin advertises the GPUs (or their replicas) under.
      type: str
    renamed:
      description: The replicas are advertised under another name than C(nvidia.com/gpu).
      type: bool
    expected:
      description: With O(gpu_count), what the node must show - C(resource), C(count) and GFD's C(labels).
      type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.device_plugin_config import (
    ConfigError,
    config_sharing,
    expected_node,
)

try:
    import yaml
except ImportError:  # pragma: no cover - PyYAML comes with ansible-core
    yaml = None


def device_plugin_sharing(config, gpu_count=None):
    if isinstance(config, str):
        if yaml is None:
            raise AnsibleFilterError("device_plugin_sharing needs PyYAML to read a config given as text")
        try:
            config = yaml.safe_load(config)
        except yaml.YAMLError as error:
            raise AnsibleFilterError("the device plugin config is not YAML: %s" % to_native(error))
    try:
        sharing = config_sharing(config)
    except ConfigError as error:
        raise AnsibleFilterError("the device plugin would refuse this config: %s" % to_native(error))
    if gpu_count is not None:
        sharing["expected"] = expected_node(sharing, int(gpu_count))
    return sharing


class FilterModule:
    def filters(self):
        return {"device_plugin_sharing": device_plugin_sharing}
