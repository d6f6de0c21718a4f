# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: kernel_module_type
short_description: The NVIDIA kernel module flavour for a node's GPUs
version_added: 0.1.0
description:
  - Resolves V(auto) to V(open) or V(proprietary) from the GPUs' PCI device ids (open for Turing and newer,
    required from Blackwell; proprietary for Volta and older; proprietary for branches before 560, which
    installed it by default), and checks an explicit flavour against them.
  - Fails when no flavour supports every GPU of the node, or the requested one does not.
author: gpuops.nvidia contributors (@gpuops)
options:
  _input:
    description: The node's PCI devices as C(nvidia_driver_facts) returns them (C(pci_devices)).
    type: list
    elements: dict
    required: true
  requested:
    description: V(auto), V(open) or V(proprietary).
    type: str
    default: auto
  driver_version:
    description: The full driver version that will be installed.
    type: str
"""

EXAMPLES = r"""
- name: Flavour for this node
  ansible.builtin.debug:
    msg: "{{ ansible_facts.nvidia_driver.pci_devices | gpuops.nvidia.kernel_module_type('auto', '580.95.05') }}"
"""

RETURN = r"""
_value:
  description: V(open) or V(proprietary).
  type: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.gpu_support import generation_of, resolve_module_type


def kernel_module_type(pci_devices, requested="auto", driver_version=None):
    generations = [generation_of(device.get("device_id")) for device in pci_devices or []
                   if str(device.get("class_id") or "").startswith("0x03")]
    decision = resolve_module_type(requested, generations, driver_version)
    if decision["error"]:
        raise AnsibleFilterError("kernel_module_type=%s: %s" % (requested, decision["error"]))
    return decision["module_type"]


class FilterModule:
    def filters(self):
        return {"kernel_module_type": kernel_module_type}
