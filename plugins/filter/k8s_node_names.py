# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: k8s_node_names
short_description: Map inventory hosts to their Kubernetes node names
version_added: 0.1.0
description:
  - Returns a mapping of each inventory host to its Kubernetes node name, in the hosts' order. The node name is the
    host's C(gpuops_k8s_node_name) variable, else the inventory name.
  - The runbooks address a node by its Kubernetes name in API calls and by its inventory name over SSH.
author: gpuops.nvidia contributors (@gpuops)
options:
  _input:
    description: Inventory host names, for example C(groups['gpu_nodes']).
    type: list
    elements: str
    required: true
  hostvars:
    description: The C(hostvars) magic variable.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Kubernetes node names of the GPU nodes
  ansible.builtin.debug:
    msg: "{{ groups['gpu_nodes'] | gpuops.nvidia.k8s_node_names(hostvars) }}"
  # {"node-a.example.com": "gpu-node-01", "gpu-node-02": "gpu-node-02"}
"""

RETURN = r"""
_value:
  description: Inventory host name to Kubernetes node name, in input order.
  type: dict
"""

from ansible.errors import AnsibleFilterError


def k8s_node_names(hosts, hostvars):
    """{inventory host: Kubernetes node name} in the order of ``hosts``."""
    if not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("k8s_node_names expects a list of inventory hosts, got %r" % (hosts,))
    names = {}
    for host in hosts:
        node = (hostvars[host] if host in hostvars else {}).get("gpuops_k8s_node_name") or host
        names[host] = str(node)
    return names


class FilterModule:
    """gpuops.nvidia filters for addressing nodes."""

    def filters(self):
        return {"k8s_node_names": k8s_node_names}
