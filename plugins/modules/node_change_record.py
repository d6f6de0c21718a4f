#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_change_record
short_description: Move the records of a batch of nodes for one change to their next step
version_added: 0.1.0
description:
  - Writes each node's C(gpuops.nvidia/change-<kind>) annotation, the resume point of the C(gpuops.nvidia.change)
    runbook for one change kind, as compact JSON (C(change), C(state), C(run_id), C(previous), C(reason), and
    C(steps), the time the node first entered each state). Fields not given are kept from the record of the same
    change, so each step says only what changed; a record of another change is replaced.
  - While the node is C(applying) or C(verifying) it is excluded from the auto-remediators (medik8s, Cluster API's
    MachineHealthCheck), their previous annotations kept in the record and restored when it is C(done) or
    C(rolled-back), as P(gpuops.nvidia.node_upgrade_record#module) does for the driver roll-out.
  - One module process for the batch; each node its own merge patch conditional on its resourceVersion (re-read and
    retried on a conflict). A node whose write fails fails alone, in RV(nodes) and RV(failed_nodes); the module
    itself does not fail.
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
    description: The change kind whose record is written.
    type: str
    required: true
    choices: [node_labels, device_plugin_config, containerd_config, kubelet_config, mig_layout, gpu_operator_uninstall]
  records:
    description: The records to write, one per node.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The node.
        type: str
        required: true
      state:
        description: The step the node enters, or V(absent) to remove the record.
        type: str
        required: true
        choices: [applying, verifying, done, failed, rolled-back, absent]
      change:
        description: The change's id (required but for V(absent)).
        type: str
      run_id:
        description: The run that writes the record.
        type: str
      reason:
        description: Why the node failed or was rolled back.
        type: str
      previous:
        description: What the node had before the change (what a rollback restores), as the kind's capture read it.
        type: raw
  exclude_from_remediation:
    description: Set the remediation exclusions while the node is applying or verifying.
    type: bool
    default: true
  workers:
    description: Nodes written at once.
    type: int
    default: 8
"""

EXAMPLES = r"""
- name: Record the batch's nodes applying the change
  gpuops.nvidia.node_change_record:
    kind: node_labels
    records:
      - {name: gpu-node-01, state: applying, change: node-labels-3f2a9c01b7de, run_id: 20261205T0100Z-1a2b}
      - {name: gpu-node-02, state: applying, change: node-labels-3f2a9c01b7de, run_id: 20261205T0100Z-1a2b}
  delegate_to: localhost
"""

RETURN = r"""
nodes:
  description: Per node C(changed), C(failed), C(msg) and, when written, C(record) and C(previous_record).
  returned: always
  type: dict
  sample: {gpu-node-01: {changed: true, failed: false, msg: "", record: {state: applying}, previous_record: null}}
failed_nodes:
  description: The nodes whose record could not be written.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.batch import run_per_node, summarize
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC, NodeApi, api_client_from_module, api_error_message, status_of)
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout.change import STATES, record_kind
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout.change_kinds import KINDS
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout.record import RecordWriteError, write_record


def record_fields(record):
    if record["state"] != "absent" and not record.get("change"):
        raise ValueError("node %s: change is required for state %s" % (record["name"], record["state"]))
    return dict((key, record.get(key)) for key in ("state", "change", "run_id", "reason", "previous"))


def main():
    module = AnsibleModule(argument_spec=dict(
        K8S_AUTH_ARG_SPEC,
        kind=dict(type="str", required=True, choices=sorted(KINDS)),
        records=dict(type="list", elements="dict", required=True, options=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", required=True, choices=list(STATES) + ["absent"]),
            change=dict(type="str"),
            run_id=dict(type="str"),
            reason=dict(type="str"),
            previous=dict(type="raw"),
        )),
        exclude_from_remediation=dict(type="bool", default=True),
        workers=dict(type="int", default=8),
    ), supports_check_mode=True)
    params = module.params
    nodes = NodeApi(api_client_from_module(module))
    kind = record_kind(params["kind"])
    by_name = dict((record["name"], record) for record in params["records"])

    def step(name):
        try:
            written = write_record(nodes, name, record_fields(by_name[name]), params["exclude_from_remediation"],
                                   module.check_mode, is_conflict=lambda error: status_of(error)[0] == 409,
                                   kind=kind)
        except RecordWriteError as failure:
            raise ValueError(api_error_message(failure.error, failure.action))
        return {"changed": written["changed"], "record": written["record"],
                "previous_record": written["previous_record"]}

    per_node = run_per_node(list(by_name), step, params["workers"])
    summary = summarize(per_node)
    module.exit_json(changed=summary["changed"], nodes=per_node, failed_nodes=summary["failed_nodes"])


if __name__ == "__main__":
    main()
