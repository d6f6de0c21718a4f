#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_upgrade_record
short_description: Move a node's driver roll-out record to its next step
version_added: 0.1.0
description:
  - Writes the C(gpuops.nvidia/driver-upgrade) annotation of a node, the resume point of the
    C(gpuops.nvidia.driver_upgrade) runbook, as compact JSON (C(state), C(from), C(to), C(run_id),
    C(boot_id_before), C(cordoned_by_us), C(reason), C(mig_layout), C(rollback_to), and C(steps), the time the node first entered
    each state). Fields not given are kept from the record of the same target, so each step says only what changed.
  - While the node is in maintenance (states C(planned) to C(verifying)) it is excluded from the auto-remediators
    that would reboot or replace it (medik8s C(remediation.medik8s.io/exclude-from-remediation), Cluster API
    C(cluster.x-k8s.io/skip-remediation)); the values those annotations had before are kept in the record and
    restored exactly when the node is C(done) or C(rolled-back). A C(failed) node stays excluded.
  - One merge patch, conditional on the node's resourceVersion (re-read and retried on a conflict).
  - Returns what the cluster says of the node (boot ID, cordon, Ready), so a step needs no second read.
  - With O(records), one call writes the records of a whole batch of nodes (concurrently, each its own conditional
    patch); a node whose write fails fails alone, in RV(nodes), and the module itself does not fail, so the
    runbook fails just that host.
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
  name:
    description:
      - The node. Required unless O(records) is given.
    type: str
  state:
    description:
      - The step the node enters, or V(absent) to remove the record (restoring saved annotations).
      - Required with O(name).
    type: str
    choices: [planned, draining, installing, rebooting, verifying, done, failed, rolled-back, absent]
  from_version:
    description: The driver version before the roll-out.
    type: str
  to_version:
    description: The target driver version. Required unless O(state=absent).
    type: str
  run_id:
    description: The roll-out run that writes the record.
    type: str
  boot_id_before:
    description: The node's boot ID before its reboot (a re-run compares it to tell whether the reboot happened).
    type: str
  cordoned_by_us:
    description: Whether this roll-out cordoned the node (it then uncordons it; else it leaves it cordoned).
    type: bool
  reason:
    description: Why the node failed or was rolled back.
    type: str
  rollback_to:
    description:
      - The driver version a rollback of the node puts back, written when the rollback starts (record field
        C(rollback_to)). A record left C(failed) by a rollback that did not finish then says so, and that the node
        may have rebooted a second time (for the rollback).
      - Dropped when a failed node is retried (O(state=draining)).
    type: str
  mig_layout:
    description:
      - The node's MIG layout read before the upgrade (the C(record) of the P(gpuops.nvidia.mig_layout#filter)
        filter - per GPU with MIG devices its C(index), C(uuid) and C(profiles)). A reboot drops the MIG devices,
        so a run resumed after it re-creates the layout from the record.
    type: list
    elements: dict
  exclude_from_remediation:
    description: Set the remediation exclusions during the maintenance.
    type: bool
    default: true
  records:
    description:
      - The records of a batch of nodes, written in one module process instead of O(name).
      - A field a record does not give is taken from the options of the same name (O(from_version),
        O(to_version), O(run_id), O(boot_id_before), O(cordoned_by_us), O(reason), O(rollback_to)).
    type: list
    elements: dict
    suboptions:
      name:
        description: The node.
        type: str
        required: true
      state:
        description: The step the node enters, as O(state).
        type: str
        required: true
        choices: [planned, draining, installing, rebooting, verifying, done, failed, rolled-back, absent]
      from_version:
        description: As O(from_version).
        type: str
      to_version:
        description: As O(to_version); required (here or at the top) unless the record's state is V(absent).
        type: str
      run_id:
        description: As O(run_id).
        type: str
      boot_id_before:
        description: As O(boot_id_before).
        type: str
      cordoned_by_us:
        description: As O(cordoned_by_us).
        type: bool
      reason:
        description: As O(reason).
        type: str
      rollback_to:
        description: As O(rollback_to).
        type: str
      mig_layout:
        description: As O(mig_layout).
        type: list
        elements: dict
  workers:
    description: With O(records), how many nodes are written at once.
    type: int
    default: 8
"""

EXAMPLES = r"""
- name: Record that the node is being drained
  gpuops.nvidia.node_upgrade_record:
    name: gpu-node-01
    state: draining
    from_version: 595.91.07
    to_version: 615.71.09
    run_id: "{{ gpuops_run_id }}"
  delegate_to: localhost

- name: Mark the node failed, with why
  gpuops.nvidia.node_upgrade_record:
    name: gpu-node-01
    state: failed
    to_version: 615.71.09
    reason: allocatable stayed 0 after the device plugin restart
  delegate_to: localhost

- name: Record that the whole batch is being drained, in one module process
  gpuops.nvidia.node_upgrade_record:
    records:
      - {name: gpu-node-01, state: draining}
      - {name: gpu-node-02, state: draining}
    from_version: 595.91.07
    to_version: 615.71.09
    run_id: "{{ gpuops_run_id }}"
  delegate_to: localhost
  run_once: true
  register: batch_records
"""

RETURN = r"""
record:
  description: The record after the step (null after O(state=absent)).
  returned: success, with O(name)
  type: dict
  sample: {state: rebooting, from: 595.91.07, to: 615.71.09, run_id: "20261203T031500Z-ab12", boot_id_before: "3f6a...",
           cordoned_by_us: true, saved_annotations: {"remediation.medik8s.io/exclude-from-remediation": null}}
previous_record:
  description: The record before the step (null when there was none).
  returned: success, with O(name)
  type: dict
boot_id:
  description: The node's C(status.nodeInfo.bootID) as the cluster reports it.
  returned: success, with O(name)
  type: str
unschedulable:
  description: Whether the node is cordoned.
  returned: success, with O(name)
  type: bool
ready:
  description: Whether the node's Ready condition is True.
  returned: success, with O(name)
  type: bool
nodes:
  description:
    - With O(records), per node C(changed), C(failed), C(msg), and (when the write succeeded) C(record),
      C(previous_record), C(boot_id), C(unschedulable), C(ready) as above.
  returned: success, with O(records)
  type: dict
  sample: {gpu-node-01: {changed: true, failed: false, msg: "", record: {state: draining}, previous_record: null,
                         boot_id: "3f6a...", unschedulable: false, ready: true}}
failed_nodes:
  description: With O(records), the nodes whose write failed.
  returned: success, with O(records)
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.batch import run_per_node, summarize
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC, NodeApi, api_client_from_module, api_error_message, status_of)
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout.plan import node_is_cordoned, node_is_ready
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout.record import RecordWriteError, write_record


STATES = ["planned", "draining", "installing", "rebooting", "verifying", "done", "failed", "rolled-back", "absent"]
FIELDS = (("from", "from_version"), ("to", "to_version"), ("run_id", "run_id"), ("boot_id_before", "boot_id_before"),
          ("cordoned_by_us", "cordoned_by_us"), ("reason", "reason"), ("mig_layout", "mig_layout"),
          ("rollback_to", "rollback_to"))


def record_fields(record, defaults):
    """The fields of one batch record, the top-level options filling what the record leaves out."""
    fields = {"state": record["state"]}
    for field, option in FIELDS:
        value = record.get(option)
        fields[field] = defaults.get(option) if value is None else value
    if fields["state"] != "absent" and not fields["to"]:
        raise ValueError("node %s: to_version is required for state %s" % (record["name"], fields["state"]))
    return fields


def node_view(written):
    node = written["node"]
    return dict(changed=written["changed"], record=written["record"], previous_record=written["previous_record"],
                boot_id=((node.get("status") or {}).get("nodeInfo") or {}).get("bootID"),
                unschedulable=node_is_cordoned(node), ready=node_is_ready(node))


def write_batch(module, nodes):
    params = module.params
    by_name = dict((record["name"], record) for record in params["records"])

    def step(name):
        fields = record_fields(by_name[name], params)
        try:
            written = write_record(nodes, name, fields, params["exclude_from_remediation"], module.check_mode,
                                   is_conflict=lambda error: status_of(error)[0] == 409)
        except RecordWriteError as failure:
            raise ValueError(api_error_message(failure.error, failure.action))
        return node_view(written)

    per_node = run_per_node([record["name"] for record in params["records"]], step, params["workers"])
    summary = summarize(per_node)
    module.exit_json(changed=summary["changed"], nodes=per_node, failed_nodes=summary["failed_nodes"])


def main():
    record_spec = dict(
        name=dict(type="str", required=True),
        state=dict(type="str", required=True, choices=STATES),
        from_version=dict(type="str"),
        to_version=dict(type="str"),
        run_id=dict(type="str"),
        boot_id_before=dict(type="str"),
        cordoned_by_us=dict(type="bool"),
        reason=dict(type="str"),
        mig_layout=dict(type="list", elements="dict"),
        rollback_to=dict(type="str"),
    )
    argument_spec = dict(
        K8S_AUTH_ARG_SPEC,
        name=dict(type="str"),
        state=dict(type="str", choices=STATES),
        from_version=dict(type="str"),
        to_version=dict(type="str"),
        run_id=dict(type="str"),
        boot_id_before=dict(type="str"),
        cordoned_by_us=dict(type="bool"),
        reason=dict(type="str"),
        mig_layout=dict(type="list", elements="dict"),
        rollback_to=dict(type="str"),
        exclude_from_remediation=dict(type="bool", default=True),
        records=dict(type="list", elements="dict", options=record_spec),
        workers=dict(type="int", default=8),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True,
                           required_one_of=[("name", "records")], mutually_exclusive=[("name", "records")],
                           required_by={"name": "state"},
                           required_if=[("state", "planned", ["to_version"]), ("state", "draining", ["to_version"]),
                                        ("state", "installing", ["to_version"]),
                                        ("state", "rebooting", ["to_version"]),
                                        ("state", "verifying", ["to_version"]), ("state", "done", ["to_version"]),
                                        ("state", "failed", ["to_version"]),
                                        ("state", "rolled-back", ["to_version"])])
    params = module.params
    nodes = NodeApi(api_client_from_module(module))
    if params["records"] is not None:
        write_batch(module, nodes)
    fields = {"state": params["state"], "from": params["from_version"], "to": params["to_version"],
              "run_id": params["run_id"], "boot_id_before": params["boot_id_before"],
              "cordoned_by_us": params["cordoned_by_us"], "reason": params["reason"],
              "mig_layout": params["mig_layout"], "rollback_to": params["rollback_to"]}
    try:
        written = write_record(nodes, params["name"], fields, params["exclude_from_remediation"], module.check_mode,
                               is_conflict=lambda error: status_of(error)[0] == 409)
    except RecordWriteError as failure:
        module.fail_json(msg=api_error_message(failure.error, failure.action))
    node, patch = written["node"], written["patch"]
    result = dict(changed=written["changed"], record=written["record"], previous_record=written["previous_record"],
                  boot_id=((node.get("status") or {}).get("nodeInfo") or {}).get("bootID"),
                  unschedulable=node_is_cordoned(node), ready=node_is_ready(node))
    if module._diff:
        result["diff"] = {"before": {"annotations": dict((key, written["annotations_before"].get(key))
                                                         for key in patch)},
                          "after": {"annotations": patch}}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
