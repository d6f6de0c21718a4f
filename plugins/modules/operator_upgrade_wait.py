#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: operator_upgrade_wait
short_description: Wait until the GPU Operator runs the new driver on a node (and restart its driver pod when asked)
version_added: 0.1.0
description:
  - Follows one node's driver upgrade under the GPU Operator until it is done or failed, polling the API.
  - Done means the node's driver pod is of its DaemonSet's newest revision (its C(controller-revision-hash) is the
    newest ControllerRevision's; where the API keeps none, its images are the template's) and runs O(version)
    (when its image tag names a version), is Running with every container Ready, the operator validator pod on
    the node is Ready, and with O(auto_upgrade) the upgrade controller's C(nvidia.com/gpu-driver-upgrade-state) is
    C(upgrade-done).
  - Failed means the upgrade controller set C(upgrade-failed) (with O(auto_upgrade)), or the new driver pod is not
    Ready with a container restarted more than 10 times (the Operator's own rule), or O(timeout) passed; the
    message names the driver pod's trouble (waiting reason, last termination message).
  - O(restart_outdated_pod) (the runbook's path with C(autoUpgrade) off) deletes the node's driver pod (once) when it is
    not of the newest revision and the DaemonSet already carries the target, so that the C(OnDelete) DaemonSet
    recreates it at the new revision; drain the node first. O(retry_failed) first puts a node the controller
    left in C(upgrade-failed) back to C(upgrade-required) (with O(auto_upgrade)) and deletes a failing driver pod
    once, so that a fixed cause is retried.
author: gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.k8s_auth
attributes:
  check_mode:
    support: full
    details: Reads the node once and reports where it stands and what would be restarted; changes and waits for
      nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  node:
    description: The node.
    type: str
    required: true
  version:
    description: The target driver version.
    type: str
    required: true
  auto_upgrade:
    description: Whether the Operator's upgrade controller is on for the node (its state label is then followed).
    type: bool
    required: true
  driver_pod_selector:
    description: The label selector of the driver pods (V(app.kubernetes.io/component=nvidia-driver) for
      NVIDIADriver custom resources).
    type: str
    default: app=nvidia-driver-daemonset
  validator_pod_selector:
    description: The label selector of the operator validator pods; an empty string does not wait for them.
    type: str
    default: app=nvidia-operator-validator
  restart_outdated_pod:
    description: Delete the node's driver pod when it is not of the newest revision (see the description).
    type: bool
    default: false
  retry_failed:
    description: Retry a node left in C(upgrade-failed) or with a failing driver pod (see the description).
    type: bool
    default: false
  timeout:
    description: Seconds to wait.
    type: int
    default: 900
  interval:
    description: Seconds between two reads.
    type: float
    default: 2
"""

EXAMPLES = r"""
- name: Follow the upgrade controller on the canary
  gpuops.nvidia.operator_upgrade_wait:
    node: gpu-node-01
    version: 615.71.09
    auto_upgrade: true
    timeout: 1200
  delegate_to: localhost

- name: Restart the driver pod of a drained node ourselves (autoUpgrade off) and wait for it
  gpuops.nvidia.operator_upgrade_wait:
    node: gpu-node-02
    version: 615.71.09
    auto_upgrade: false
    restart_outdated_pod: true
  delegate_to: localhost
"""

RETURN = r"""
done:
  description: The node runs the new driver pod, Ready and validated (false only in check mode).
  returned: always
  type: bool
driver_pod:
  description: The node's driver pod as last seen (C(pod), C(namespace), C(daemonset), C(in_sync), C(current),
    C(ready), C(failing), C(terminating), C(problem)).
  returned: always
  type: dict
state:
  description: The node's C(nvidia.com/gpu-driver-upgrade-state) as last seen (empty when unset).
  returned: always
  type: str
restarted_pods:
  description: Driver pods this task deleted (or in check mode would delete).
  returned: always
  type: list
  elements: str
retried:
  description: The node was put back from C(upgrade-failed) to C(upgrade-required).
  returned: always
  type: bool
waiting_for:
  description: What the node still waited for at the end (empty once done).
  returned: always
  type: str
waited:
  description: Seconds waited.
  returned: always
  type: float
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import gpu_operator as operator
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC, api_client_from_module, api_error_message)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.operator_node_upgrade import OperatorNodeUpgrade, observe


def main():
    argument_spec = dict(
        K8S_AUTH_ARG_SPEC,
        node=dict(type="str", required=True),
        version=dict(type="str", required=True),
        auto_upgrade=dict(type="bool", required=True),
        driver_pod_selector=dict(type="str", default="app=nvidia-driver-daemonset"),
        validator_pod_selector=dict(type="str", default="app=nvidia-operator-validator"),
        restart_outdated_pod=dict(type="bool", default=False),
        retry_failed=dict(type="bool", default=False),
        timeout=dict(type="int", default=900),
        interval=dict(type="float", default=2),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    params = module.params
    cluster = OperatorNodeUpgrade(api_client_from_module(module),
                                  fail=lambda error, action: module.fail_json(msg=api_error_message(error, action)))
    started = time.monotonic()
    restarted, retried, retry_pending, restarted_outdated = [], False, params["retry_failed"], False
    while True:
        node, driver, validators = observe(cluster, params)
        if retry_pending:
            retry_pending = False
            patch = operator.retry_failed_patch(node) if params["auto_upgrade"] else {}
            if patch:
                retried = True
                if not module.check_mode:
                    cluster.set_state(params["node"], patch)
                    node, driver, validators = observe(cluster, params)
            if operator.failing_pod_to_retry(driver) and driver["pod"] not in restarted:
                restarted.append(driver["pod"])
                if not module.check_mode:
                    cluster.delete_pod(driver["namespace"], driver["pod"])
                continue
        # once: a replacement that is still not of the newest revision is waited for, never deleted in a loop
        if params["restart_outdated_pod"] and not restarted_outdated and operator.outdated_pod_to_restart(driver) \
                and driver["pod"] not in restarted:
            restarted_outdated = True
            restarted.append(driver["pod"])
            if not module.check_mode:
                cluster.delete_pod(driver["namespace"], driver["pod"])
                continue
        progress = operator.node_progress(node, driver, validators, params["auto_upgrade"],
                                          bool(params["validator_pod_selector"]))
        waited = round(time.monotonic() - started, 1)
        result = dict(done=progress["done"], driver_pod=driver, state=progress["state"], restarted_pods=restarted,
                      retried=retried, waiting_for=progress["waiting_for"], waited=waited,
                      changed=bool(restarted or retried))
        if progress["failed"]:
            module.fail_json(msg="%s: %s" % (params["node"], progress["failed"]), **result)
        if progress["done"] or module.check_mode:
            module.exit_json(**result)
        if waited >= params["timeout"]:
            module.fail_json(msg="%s: the new driver is not up after %ss: waiting for %s" % (
                params["node"], params["timeout"], progress["waiting_for"]), **result)
        time.sleep(params["interval"])


if __name__ == "__main__":
    main()
