#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: operator_node_hold
short_description: Hold GPU nodes back from the GPU Operator's driver upgrade, and let them go batch by batch
version_added: 0.1.0
description:
  - Paces the GPU Operator's upgrade controller with its own mechanism, the node label
    C(nvidia.com/gpu-driver-upgrade.skip=true) (a node in C(upgrade-required) that carries it is never moved on).
    Each node this module holds is marked with the annotation C(gpuops.nvidia/operator-hold) (the target version and
    the run), so that only our own skip labels are ever removed and a later run of the same roll-out (a resume)
    knows the Operator's upgrade on the node is ours.
  - V(held) sets the skip label and the mark; V(released) removes the skip label (the mark stays, the node's upgrade
    is ours) and, with O(keep_cordoned), sets the controller's
    C(nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable=true) so that it leaves the node cordoned
    when it is done (the runbook's gates decide when the node is given back); V(absent) removes everything our
    hold set. Nodes held by someone else are never released (their skip label stays).
  - One strategic merge patch per node, conditional on its resourceVersion (re-read and retried on a conflict).
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
  nodes:
    description: The nodes (Kubernetes node names).
    type: list
    elements: str
    required: true
  state:
    description: V(held), V(released) or V(absent) (see the description).
    type: str
    choices: [held, released, absent]
    required: true
  version:
    description: The target driver version of the roll-out that holds the nodes.
    type: str
    required: true
  run_id:
    description: The run that sets the hold (kept in the mark; a resumed roll-out keeps the first run's).
    type: str
    default: ""
  keep_cordoned:
    description: With O(state=released), have the upgrade controller leave the node cordoned when it is done.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Hold every target before the version is raised
  gpuops.nvidia.operator_node_hold:
    nodes: "{{ gpuops_plan.plan.nodes.keys() | list }}"
    state: held
    version: 615.71.09
    run_id: "{{ gpuops_run_id }}"

- name: Let the canary go (the runbook drained it)
  gpuops.nvidia.operator_node_hold:
    nodes: [gpu-node-01]
    state: released
    version: 615.71.09
    keep_cordoned: true

- name: The roll-out completed - remove every label and annotation the holds set
  gpuops.nvidia.operator_node_hold:
    nodes: "{{ gpuops_plan.plan.nodes.keys() | list }}"
    state: absent
    version: 615.71.09
"""

RETURN = r"""
changed_nodes:
  description: The nodes that were (or in check mode would be) patched.
  returned: success
  type: list
  elements: str
not_held:
  description: With O(state=released), nodes this roll-out does not hold (left as they are).
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import gpu_operator as operator
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC, NodeApi, api_client_from_module, api_error_message, status_of)

CONFLICT_RETRIES = 3


def node_patch(node, params):
    """(patch, held by us) for one node."""
    if params["state"] == "held":
        return operator.hold_patch(node, params["version"], params["run_id"]), True
    if params["state"] == "released":
        patch = operator.release_patch(node, params["version"], params["keep_cordoned"])
        return patch or {}, patch is not None
    return operator.clear_patch(node, params["version"]), True


def main():
    argument_spec = dict(
        K8S_AUTH_ARG_SPEC,
        nodes=dict(type="list", elements="str", required=True),
        state=dict(type="str", required=True, choices=["held", "released", "absent"]),
        version=dict(type="str", required=True),
        run_id=dict(type="str", default=""),
        keep_cordoned=dict(type="bool", default=False),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    params = module.params
    nodes = NodeApi(api_client_from_module(module))
    changed_nodes, not_held, diffs = [], [], []
    for name in params["nodes"]:
        for attempt in range(CONFLICT_RETRIES):
            try:
                node = nodes.read_node(name)
            except Exception as error:
                module.fail_json(msg=api_error_message(error, "read node %s" % name))
            patch, ours = node_patch(node, params)
            if not ours:
                not_held.append(name)
            if not patch:
                break
            if module.check_mode:
                changed_nodes.append(name)
                break
            body = {"metadata": dict(patch["metadata"], resourceVersion=node["metadata"].get("resourceVersion"))}
            try:
                nodes.patch_node(name, body)
                changed_nodes.append(name)
                break
            except Exception as error:
                if status_of(error)[0] != 409 or attempt == CONFLICT_RETRIES - 1:
                    module.fail_json(msg=api_error_message(error, "label node %s" % name), changed_nodes=changed_nodes)
        if patch:
            diffs.append({"before_header": name, "after_header": name, "before": "", "after": str(patch) + "\n"})
    result = dict(changed=bool(changed_nodes), changed_nodes=changed_nodes, not_held=sorted(set(not_held)))
    if module._diff:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
