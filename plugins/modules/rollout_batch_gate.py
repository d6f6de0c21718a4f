#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: rollout_batch_gate
short_description: Decide whether the next batch of a driver roll-out may start
version_added: 0.1.0
description:
  - Run before each batch of the C(gpuops.nvidia.driver_upgrade) runbook. Passes when the roll-out is not
    paused, the maintenance window is open and the cluster-wide budget allows the batch; fails with every reason
    otherwise, before the batch's nodes are touched.
  - The budget is recomputed from the API each time. GPU nodes that are cordoned or NotReady count against
    O(max_unavailable) whoever did it; the batch's own nodes are counted once (an interrupted run may have left
    them cordoned).
  - The pause switch is the annotation C(gpuops.nvidia/pause) on the lock's Lease, whose value names who paused and
    why (C(WHO) then a colon then C(WHY)); an operator sets it from anywhere with C(kubectl annotate lease).
    The running roll-out finishes the nodes in flight, starts no new batch and says who paused it and why.
  - When only the budget stands in the way, waits up to O(wait_timeout) for it to free (another team's node coming
    back), re-reading every O(interval) seconds.
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
  nodes:
    description: The batch (Kubernetes node names).
    type: list
    elements: str
    required: true
  max_unavailable:
    description: The most GPU nodes out at once, a count or a percentage of the GPU nodes (rounded down, at least 1).
    type: raw
    default: 1
  count_budget:
    description: Whether the batch takes nodes out of service and so spends O(max_unavailable); V(false) for a change
      that keeps its nodes in service (the pause switch and the window still apply).
    type: bool
    default: true
  maintenance_window:
    description: C(days), C(start), C(end), C(timezone) as in M(gpuops.nvidia.driver_upgrade_plan); no window is
      always open.
    type: dict
  lock_name:
    description: The roll-out lock's Lease (see M(gpuops.nvidia.rollout_lock)), read for the pause switch.
    type: str
    default: gpuops-nvidia-rollout
  lock_namespace:
    description: The Lease's namespace.
    type: str
    default: kube-system
  wait_timeout:
    description: Seconds to wait for the budget to free; 0 fails at once.
    type: int
    default: 0
  interval:
    description: Seconds between reads while waiting for the budget.
    type: int
    default: 10
"""

EXAMPLES = r"""
- name: The next batch may start
  gpuops.nvidia.rollout_batch_gate:
    nodes: "{{ ansible_play_batch }}"
    max_unavailable: "25%"
    maintenance_window: {days: [sat, sun], start: "22:00", end: "04:00", timezone: Europe/Berlin}
    wait_timeout: 900
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
max_unavailable:
  description: The budget in nodes.
  returned: always
  type: int
out_now:
  description: GPU nodes out now and why (cordoned, NotReady).
  returned: always
  type: dict
paused:
  description: Who paused the roll-out and why, or null.
  returned: always
  type: dict
reasons:
  description: Why the batch may not start (empty when it may).
  returned: always
  type: list
  elements: str
waited:
  description: Seconds spent waiting for the budget.
  returned: always
  type: float
"""

import datetime
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC, api_client_from_module, api_error_message, list_call, request_json, resource_path, status_of)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.watch import list_json
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout.plan import (
    batch_gate, maintenance_window_errors)


def read_state(module, api):
    try:
        nodes = list_json(list_call(api, resource_path("v1", "nodes")))[0]
    except Exception as error:
        module.fail_json(msg=api_error_message(error, "list nodes"))
    lease = None
    try:
        lease = request_json(api, "GET", resource_path("coordination.k8s.io/v1", "leases", module.params["lock_name"],
                                                       module.params["lock_namespace"]))
    except Exception as error:
        if status_of(error)[0] != 404:
            module.fail_json(msg=api_error_message(error, "read the lock Lease"))
    return nodes, lease


def main():
    argument_spec = dict(
        K8S_AUTH_ARG_SPEC,
        nodes=dict(type="list", elements="str", required=True),
        max_unavailable=dict(type="raw", default=1),
        count_budget=dict(type="bool", default=True),
        maintenance_window=dict(type="dict"),
        lock_name=dict(type="str", default="gpuops-nvidia-rollout"),
        lock_namespace=dict(type="str", default="kube-system"),
        wait_timeout=dict(type="int", default=0),
        interval=dict(type="int", default=10),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    params = module.params
    if params["maintenance_window"]:
        errors = maintenance_window_errors(params["maintenance_window"])
        if errors:
            module.fail_json(msg="maintenance_window: " + "; ".join(errors))
    api = api_client_from_module(module)
    started = time.monotonic()
    while True:
        nodes, lease = read_state(module, api)
        verdict = batch_gate(nodes, params["nodes"], params["max_unavailable"], params["maintenance_window"],
                             datetime.datetime.now(datetime.timezone.utc), lease, params["count_budget"])
        only_budget = verdict["reasons"] and all(reason.startswith("budget spent") for reason in verdict["reasons"])
        waited = time.monotonic() - started
        if verdict["ok"] or not only_budget or module.check_mode or waited + params["interval"] > params["wait_timeout"]:
            break
        time.sleep(max(1, params["interval"]))
    result = dict(changed=False, max_unavailable=verdict["max_unavailable"], out_now=verdict["out_now"],
                  paused=verdict["paused"], reasons=verdict["reasons"], waited=round(time.monotonic() - started, 1))
    if not verdict["ok"]:
        module.fail_json(msg="batch %s may not start: %s" % (", ".join(params["nodes"]), "; ".join(verdict["reasons"])),
                         **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
