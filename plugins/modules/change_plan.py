#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: change_plan
short_description: Validate a change's inputs and plan its batches from the cluster's state
version_added: 0.1.0
description:
  - The plan step of the C(gpuops.nvidia.change) runbook, the engine every risky operation of the risk table goes
    through (docs/change_engine.md). Reads the cluster (nodes, the kured lock DaemonSet, and for a kind that drains,
    pods and PodDisruptionBudgets) and changes nothing.
  - Every input the engine reads is validated first, before the cluster is read, and all problems are reported in
    one failure naming each option (the same checks as P(gpuops.nvidia.driver_upgrade_plan#module)'s).
  - The change's identity (C(change_id)) is its kind and a hash of its inputs; each node's record of the kind (the
    C(gpuops.nvidia/change-<kind>) annotation) for that id says what a run does with the node (V(skip) when done or
    when the node already shows the change, V(continue) when a stopped run left it mid-way, V(start)), and a node a
    run of this change failed blocks. Another change or a driver roll-out in progress on a target blocks, so does,
    for a kind that takes nodes out, a target already cordoned or NotReady by someone else.
  - The batches are the kind's default schedule (canary first) unless O(batches) is given; nodes left mid-way go
    first.
author: gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.k8s_auth
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  kind:
    description: The change kind (the kinds table, docs/operations.md).
    type: str
    required: true
    choices: [node_labels, device_plugin_config, containerd_config, kubelet_config, mig_layout, gpu_operator_uninstall]
  inputs:
    description: The kind's inputs, with their defaults (the change's identity hashes them).
    type: dict
    default: {}
  cluster_name:
    description: The cluster's name (the runbook compares the typed confirmation with it).
    type: str
    required: true
  nodes:
    description: The target nodes (Kubernetes node names), in the order they should be done.
    type: list
    elements: str
    required: true
  batches:
    description: Batch sizes, counts or percentages of the targets; the first is the canary, the last repeats. Unset,
      the kind's default schedule.
    type: list
    elements: raw
  canary_nodes:
    description: The canary batch by node name.
    type: list
    elements: str
  max_unavailable:
    description: Most GPU nodes out at once (count or percentage); ignored by kinds that keep their nodes in service.
    type: raw
    default: 1
  max_fail_percentage:
    description: Failed nodes (percent of the targets) that stop the run.
    type: raw
    default: 0
  soak_seconds:
    description: Soak after each batch but the last, seconds or per batch kind (C(canary), C(batch)).
    type: raw
    default: 0
  maintenance_window:
    description: The window the run may act in (C(start), C(end), C(days), C(timezone)), as the driver roll-out's.
    type: dict
  spread_label:
    description: Node label of the failure domain; a batch takes at most one node per domain.
    type: str
  delete_emptydir_data:
    description: Whether the drains may delete emptyDir data (a drain's refusals are blockers otherwise).
    type: bool
    default: false
  drain_timeout:
    description: Checked only (whole seconds within a week).
    type: raw
  ready_timeout:
    description: Checked only (whole seconds within a week).
    type: raw
  budget_wait_timeout:
    description: Checked only (whole seconds within a week).
    type: raw
  lock_ttl:
    description: Checked only (whole seconds within a week).
    type: raw
  silence_seconds:
    description: Checked only (whole seconds within a week).
    type: raw
  lock_name:
    description: Checked only (a Lease name).
    type: str
  run_id:
    description: Checked only (letters, digits, C(-_.)).
    type: str
  prometheus_url:
    description: Checked only (an http(s) URL).
    type: str
  alertmanager_url:
    description: Checked only (an http(s) URL).
    type: str
  kured_daemonset:
    description: Where kured's lock DaemonSet is (its held lock on a target blocks).
    type: dict
    default: {namespace: kube-system, name: kured}
"""

EXAMPLES = r"""
- name: Plan a label change on the GPU nodes (changes nothing)
  gpuops.nvidia.change_plan:
    kind: node_labels
    inputs:
      labels:
        gpu.example.com/tier: batch
    cluster_name: gpu-prod-1
    nodes: [gpu-node-01, gpu-node-02, gpu-node-03]
  delegate_to: localhost
  register: gpuops_plan
"""

RETURN = r"""
plan:
  description: The plan.
  returned: success
  type: dict
  contains:
    kind:
      description: The change kind.
      type: str
    change_id:
      description: The change's identity (kind and a hash of the inputs); the nodes' records carry it.
      type: str
      sample: node-labels-3f2a9c01b7de
    change_kind:
      description: The kind's row of the risk table (C(impact), C(disruption), C(batches), C(rollback), C(two_person)).
      type: dict
    inputs:
      description: The inputs as planned.
      type: dict
    batches:
      description: The batches, canary first (C(index), C(kind), C(nodes)).
      type: list
      elements: dict
    nodes:
      description: Per target node its C(action) (V(start), V(continue), V(skip), V(failed)), C(record) and C(labels).
      type: dict
    skipped:
      description: The targets with nothing to do and why.
      type: list
      elements: dict
    blockers:
      description: What refuses the run (C(node), C(reason)).
      type: list
      elements: dict
    max_unavailable:
      description: The budget in nodes (all GPU nodes for a kind that keeps its nodes in service).
      type: int
    unavailable_now:
      description: GPU nodes out now and why.
      type: dict
    pdb_waits:
      description: For a kind that drains, disruption budgets that would hold a drain back now.
      type: list
      elements: dict
    window_open:
      description: Whether the maintenance window is open now.
      type: bool
invalid:
  description: On refused inputs, each C(option) and C(message).
  returned: failure
  type: list
  elements: dict
"""

import datetime

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC, api_client_from_module, api_error_message, list_call, request_json, resource_path, status_of)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.watch import list_json
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout import change as engine
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout import plan as planner
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout.change_kinds import KINDS

REQUIRED = ("cluster_name", "nodes")


def read_kured(module, api):
    location = module.params["kured_daemonset"] or {}
    try:
        return [request_json(api, "GET", resource_path("apps/v1", "daemonsets", location.get("name", "kured"),
                                                       location.get("namespace", "kube-system")))]
    except Exception as error:
        if status_of(error)[0] != 404:
            module.fail_json(msg=api_error_message(error, "read the kured DaemonSet"))
    return []


def main():
    module = AnsibleModule(argument_spec=dict(
        K8S_AUTH_ARG_SPEC,
        kind=dict(type="str", required=True, choices=sorted(KINDS)),
        inputs=dict(type="dict", default={}),
        cluster_name=dict(type="str", required=True),
        nodes=dict(type="list", elements="str", required=True),
        batches=dict(type="list", elements="raw"),
        canary_nodes=dict(type="list", elements="str"),
        max_unavailable=dict(type="raw", default=1),
        max_fail_percentage=dict(type="raw", default=0),
        soak_seconds=dict(type="raw", default=0),
        maintenance_window=dict(type="dict"),
        spread_label=dict(type="str"),
        delete_emptydir_data=dict(type="bool", default=False),
        drain_timeout=dict(type="raw"),
        ready_timeout=dict(type="raw"),
        budget_wait_timeout=dict(type="raw"),
        lock_ttl=dict(type="raw"),
        silence_seconds=dict(type="raw"),
        lock_name=dict(type="str"),
        run_id=dict(type="str"),
        prometheus_url=dict(type="str"),
        alertmanager_url=dict(type="str"),
        kured_daemonset=dict(type="dict", default={"namespace": "kube-system", "name": "kured"}),
    ), supports_check_mode=True)
    params = module.params
    planner.refuse_invalid(module, planner.validate_inputs(params, required=REQUIRED))
    api = api_client_from_module(module)
    try:
        nodes = list_json(list_call(api, resource_path("v1", "nodes")))[0]
    except Exception as error:
        module.fail_json(msg=api_error_message(error, "list nodes"))
    known = [node["metadata"]["name"] for node in nodes]
    planner.refuse_invalid(module, planner.unknown_node_errors(params["nodes"], known))
    plan = engine.build_change_plan(params["kind"], params["inputs"], params["nodes"], nodes, params["batches"],
                                    params["canary_nodes"], params["max_unavailable"], params["spread_label"],
                                    read_kured(module, api))
    plan["pdb_waits"] = []
    if plan["change_kind"]["disruption"] == "drain":
        try:
            pods = list_json(list_call(api, resource_path("v1", "pods")))[0]
            pdbs = list_json(list_call(api, resource_path("policy/v1", "poddisruptionbudgets")))[0]
        except Exception as error:
            module.fail_json(msg=api_error_message(error, "list pods and PodDisruptionBudgets"))
        to_do = [name for name in params["nodes"] if plan["nodes"][name]["action"] != "skip"]
        preview = planner.drain_preview(to_do, pods, pdbs, params["delete_emptydir_data"])
        plan["blockers"].extend(preview["blockers"])
        plan["pdb_waits"] = preview["pdb_waits"]
    plan["window_open"] = planner.in_maintenance_window(
        params["maintenance_window"], datetime.datetime.now(datetime.timezone.utc))
    module.exit_json(changed=False, plan=plan)


if __name__ == "__main__":
    main()
