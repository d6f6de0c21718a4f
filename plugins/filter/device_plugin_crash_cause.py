# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: device_plugin_crash_cause
short_description: Why the NVIDIA device plugin crash-loops, from its log
version_added: 0.1.0
description:
  - Reads the last lines of the NVIDIA device plugin's log (C(kubectl logs --previous)) and names the cause the
    runbook's case 3 repairs - V(version_skew) (NVML says the driver and its library differ),
    V(stale_socket) (the plugin's socket under C(/var/lib/kubelet/device-plugins) is in use),
    V(kubelet_not_registering) (the kubelet's registration socket refuses or times out),
    V(mig_strategy_mismatch) (the node's MIG layout does not fit the plugin's MIG strategy),
    V(nvml_unavailable) (no driver or NVML library) or V(unknown).
  - The most recent line with a known message decides.
author: gpuops.nvidia contributors (@gpuops)
options:
  _input:
    description: The plugin container's log text.
    type: str
    required: true
  tail:
    description: How many of the last lines are read; V(0) reads all.
    type: int
    default: 50
"""

EXAMPLES = r"""
- name: Name the cause of the crash loop
  ansible.builtin.debug:
    msg: "{{ (plugin_log.log | default('')) | gpuops.nvidia.device_plugin_crash_cause }}"
"""

RETURN = r"""
_value:
  description: The cause and its proof.
  type: dict
  contains:
    cause:
      description: One of the causes above.
      type: str
    line:
      description: The log line that decided (the last line when none matched).
      type: str
    repair:
      description: What the runbook does about it.
      type: str
    socket:
      description: The socket the line names (stale plugin socket or the kubelet's), if any.
      type: str
    mig_strategy:
      description: The MIG strategy the plugin's log says it runs with, if it says.
      type: str
"""

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.device_plugin_logs import crash_cause


def device_plugin_crash_cause(text, tail=50):
    return crash_cause(text, tail=tail)


class FilterModule:
    def filters(self):
        return {"device_plugin_crash_cause": device_plugin_crash_cause}
