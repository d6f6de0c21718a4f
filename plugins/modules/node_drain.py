#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_drain
short_description: Cordon, drain or uncordon a Kubernetes node with kubectl drain's rules and a cordon record
version_added: 0.1.0
description:
  - Takes a node out of service as C(kubectl drain) does, and puts it back only when this collection took it out.
  - V(cordon) marks the node unschedulable. V(drain) cordons it, then evicts its pods through the eviction API, so
    PodDisruptionBudgets are honoured. V(uncordon) makes it schedulable again.
  - The pod filters are those of C(kubectl drain), in its order. DaemonSet pods are ignored (O(ignore_daemonsets))
    and mirror (static) pods are skipped; pods with an C(emptyDir) volume need O(delete_emptydir_data); pods
    without a controller, or whose DaemonSet is gone, need O(force); finished pods are always evicted.
  - When any pod is refused the task fails before a single pod is evicted, naming every refused pod, and a cordon
    made by this task is undone.
  - All evictions run in parallel. An eviction a PodDisruptionBudget refuses (HTTP 429) is retried as soon as a
    watch on the budgets shows a disruption allowed (at the latest every 5 seconds) until the global O(timeout).
    The task then waits, on a watch of the node's pods, until every evicted pod is gone; a pod recreated under the
    same name with a new UID counts as gone.
  - When the O(timeout) passes, the task fails naming each pod left, the budgets holding it and their
    C(disruptionsAllowed). The node stays cordoned, and its C(gpuops.nvidia/cordon-reason) annotation says why.
  - Cordon bookkeeping - the first cordon records, in the node annotation C(gpuops.nvidia/cordon), when it was made
    and whether the node was already unschedulable before. V(uncordon) undoes only such a cordon of a node that was
    schedulable before; other cordoned nodes are left cordoned with a warning unless O(force).
  - Runs on the controller (C(delegate_to=localhost)) and uses the C(kubernetes) Python client.
  - With O(names), the step acts on a batch of nodes in one module process (concurrently); a node whose step fails
    fails alone, in RV(nodes), and the module itself does not fail. A batch drain evicts the pods of every node
    under one eviction budget (one PodDisruptionBudget watch, so a budget spanning the batch's nodes is spent once
    and in turn) within one O(timeout); a node whose pods may not be evicted or are left at the deadline fails
    alone, with the message and reason annotation of a drain of that node alone.
author: gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.k8s_auth
attributes:
  check_mode:
    support: full
    details: Check mode is O(dry_run=true).
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  name:
    description:
      - The node. Required unless O(names) is given.
    type: str
  names:
    description:
      - The nodes of a batch, instead of O(name). Each node's outcome is in RV(nodes). O(upgrade_record) moves every
        node's record the same way.
    type: list
    elements: str
  state:
    description:
      - V(cordon) marks the node unschedulable, V(drain) cordons it and evicts its pods, V(uncordon) makes it
        schedulable again (see O(force)).
    type: str
    choices: [cordon, drain, uncordon]
    default: drain
  ignore_daemonsets:
    description:
      - Ignore pods of existing DaemonSets (they would be recreated on the node anyway). When V(false), any such
        pod fails the drain before anything is evicted.
    type: bool
    default: true
  delete_emptydir_data:
    description:
      - Evict pods with C(emptyDir) volumes; their data is lost. When V(false), any such pod fails the drain
        before anything is evicted.
    type: bool
    default: false
  force:
    description:
      - With O(state=drain), evict pods without a controller (bare pods, which are not recreated) and pods whose
        DaemonSet no longer exists.
      - With O(state=uncordon), uncordon also a node this collection did not cordon, or that was already
        unschedulable before it cordoned it.
    type: bool
    default: false
  grace_period:
    description:
      - Seconds each pod gets to terminate, overriding its C(terminationGracePeriodSeconds). V(0) deletes at
        once. Unset, each pod's own grace period applies.
    type: int
  pod_selector:
    description:
      - Label selector (C(app=web,tier!=db)); only the node's pods it selects are drained.
    type: str
  timeout:
    description:
      - Seconds for the whole drain, evictions and waiting for the pods to be gone together.
    type: int
    default: 300
  dry_run:
    description:
      - Change nothing; report the pods that would be evicted, ignored and refused, and which
        PodDisruptionBudgets would hold which pods back now, with their C(disruptionsAllowed).
    type: bool
    default: false
  disable_eviction:
    description:
      - Delete the pods instead of evicting them. This B(bypasses PodDisruptionBudgets); use it only when a
        budget can never be met and losing the availability it protects is accepted.
    type: bool
    default: false
  reason:
    description:
      - Why the node is taken out of service, written to its C(gpuops.nvidia/cordon-reason) annotation.
      - Defaults to a text naming this module and the O(state).
    type: str
  upgrade_record:
    description:
      - Also move the node's driver roll-out record (the C(gpuops.nvidia/driver-upgrade) annotation that
        M(gpuops.nvidia.node_upgrade_record) writes, the remediation exclusions included) with this step, in the same
        task, to O(upgrade_record.state) before the step and to O(upgrade_record.state_after) once it succeeded.
        A runbook saves a task (and its cost) per record step this way; a failed step leaves the record at
        O(upgrade_record.state).
      - Not written with O(dry_run) or in check mode.
    type: dict
    suboptions:
      state:
        description: The record's state before the step (V(draining) before a drain).
        type: str
        choices: [planned, draining, installing, rebooting, verifying, done]
      state_after:
        description: The record's state once the step succeeded (V(installing) after a drain, V(done) after an uncordon).
        type: str
        choices: [draining, installing, rebooting, verifying, done]
      from_version:
        description: The driver version before the roll-out.
        type: str
      to_version:
        description: The target driver version.
        type: str
        required: true
      run_id:
        description: The roll-out run that writes the record.
        type: str
notes:
  - The connection options and their C(K8S_AUTH_*) environment variables are those of kubernetes.core; set them
    once for every Kubernetes module of this collection with C(module_defaults) and C(group/gpuops.nvidia.k8s).
seealso:
  - name: kubectl drain
    description: Safely drain a node.
    link: https://kubernetes.io/docs/tasks/administer-cluster/safely-drain-node/
  - module: gpuops.nvidia.device_plugin_restart
"""

EXAMPLES = r"""
- name: Drain a GPU node before its driver upgrade
  gpuops.nvidia.node_drain:
    name: gpu-node-07
    delete_emptydir_data: true
    timeout: 600
    reason: NVIDIA driver 580.95.05 upgrade
  delegate_to: localhost

- name: Show what a drain would evict and which PodDisruptionBudgets would hold it back
  gpuops.nvidia.node_drain:
    name: gpu-node-07
    dry_run: true
  delegate_to: localhost
  register: drain_plan

- name: Put the node back in service (only if this collection cordoned it)
  gpuops.nvidia.node_drain:
    name: gpu-node-07
    state: uncordon
  delegate_to: localhost

- name: Drain within a driver roll-out, moving the node's record from draining to installing in the same task
  gpuops.nvidia.node_drain:
    name: gpu-node-07
    upgrade_record:
      state: draining
      state_after: installing
      from_version: 595.91.07
      to_version: 615.71.09
      run_id: "{{ gpuops_run_id }}"
  delegate_to: localhost

- name: Set the connection once for every Kubernetes module of the collection
  module_defaults:
    group/gpuops.nvidia.k8s:
      kubeconfig: /etc/gpuops/kubeconfig
  block:
    - name: Cordon only
      gpuops.nvidia.node_drain:
        name: gpu-node-07
        state: cordon
      delegate_to: localhost
"""

RETURN = r"""
node:
  description: The node.
  returned: with O(name)
  type: str
  sample: gpu-node-07
unschedulable:
  description: Whether the node is (with O(dry_run), would be) cordoned when the module ends.
  returned: with O(name)
  type: bool
  sample: true
uncordoned:
  description: Whether O(state=uncordon) made the node schedulable.
  returned: when O(state=uncordon)
  type: bool
  sample: true
evicted:
  description: The pods evicted (deleted with O(disable_eviction)) and gone, as C(namespace/name).
  returned: when O(state=drain)
  type: list
  elements: str
  sample: [default/web-5c6b8-x2x7p]
pods_to_evict:
  description: The pods the drain evicts or, with O(dry_run), would evict.
  returned: when O(state=drain)
  type: list
  elements: str
  sample: [default/web-5c6b8-x2x7p]
ignored:
  description: Pods left on the node, with the reason (DaemonSet-managed, mirror pod).
  returned: when O(state=drain)
  type: list
  elements: dict
  sample: [{pod: kube-system/nvidia-device-plugin-daemonset-7xk2p, reason: DaemonSet-managed}]
refused:
  description: Pods that made the drain fail before any eviction, with the option that would allow them.
  returned: when O(state=drain)
  type: list
  elements: dict
  sample: [{pod: default/scratch, reason: "pod with local storage (emptyDir; delete_emptydir_data: true to evict
    it and lose the data)"}]
blocked:
  description:
    - Pods held back by PodDisruptionBudgets, each with the budgets (name, namespace, disruptions_allowed) and
      the last answer of the API. With O(dry_run), the pods the budgets would hold back now.
  returned: when O(state=drain)
  type: list
  elements: dict
  sample: [{pod: default/web-0, pdbs: [{name: web, namespace: default, disruptions_allowed: 0}],
            message: "Cannot evict pod as it would violate the pod's disruption budget."}]
waited_for_budget:
  description: The pods whose eviction had to wait for their PodDisruptionBudget to allow a disruption (or that a
    budget refused at least once).
  returned: when O(state=drain) and pods were evicted
  type: list
  elements: str
  sample: [default/web-5c6b8-x2x7p]
pdbs:
  description: With O(dry_run), every PodDisruptionBudget covering pods of the drain, the pods it covers and
    whether it would hold some back now (C(would_block)).
  returned: when O(state=drain) and O(dry_run)
  type: list
  elements: dict
upgrade_record:
  description: The node's roll-out record after the step (with O(upgrade_record)).
  returned: when O(upgrade_record) is given and the step changed the record
  type: dict
  sample: {state: installing, from: 595.91.07, to: 615.71.09, run_id: "20261203T031500Z-ab12",
           steps: {draining: "2026-12-03T03:15:02Z", installing: "2026-12-03T03:15:40Z"}}
boot_id:
  description: The node's C(status.nodeInfo.bootID) when the step started (with O(upgrade_record)).
  returned: when O(upgrade_record) is given
  type: str
  sample: 3f6a2c1e-9d0b-4a57-8e61-0c2f0d1b7a44
nodes:
  description:
    - With O(names), per node C(changed), C(failed), C(msg), C(unschedulable) and, with O(state=uncordon),
      C(uncordoned) and C(warning) (why a node was left cordoned); with O(state=drain), C(boot_id),
      C(pods_to_evict), C(evicted), C(blocked) and C(waited_for_budget); with O(upgrade_record), C(upgrade_record),
      the node's record after the step.
  returned: when O(names) is given
  type: dict
  sample: {gpu-node-01: {changed: true, failed: false, msg: "", unschedulable: false, uncordoned: true, warning: ""}}
failed_nodes:
  description: With O(names), the nodes whose step failed.
  returned: when O(names) is given
  type: list
  elements: str
elapsed:
  description: Seconds the module took.
  returned: always
  type: float
  sample: 12.804
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import drain as _drain
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.batch import DEFAULT_WORKERS, run_per_node, summarize
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC, NodeApi, api_client_from_module, api_error_message, list_call, object_name_problem,
    set_connection_pool_size, status_of)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.drain_batch import (
    DrainStepError, drain_batch, missing_daemonsets, node_pods)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.drain_engine import (
    MAX_PARALLEL_EVICTIONS, PDBS, Drain)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.timestamps import format_time
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.watch import list_json
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout.record import RecordWriteError, write_record


def read_node(module, nodes, name):
    try:
        return nodes.read_node(name)
    except Exception as error:
        module.fail_json(msg=api_error_message(error, "read node %s" % name))


def patch_node(module, nodes, name, patch, result):
    try:
        return nodes.patch_node(name, patch)
    except Exception as error:
        module.fail_json(msg=api_error_message(error, "patch node %s" % name), **result)


def daemonsets_gone(module, api, pods):
    try:
        return missing_daemonsets(api, pods)
    except DrainStepError as error:
        module.fail_json(msg=str(error))


def list_node_pods(module, api, name):
    try:
        return node_pods(api, name, module.params["pod_selector"])
    except DrainStepError as error:
        module.fail_json(msg=str(error))


def list_pdbs(module, api):
    try:
        return list_json(list_call(api, PDBS))[0]
    except Exception as error:
        module.fail_json(msg=api_error_message(error, "list PodDisruptionBudgets"))


def cordon(module, nodes, node, reason, result):
    patch = _drain.cordon_patch(node, format_time(time.time()), reason)
    if patch is None:
        return node, False
    if module.check_mode or module.params["dry_run"]:
        return node, True
    return patch_node(module, nodes, node["metadata"]["name"], patch, result), True


def run_uncordon(module, nodes, node, result):
    plan = _drain.uncordon_plan(node, force=module.params["force"])
    if plan["warning"]:
        module.warn(plan["warning"])
    result["uncordoned"] = plan["uncordoned"]
    result["unschedulable"] = _drain.is_unschedulable(node) and not plan["uncordoned"]
    if plan["patch"] is not None:
        result["changed"] = True
        if not (module.check_mode or module.params["dry_run"]):
            patch_node(module, nodes, node["metadata"]["name"], plan["patch"], result)


def run_drain(module, api, nodes, node, reason, started, result):
    name = module.params["name"]
    dry_run = module.check_mode or module.params["dry_run"]
    record_before = _drain.cordon_record(node)
    node, result["changed"] = cordon(module, nodes, node, reason, result)
    result["unschedulable"] = True
    pods = list_node_pods(module, api, name)
    plan = _drain.classify_pods(pods, ignore_daemonsets=module.params["ignore_daemonsets"],
                                delete_emptydir_data=module.params["delete_emptydir_data"],
                                force=module.params["force"], missing_daemonsets=daemonsets_gone(module, api, pods))
    result.update(ignored=plan["ignored"], refused=plan["refused"], evicted=[], blocked=[],
                  pods_to_evict=sorted(_drain.pod_key(pod) for pod in plan["evict"]))
    if plan["refused"]:
        undo = _drain.undo_cordon_patch(node, record_before)
        if undo is not None and not dry_run:
            patch_node(module, nodes, name, undo, result)
        result["unschedulable"] = _drain.is_unschedulable(node) if undo is None else \
            bool(undo.get("spec") is None and _drain.is_unschedulable(node))
        result["changed"] = False
        module.fail_json(msg=_drain.refusal_message(name, plan["refused"]), **result)
    pdbs = list_pdbs(module, api)
    if dry_run:
        report = _drain.budget_report(plan["evict"], pdbs)
        result.update(blocked=report["blocked"], pdbs=report["pdbs"])
        result["changed"] = result["changed"] or bool(plan["evict"])
        return
    if not plan["evict"]:
        return
    result["changed"] = True
    # one connection per parallel eviction plus the two watches (the client's default pool is 5 x CPUs)
    set_connection_pool_size(api, min(MAX_PARALLEL_EVICTIONS, len(plan["evict"])) + 2)
    drain = Drain(api, name, plan["evict"], pdbs, started + module.params["timeout"],
                  grace_period=module.params["grace_period"], disable_eviction=module.params["disable_eviction"])
    pending = drain.run()
    result["evicted"] = sorted(set(result["pods_to_evict"]) - set(pending))
    result["waited_for_budget"] = sorted(drain.waited)
    if not pending:
        return
    pending_pods = [drain.pods[key] for key in pending]
    result["blocked"] = _drain.blocked_pods(pending_pods, drain.gate.current(), drain.last_answer, drain.evicted)
    errors = {key: message for key, message in drain.errors.items() if key in pending or key in ("pods", "pdbs")}
    if errors:
        message = "drain of %s failed, node left cordoned: %s" % (name, "; ".join(errors[key] for key in sorted(errors)))
    else:
        message = _drain.timeout_reason(name, module.params["timeout"], result["blocked"])
    patch_node(module, nodes, name, _drain.reason_patch(message), result)
    result["elapsed"] = round(time.monotonic() - started, 3)
    module.fail_json(msg=message, **result)


def write_wanted_record(module, nodes, name, which):
    """With upgrade_record: the node's roll-out record moved to its ``which`` (state or state_after) state; None
    when there is nothing to write. Raises RecordWriteError."""
    wanted = module.params["upgrade_record"]
    if not wanted or not wanted[which] or module.check_mode or module.params["dry_run"]:
        return None
    fields = {"state": wanted[which], "from": wanted["from_version"], "to": wanted["to_version"],
              "run_id": wanted["run_id"]}
    return write_record(nodes, name, fields, is_conflict=lambda error: status_of(error)[0] == 409)


def move_record(module, nodes, which, result):
    """With upgrade_record: the roll-out record moved to its ``which`` (state or state_after) state, if one is given."""
    try:
        written = write_wanted_record(module, nodes, module.params["name"], which)
    except RecordWriteError as failure:
        module.fail_json(msg=api_error_message(failure.error, failure.action), **result)
    if written is None:
        return
    result["changed"] = result["changed"] or written["changed"]
    result["upgrade_record"] = written["record"]


def batch_record(module, nodes, name, which, result):
    """The batch's upgrade_record moved on one node (its ``which`` state); raises DrainStepError."""
    try:
        written = write_wanted_record(module, nodes, name, which)
    except RecordWriteError as failure:
        raise DrainStepError(api_error_message(failure.error, failure.action))
    if written is not None:
        result["changed"] = result["changed"] or written["changed"]
        result["upgrade_record"] = written["record"]


def batch_step(module, nodes, name):
    """cordon or uncordon one node of a batch, its record moved with it; raises DrainStepError (that node alone fails)."""
    result = {"changed": False}
    batch_record(module, nodes, name, "state", result)
    record_changed = result["changed"]
    result.update(batch_change(module, nodes, name))
    result["changed"] = result["changed"] or record_changed
    batch_record(module, nodes, name, "state_after", result)
    return result


def batch_change(module, nodes, name):
    """The cordon or uncordon of one node of a batch."""
    params = module.params
    dry_run = module.check_mode or params["dry_run"]
    try:
        node = nodes.read_node(name)
    except Exception as error:
        raise DrainStepError(api_error_message(error, "read node %s" % name))
    result = {"changed": False}
    if params["state"] == "uncordon":
        plan = _drain.uncordon_plan(node, force=params["force"])
        result.update(uncordoned=plan["uncordoned"], warning=plan["warning"] or "",
                      unschedulable=_drain.is_unschedulable(node) and not plan["uncordoned"])
        patch = plan["patch"]
    else:
        reason = params["reason"] or (None if _drain.cordon_record(node) else "cordoned by %s" % _drain.CORDONED_BY)
        patch = _drain.cordon_patch(node, format_time(time.time()), reason)
        result["unschedulable"] = True
    if patch is not None:
        result["changed"] = True
        if not dry_run:
            try:
                nodes.patch_node(name, patch)
            except Exception as error:
                raise DrainStepError(api_error_message(error, "patch node %s" % name))
    return result


def run_batch(module, started):
    params = module.params
    for name in params["names"]:
        if object_name_problem("names", name):
            module.fail_json(msg=object_name_problem("names", name))
    if params["timeout"] <= 0:
        module.fail_json(msg="timeout must be a positive number of seconds, got %d" % params["timeout"])
    api = api_client_from_module(module)
    set_connection_pool_size(api, DEFAULT_WORKERS + 1)
    nodes = NodeApi(api)
    if params["state"] == "drain":
        per_node = drain_batch(api, nodes, params, started, check_mode=module.check_mode,
                               move_record=lambda name, which, result: batch_record(module, nodes, name, which,
                                                                                    result))
    else:
        per_node = run_per_node(params["names"], lambda name: batch_step(module, nodes, name))
    summary = summarize(per_node)
    for name, outcome in per_node.items():
        if outcome.get("warning"):
            module.warn("%s: %s" % (name, outcome["warning"]))
    module.exit_json(changed=summary["changed"], nodes=per_node, failed_nodes=summary["failed_nodes"],
                     dry_run=bool(params["dry_run"] or module.check_mode),
                     elapsed=round(time.monotonic() - started, 3))


def main():
    argument_spec = dict(
        K8S_AUTH_ARG_SPEC,
        name=dict(type="str"),
        names=dict(type="list", elements="str"),
        state=dict(type="str", default="drain", choices=["cordon", "drain", "uncordon"]),
        ignore_daemonsets=dict(type="bool", default=True),
        delete_emptydir_data=dict(type="bool", default=False),
        force=dict(type="bool", default=False),
        grace_period=dict(type="int"),
        pod_selector=dict(type="str"),
        timeout=dict(type="int", default=300),
        dry_run=dict(type="bool", default=False),
        disable_eviction=dict(type="bool", default=False),
        reason=dict(type="str"),
        upgrade_record=dict(type="dict", options=dict(
            state=dict(type="str", choices=["planned", "draining", "installing", "rebooting", "verifying", "done"]),
            state_after=dict(type="str", choices=["draining", "installing", "rebooting", "verifying", "done"]),
            from_version=dict(type="str"),
            to_version=dict(type="str", required=True),
            run_id=dict(type="str"),
        ), required_one_of=[("state", "state_after")]),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True,
                           required_one_of=[("name", "names")], mutually_exclusive=[("name", "names")])
    params = module.params
    if params["names"] is not None:
        run_batch(module, time.monotonic())
    if object_name_problem("name", params["name"]):
        module.fail_json(msg=object_name_problem("name", params["name"]))
    if params["timeout"] <= 0:
        module.fail_json(msg="timeout must be a positive number of seconds, got %d" % params["timeout"])
    if params["grace_period"] is not None and params["grace_period"] < 0:
        module.fail_json(msg="grace_period must be 0 or more seconds, got %d" % params["grace_period"])
    started = time.monotonic()
    api = api_client_from_module(module)
    nodes = NodeApi(api)
    result = dict(changed=False, node=params["name"], dry_run=bool(params["dry_run"] or module.check_mode))
    move_record(module, nodes, "state", result)
    node = read_node(module, nodes, params["name"])
    if params["upgrade_record"]:
        result["boot_id"] = ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID")
    # without a reason given, a cordon of ours keeps the reason it has (re-running a drain changes nothing)
    reason = params["reason"] or (None if _drain.cordon_record(node) else "%s by %s" % (
        "drained" if params["state"] == "drain" else "cordoned", _drain.CORDONED_BY))
    if params["state"] == "uncordon":
        run_uncordon(module, nodes, node, result)
    elif params["state"] == "cordon":
        node, result["changed"] = cordon(module, nodes, node, reason, result)
        result["unschedulable"] = True
    else:
        run_drain(module, api, nodes, node, reason, started, result)
    move_record(module, nodes, "state_after", result)
    result["elapsed"] = round(time.monotonic() - started, 3)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
