#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: driver_upgrade_plan
short_description: Validate a driver roll-out's inputs and plan its batches from the cluster's state
version_added: 0.1.0
description:
  - The first step of the C(gpuops.nvidia.driver_upgrade) runbook. Reads the cluster (nodes, the kured
    lock DaemonSet, pods matching O(wait_for_pods_selector)) and changes nothing.
  - Every input is validated first, before the cluster is read, and B(all) problems are reported in one failure,
    each naming its option with the value and what would do (malformed version, a batch list that is not counts
    or percentages, unknown nodes, names with shell metacharacters, a bad window, a selector the API server would
    refuse, a timeout that is not whole seconds within a week, digits other than 0-9). It also checks the inputs
    only later steps of the runbook read (O(drain_timeout), O(prometheus_url), O(pre_node_tasks), ...), so the
    runbook refuses them before the lock, any record or any cordon. No input makes it fail with a traceback.
  - The plan has the canary first, then batches of the remaining nodes in the given order (optionally spread
    over failure domains), each node's current and target version and what a run would do with it (start,
    continue or verify after an interruption, skip when already at the target), and what blocks - nodes already
    cordoned or NotReady by someone else, nodes a previous run failed, the GPU Operator's own upgrade in
    progress, a held kured lock, pods a drain would refuse (emptyDir, unreplicated); and what the drains will
    wait for (PodDisruptionBudgets allowing too few disruptions now, pods matching O(wait_for_pods_selector)).
  - The budget (O(max_unavailable)) counts every GPU node that is cordoned or NotReady, whoever did it.
  - It also reads the GPU Operator's ClusterPolicies and NVIDIADriver custom resources (absent CRDs are fine) to
    tell who owns each target's driver, and resolves O(install_method). In GPU Operator mode the plan names the
    resource whose version the roll-out raises (current and previous version, C(autoUpgrade), the Helm values
    change when a Helm release renders it), and blocks when that version would also reach nodes that are not
    targets, or a target carries the upgrade controller's skip label set by someone else. The Operator's upgrade
    in progress on a target blocks unless a roll-out of ours to the same version started it (a resume); a node a
    previous run failed is retried there rather than blocked (the driver pod is retried, nothing on the host
    changed).
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
  driver_version:
    description: The target driver version, in full (for example V(615.71.09)).
    type: str
    required: true
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
    description:
      - Batch sizes, counts or percentages of all targets (rounded up). The first entry is the canary; the last
        entry repeats until every node is planned.
    type: list
    elements: raw
    default: [1, "25%"]
  canary_nodes:
    description: The canary batch by name; default the first O(batches[0]) nodes of O(nodes).
    type: list
    elements: str
  max_unavailable:
    description:
      - The most GPU nodes that may be out at once (a count or a percentage of the cluster's GPU nodes, rounded
        down but at least 1). Cordoned and NotReady GPU nodes count, whoever made them so.
    type: raw
    default: 1
  max_fail_percentage:
    description: Checked here only for its range (0-100, digits 0-9); the runbook applies it.
    type: raw
    default: 0
  soak_seconds:
    description: Checked here only for its shape (seconds, or a mapping with C(canary) and C(batch)).
    type: raw
    default: 0
  maintenance_window:
    description:
      - C(days) (mon..sun), C(start) and C(end) (HH:MM, 24 h; an end before the start runs over midnight) and
        C(timezone) (IANA name, default UTC). The plan says whether the window is open now.
    type: dict
  spread_label:
    description: A node label naming failure domains; no batch takes two nodes of one domain while another has
      nodes left.
    type: str
  wait_for_pods_selector:
    description: A label selector of pods (for example training jobs) the drain waits for; the plan lists those
      running on the targets.
    type: str
  loaded_versions:
    description: Node name to the driver version loaded now (from M(gpuops.nvidia.nvidia_driver_facts)); nodes
      not listed are read from GPU Feature Discovery's C(nvidia.com/cuda.driver-version.full) label.
    type: dict
    default: {}
  kured_daemonset:
    description: Namespace and name of kured's DaemonSet, whose lock annotation is read (absent is fine).
    type: dict
    default: {namespace: kube-system, name: kured}
  install_method:
    description:
      - How the driver gets onto the nodes. V(auto) is V(operator) where the GPU Operator runs the targets' driver,
        else V(runfile). A host method (V(runfile), V(package)) on an Operator-managed node, V(operator) on a node
        the Operator does not manage, and a mix of both under V(auto) are blockers with the reason.
    type: str
    choices: [auto, operator, runfile, package]
    default: auto
  delete_emptydir_data:
    description: Whether the drains may evict pods with emptyDir volumes (as O(gpuops.nvidia.node_drain#module:delete_emptydir_data));
      without it such pods are blockers of the plan.
    type: bool
    default: false
  validator_pod_selector:
    description: Checked here only (a label selector); the GPU Operator mode's validator pods.
    type: str
  drain_timeout:
    description: Checked here only (whole seconds, 1 to a week); each drain's timeout.
    type: raw
  reboot_timeout:
    description: Checked here only (whole seconds, 1 to a week); each reboot's timeout.
    type: raw
  ready_timeout:
    description: Checked here only (whole seconds, 1 to a week); how long a node may take to be back as a GPU node.
    type: raw
  wait_for_pods_timeout:
    description: Checked here only (whole seconds, 1 to a week); how long a node waits for the pods of
      O(wait_for_pods_selector).
    type: raw
  budget_wait_timeout:
    description: Checked here only (whole seconds, 0 to a week); how long a batch waits for the budget.
    type: raw
  lock_ttl:
    description: Checked here only (whole seconds, 1 to a week); the roll-out lock's ttl.
    type: raw
  silence_seconds:
    description: Checked here only (whole seconds, 1 to a week); how long an Alertmanager silence lasts at most.
    type: raw
  lock_name:
    description: Checked here only (a Lease name); the roll-out lock.
    type: str
  run_id:
    description: Checked here only (letters, digits, V(-), V(_), V(.), at most 63); the run's name in records.
    type: str
  prometheus_url:
    description: Checked here only (an http or https URL); the soak gate's Prometheus.
    type: str
  alertmanager_url:
    description: Checked here only (an http or https URL); where the nodes' alerts are silenced.
    type: str
  pre_node_tasks:
    description: Checked here only (paths of task files ending in C(.yml) or C(.yaml), no templating); run before
      each node's maintenance.
    type: raw
  post_node_tasks:
    description: Checked here only (as O(pre_node_tasks)); run after each node's verification.
    type: raw
"""

EXAMPLES = r"""
- name: Plan the roll-out to 615.71.09
  gpuops.nvidia.driver_upgrade_plan:
    kubeconfig: ~/.kube/config
    driver_version: 615.71.09
    cluster_name: prod-east
    nodes: "{{ groups['gpu_nodes'] }}"
    batches: [1, "25%"]
    max_unavailable: 2
  register: plan

- name: Show the batches
  ansible.builtin.debug:
    msg: "{{ plan.plan.batches | map(attribute='nodes') | list }}"
"""

RETURN = r"""
errors:
  description: When the inputs are refused, one line per problem, the option's name first.
  returned: failure
  type: list
  elements: str
  sample: ["batches: entries must be counts >= 1 or percentages such as '25%' (digits 0-9): 0"]
invalid:
  description: When the inputs are refused, each problem as C(option) and C(message) (a runbook names its own
    variable for the option).
  returned: failure
  type: list
  elements: dict
  sample: [{option: drain_timeout, message: "must be whole seconds from 1 to 604800 (digits 0-9), not -5"}]
plan:
  description: The plan.
  returned: success
  type: dict
  contains:
    target_version:
      description: The target version.
      type: str
      returned: always
    batches:
      description: Batches in order, the canary first; each with C(index), C(kind) (C(canary) or C(batch)) and
        C(nodes).
      type: list
      elements: dict
      returned: always
      sample: [{index: 1, kind: canary, nodes: [gpu-node-01]}, {index: 2, kind: batch, nodes: [gpu-node-02, gpu-node-03]}]
    nodes:
      description: Per node, C(current_version), C(action) (start, continue, reboot, verify, skip, failed) and
        C(record) (the node's C(gpuops.nvidia/driver-upgrade) annotation, or null), and C(mig) (C(strategy), the
        C(nvidia.com/mig.strategy) label, and C(config), the MIG Manager's C(nvidia.com/mig.config) label; null
        when absent), and C(mid_maintenance) (the record's state is C(planned), C(draining), C(installing),
        C(rebooting) or C(verifying), so the node is mid-way through an upgrade).
      type: dict
      returned: always
    skipped:
      description: Nodes already at the target, with the reason.
      type: list
      elements: dict
      returned: always
    blockers:
      description: What blocks the roll-out, each with C(node) and C(reason). The runbook refuses to act while
        this is not empty.
      type: list
      elements: dict
      returned: always
    max_unavailable:
      description: The budget in nodes.
      type: int
      returned: always
    unavailable_now:
      description: GPU nodes out now (cordoned or NotReady) and why.
      type: dict
      returned: always
    pdb_waits:
      description: Disruption budgets that would hold a drain back now (C(node), C(pdb), C(disruptions_allowed),
        C(pods)); the drain waits for them up to its timeout.
      type: list
      elements: dict
      returned: always
    wait_for_pods:
      description: Pods matching O(wait_for_pods_selector) on the target nodes (C(namespace), C(name), C(node)).
      type: list
      elements: dict
      returned: always
    window_open:
      description: Whether the maintenance window is open now (true without a window).
      type: bool
      returned: always
    install:
      description:
        - C(requested) and resolved C(method) (V(operator), V(runfile) or V(package)), C(reason) (who owns the
          drivers here), and in GPU Operator mode C(sources), the custom resources whose version reaches the
          targets (C(kind), C(name), C(field), C(version), C(previous_version), C(auto_upgrade), C(helm),
          C(driver_pod_selector), C(nodes)), and C(node_source), target node to the name of its source.
      type: dict
      returned: always
      sample: {requested: auto, method: operator, reason: "ClusterPolicy cluster-policy runs the driver (spec.driver.enabled)",
               sources: [{kind: ClusterPolicy, name: cluster-policy, field: spec.driver.version, version: 595.91.07,
                          previous_version: 595.91.07, auto_upgrade: true, helm: null,
                          driver_pod_selector: app=nvidia-driver-daemonset, nodes: [gpu-node-01]}],
               node_source: {gpu-node-01: cluster-policy}}
"""

import datetime

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC, api_client_from_module, api_error_message, list_call, request_json, resource_path, status_of)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import gpu_operator as operator
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout import plan as planner
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.watch import list_json


def read_cluster(module, api):
    """Nodes, kured's DaemonSet (or none) and the pods to wait for, as plain JSON-like dicts."""
    pods_call = list_call(api, resource_path("v1", "pods"))
    params = module.params
    try:
        nodes = list_json(list_call(api, resource_path("v1", "nodes")))[0]
    except Exception as error:
        module.fail_json(msg=api_error_message(error, "list nodes"))
    kured = []
    location = params["kured_daemonset"] or {}
    try:
        kured = [request_json(api, "GET", resource_path("apps/v1", "daemonsets", location.get("name", "kured"),
                                                        location.get("namespace", "kube-system")))]
    except Exception as error:
        if status_of(error)[0] != 404:
            module.fail_json(msg=api_error_message(error, "read the kured DaemonSet"))
    try:
        pods = list_json(pods_call)[0]
        pdbs = list_json(list_call(api, resource_path("policy/v1", "poddisruptionbudgets")))[0]
    except Exception as error:
        module.fail_json(msg=api_error_message(error, "list pods and PodDisruptionBudgets"))
    waiting = []
    if params["wait_for_pods_selector"]:
        try:
            selected = list_json(pods_call, label_selector=params["wait_for_pods_selector"])[0]
        except Exception as error:
            module.fail_json(msg=api_error_message(error, "list pods matching %s" % params["wait_for_pods_selector"]))
        targets = set(params["nodes"])
        waiting = [{"namespace": pod["metadata"].get("namespace"), "name": pod["metadata"]["name"],
                    "node": pod["spec"].get("nodeName")}
                   for pod in selected if pod["spec"].get("nodeName") in targets
                   and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    return nodes, kured, waiting, pods, pdbs


def read_operator_resources(module, api):
    """The GPU Operator's ClusterPolicies and NVIDIADrivers ([] where the CRD is not served)."""
    found = []
    for resource in (operator.CLUSTER_POLICY, operator.NVIDIA_DRIVER):
        try:
            items = list_json(list_call(api, resource_path("%s/%s" % (resource["group"], resource["version"]),
                                                           resource["plural"])))[0]
        except Exception as error:
            if status_of(error)[0] == 404:
                items = []
            else:
                hint = (" (apply deploy/rbac/20-clusterrole.yml: the plan must know whether the GPU "
                        "Operator owns the driver)") if status_of(error)[0] == 403 else ""
                module.fail_json(msg=api_error_message(error, "list %s.%s" % (resource["plural"], resource["group"]))
                                 + hint)
        found.append([dict(item, kind=item.get("kind") or resource["kind"]) for item in items])
    return found


def install_plan(params, nodes, policies, drivers):
    """The install method and, in Operator mode, its sources and blockers."""
    detection = operator.detect(policies, drivers, nodes, params["driver_version"])
    resolved = operator.resolve_method(params["install_method"], detection, params["nodes"])
    targets = set(params["nodes"])
    install = {"requested": params["install_method"], "method": resolved["method"], "reason": detection["reason"],
               "sources": [], "node_source": {}}
    blockers = [{"node": "install method", "reason": error} for error in resolved["errors"]]
    ours = None
    if resolved["method"] == "operator":
        install["sources"] = [source for source in detection["sources"] if targets & set(source["nodes"])]
        install["node_source"] = dict((name, source) for name, source in detection["node_source"].items()
                                      if name in targets)
        blockers.extend(operator.operator_blockers(detection, nodes, params["nodes"], params["driver_version"]))
        ours = [node["metadata"]["name"] for node in nodes
                if operator.ours_in_progress(node, params["driver_version"])]
    return install, blockers, ours


def main():
    argument_spec = dict(
        K8S_AUTH_ARG_SPEC,
        driver_version=dict(type="str", required=True),
        cluster_name=dict(type="str", required=True),
        nodes=dict(type="list", elements="str", required=True),
        batches=dict(type="list", elements="raw", default=[1, "25%"]),
        canary_nodes=dict(type="list", elements="str"),
        max_unavailable=dict(type="raw", default=1),
        max_fail_percentage=dict(type="raw", default=0),
        soak_seconds=dict(type="raw", default=0),
        maintenance_window=dict(type="dict"),
        spread_label=dict(type="str"),
        wait_for_pods_selector=dict(type="str"),
        loaded_versions=dict(type="dict", default={}),
        kured_daemonset=dict(type="dict", default={"namespace": "kube-system", "name": "kured"}),
        delete_emptydir_data=dict(type="bool", default=False),
        install_method=dict(type="str", default="auto", choices=["auto", "operator", "runfile", "package"]),
        **dict((name, dict(type="raw")) for name in planner.SECONDS_OPTIONS),
        validator_pod_selector=dict(type="str"),
        lock_name=dict(type="str"),
        run_id=dict(type="str"),
        prometheus_url=dict(type="str"),
        alertmanager_url=dict(type="str"),
        pre_node_tasks=dict(type="raw"),
        post_node_tasks=dict(type="raw"),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    params = module.params
    # the cheap checks first: a malformed input fails before the cluster is even read
    planner.refuse_invalid(module, planner.validate_inputs(params))
    api = api_client_from_module(module)
    nodes, kured, waiting, pods, pdbs = read_cluster(module, api)
    known = [node["metadata"]["name"] for node in nodes]
    planner.refuse_invalid(module, planner.unknown_node_errors(params["nodes"], known))
    policies, drivers = read_operator_resources(module, api)
    install, install_blockers, operator_ours = install_plan(params, nodes, policies, drivers)
    plan = planner.build_plan(
        params["nodes"], nodes, params["driver_version"], params["batches"], params["canary_nodes"],
        params["max_unavailable"], params["loaded_versions"], params["spread_label"], kured, operator_ours)
    plan["install"] = install
    plan["blockers"] = install_blockers + plan["blockers"]
    plan["wait_for_pods"] = waiting
    to_do = [name for name in params["nodes"] if plan["nodes"][name]["action"] != "skip"]
    preview = planner.drain_preview(to_do, pods, pdbs, params["delete_emptydir_data"])
    plan["blockers"].extend(preview["blockers"])
    plan["pdb_waits"] = preview["pdb_waits"]
    plan["window_open"] = planner.in_maintenance_window(
        params["maintenance_window"], datetime.datetime.now(datetime.timezone.utc))
    module.exit_json(changed=False, plan=plan)


if __name__ == "__main__":
    main()
