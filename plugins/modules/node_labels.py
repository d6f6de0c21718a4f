#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_labels
short_description: Set or remove labels on a batch of nodes in one process
version_added: 0.1.0
description:
  - Gives every node of O(names) the labels of O(labels) (a null value removes the label), each node with one merge
    patch conditional on its resourceVersion (re-read and retried on a conflict). A node that has them already is not
    patched.
  - The labels are checked as the API server checks them before any node is touched; a bad key or value fails the
    module naming it.
  - A node whose patch fails fails alone, in RV(nodes) and RV(failed_nodes); the module itself does not fail.
  - The C(node_labels) change kind of the C(gpuops.nvidia.change) runbook applies, verifies (check mode) and rolls
    back with it.
author: gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.k8s_auth
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
options:
  names:
    description: The nodes.
    type: list
    elements: str
    required: true
  labels:
    description: Label key to value; a null value removes the label.
    type: dict
    required: true
  workers:
    description: Nodes patched at once.
    type: int
    default: 8
"""

EXAMPLES = r"""
- name: Move two GPU nodes to the batch tier
  gpuops.nvidia.node_labels:
    names: [gpu-node-01, gpu-node-02]
    labels:
      gpu.example.com/tier: batch
      gpu.example.com/legacy: null
  delegate_to: localhost
"""

RETURN = r"""
nodes:
  description: Per node C(changed), C(failed), C(msg), C(previous) (the labels' values before, null for absent) and
    C(labels) (after).
  returned: always
  type: dict
  sample: {gpu-node-01: {changed: true, failed: false, msg: "", previous: {gpu.example.com/tier: null},
                         labels: {gpu.example.com/tier: batch}}}
failed_nodes:
  description: The nodes that could not be labelled.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.batch import run_per_node, summarize
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC, NodeApi, api_client_from_module, api_error_message, status_of)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.node_labels import (
    label_problems, labels_patch, previous_values)

CONFLICT_RETRIES = 3


def label_node(nodes, name, labels, check_mode):
    for attempt in range(CONFLICT_RETRIES):
        try:
            node = nodes.read_node(name)
        except Exception as error:
            raise ValueError(api_error_message(error, "read node %s" % name))
        previous = previous_values(node, labels)
        patch = labels_patch(node, labels)
        if not patch or check_mode:
            break
        body = {"metadata": {"labels": patch, "resourceVersion": node["metadata"].get("resourceVersion")}}
        try:
            nodes.patch_node(name, body)
            break
        except Exception as error:
            if status_of(error)[0] != 409 or attempt == CONFLICT_RETRIES - 1:
                raise ValueError(api_error_message(error, "label node %s" % name))
    after = dict((key, value) for key, value in labels.items())
    return {"changed": bool(patch), "previous": previous, "labels": after}


def main():
    module = AnsibleModule(argument_spec=dict(
        K8S_AUTH_ARG_SPEC,
        names=dict(type="list", elements="str", required=True),
        labels=dict(type="dict", required=True),
        workers=dict(type="int", default=8),
    ), supports_check_mode=True)
    params = module.params
    problems = label_problems(params["labels"])
    if problems:
        module.fail_json(msg="refused before any node was touched: " + "; ".join(problems), errors=problems)
    nodes = NodeApi(api_client_from_module(module))
    per_node = run_per_node(params["names"], lambda name: label_node(nodes, name, params["labels"],
                                                                     module.check_mode), params["workers"])
    summary = summarize(per_node)
    result = dict(changed=summary["changed"], nodes=per_node, failed_nodes=summary["failed_nodes"])
    if module._diff:
        result["diff"] = [{"before_header": name, "after_header": name, "before": {"labels": outcome["previous"]},
                           "after": {"labels": outcome["labels"]}}
                          for name, outcome in per_node.items() if outcome.get("changed")]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
