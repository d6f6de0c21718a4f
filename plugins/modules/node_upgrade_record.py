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
    C(boot_id_before), C(cordoned_by_us), C(reason), and C(steps), the time the node first entered each state). Fields
    not given are kept from the record of the same target, so each step says only what changed.
  - While the node is in maintenance (states C(planned) to C(verifying)) it is excluded from the auto-remediators
    that would reboot or replace it (medik8s C(remediation.medik8s.io/exclude-from-remediation), Cluster API
    C(cluster.x-k8s.io/skip-remediation)); the values those annotations had before are kept in the record and
    restored exactly when the node is C(done) or C(rolled-back). A C(failed) node stays excluded.
  - One merge patch, conditional on the node's resourceVersion (re-read and retried on a conflict).
  - Returns what the cluster says of the node (boot ID, cordon, Ready), so a step needs no second read.
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
    description: The node.
    type: str
    required: true
  state:
    description:
      - The step the node enters, or V(absent) to remove the record (restoring saved annotations).
    type: str
    required: true
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
  exclude_from_remediation:
    description: Set the remediation exclusions during the maintenance.
    type: bool
    default: true
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
"""

RETURN = r"""
record:
  description: The record after the step (null after O(state=absent)).
  returned: success
  type: dict
  sample: {state: rebooting, from: 595.91.07, to: 615.71.09, run_id: "20261203T031500Z-ab12", boot_id_before: "3f6a...",
           cordoned_by_us: true, saved_annotations: {"remediation.medik8s.io/exclude-from-remediation": null}}
previous_record:
  description: The record before the step (null when there was none).
  returned: success
  type: dict
boot_id:
  description: The node's C(status.nodeInfo.bootID) as the cluster reports it.
  returned: success
  type: str
unschedulable:
  description: Whether the node is cordoned.
  returned: success
  type: bool
ready:
  description: Whether the node's Ready condition is True.
  returned: success
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC, NodeApi, api_client_from_module, api_error_message, status_of)
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout.plan import node_is_cordoned, node_is_ready
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout.record import RecordWriteError, write_record


def main():
    argument_spec = dict(
        K8S_AUTH_ARG_SPEC,
        name=dict(type="str", required=True),
        state=dict(type="str", required=True, choices=["planned", "draining", "installing", "rebooting",
                                                       "verifying", "done", "failed", "rolled-back", "absent"]),
        from_version=dict(type="str"),
        to_version=dict(type="str"),
        run_id=dict(type="str"),
        boot_id_before=dict(type="str"),
        cordoned_by_us=dict(type="bool"),
        reason=dict(type="str"),
        exclude_from_remediation=dict(type="bool", default=True),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True,
                           required_if=[("state", "planned", ["to_version"]), ("state", "draining", ["to_version"]),
                                        ("state", "installing", ["to_version"]),
                                        ("state", "rebooting", ["to_version"]),
                                        ("state", "verifying", ["to_version"]), ("state", "done", ["to_version"]),
                                        ("state", "failed", ["to_version"]),
                                        ("state", "rolled-back", ["to_version"])])
    params = module.params
    nodes = NodeApi(api_client_from_module(module))
    fields = {"state": params["state"], "from": params["from_version"], "to": params["to_version"],
              "run_id": params["run_id"], "boot_id_before": params["boot_id_before"],
              "cordoned_by_us": params["cordoned_by_us"], "reason": params["reason"]}
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
