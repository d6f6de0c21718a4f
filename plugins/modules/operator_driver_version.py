#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: operator_driver_version
short_description: Raise the driver version where the GPU Operator reads it, keeping the previous one
version_added: 0.1.0
description:
  - Sets the driver version of a GPU Operator custom resource with one merge patch, conditional on its
    resourceVersion (re-read and retried on a conflict) - a ClusterPolicy's C(spec.driver.version) (NVIDIA's
    documented way to upgrade the driver) or an NVIDIADriver's C(spec.version).
  - The version the resource had is kept in its C(gpuops.nvidia/driver-upgrade-previous) annotation (with the
    target and the run) by the first raise; a later run to the same target (a resume) finds the resource at the
    target and keeps that record, so the previous version stays known for a rollback (a roll-out back to it).
  - O(state=finished) removes that annotation once the roll-out completed (the run record keeps the value).
  - The driver DaemonSet is C(OnDelete). Raising the version changes no pod by itself, but every driver pod
    deleted (or node rebooted) afterwards comes back with the new version, and with C(autoUpgrade) on the
    upgrade controller starts on every node not held by C(nvidia.com/gpu-driver-upgrade.skip=true). Hold the
    nodes with M(gpuops.nvidia.operator_node_hold) first.
  - When a Helm release renders the resource, returns the values change that keeps the next C(helm upgrade) from
    reverting the version (the module does not run Helm).
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
  kind:
    description: The resource that holds the version.
    type: str
    choices: [ClusterPolicy, NVIDIADriver]
    default: ClusterPolicy
  name:
    description: Its name (cluster-scoped), for example V(cluster-policy).
    type: str
    required: true
  version:
    description: The target driver version.
    type: str
    required: true
  state:
    description:
      - V(present) raises the version to O(version) (recording the previous one); V(finished) removes the record of
        the previous version (the roll-out to O(version) completed) and changes nothing else.
    type: str
    choices: [present, finished]
    default: present
  run_id:
    description: The roll-out run, kept in the record of the previous version.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Raise the ClusterPolicy's driver version (the nodes are held by the skip label already)
  gpuops.nvidia.operator_driver_version:
    kind: ClusterPolicy
    name: cluster-policy
    version: 615.71.09
    run_id: "{{ gpuops_run_id }}"
  register: raised

- name: Tell the Helm user what to change
  ansible.builtin.debug:
    msg: "{{ raised.helm.command }}"
  when: raised.helm is not none

- name: The roll-out completed
  gpuops.nvidia.operator_driver_version:
    name: cluster-policy
    version: 615.71.09
    state: finished
"""

RETURN = r"""
version:
  description: The version the resource holds after the task.
  returned: success
  type: str
  sample: 615.71.09
previous_version:
  description: The version before the roll-out to O(version) raised it (from the record when a run raised it
    already), null when unknown.
  returned: success
  type: str
  sample: 595.91.07
field:
  description: Where the version lives.
  returned: success
  type: str
  sample: spec.driver.version
auto_upgrade:
  description: Whether the Operator's upgrade controller acts for this resource (C(upgradePolicy.autoUpgrade)).
  returned: success
  type: bool
helm:
  description: The Helm release that renders the resource (C(release), C(namespace)), the C(values) change and a
    C(command); null when Helm does not manage it.
  returned: success
  type: dict
  sample: {release: gpu-operator, namespace: gpu-operator, values: {driver.version: 615.71.09},
           command: "helm upgrade gpu-operator nvidia/gpu-operator -n gpu-operator --reuse-values --set driver.version=615.71.09"}
"""

import json

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import gpu_operator as operator
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC, MERGE_PATCH, api_client_from_module, api_error_message, request_json, resource_path, status_of)
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.gpu_support import is_driver_version

CONFLICT_RETRIES = 3


def main():
    argument_spec = dict(
        K8S_AUTH_ARG_SPEC,
        kind=dict(type="str", default="ClusterPolicy", choices=["ClusterPolicy", "NVIDIADriver"]),
        name=dict(type="str", required=True),
        version=dict(type="str", required=True),
        state=dict(type="str", default="present", choices=["present", "finished"]),
        run_id=dict(type="str", default=""),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    params = module.params
    if not is_driver_version(params["version"]):
        module.fail_json(msg="version %r is not a driver version such as 595.91.07" % params["version"])
    resource = operator.CLUSTER_POLICY if params["kind"] == "ClusterPolicy" else operator.NVIDIA_DRIVER
    api = api_client_from_module(module)
    path = resource_path("%s/%s" % (resource["group"], resource["version"]), resource["plural"], params["name"])
    where = "%s %s" % (params["kind"], params["name"])
    for attempt in range(CONFLICT_RETRIES):
        try:
            current = request_json(api, "GET", path)
        except Exception as error:
            module.fail_json(msg=api_error_message(error, "read %s" % where))
        current = dict(current, kind=current.get("kind") or params["kind"])
        if params["state"] == "present":
            patch = operator.version_patch(current, params["version"], params["run_id"])
        else:
            patch = operator.finish_patch(current)
        if not patch or module.check_mode:
            break
        body = dict(patch)
        body["metadata"] = dict(patch.get("metadata") or {},
                                resourceVersion=(current.get("metadata") or {}).get("resourceVersion"))
        try:
            # the typed patch_cluster_custom_object sends a JSON merge patch (CRs know no strategic merge)
            request_json(api, "PATCH", path, body=body, content_type=MERGE_PATCH)
            break
        except Exception as error:
            if status_of(error)[0] != 409 or attempt == CONFLICT_RETRIES - 1:
                module.fail_json(msg=api_error_message(error, "patch %s" % where))
    recorded = operator.previous_of(current, params["version"])
    version_before = operator.resource_version_value(current)
    if params["state"] == "present":
        previous = recorded or (version_before if version_before != params["version"] else None)
        version_after = params["version"]
    else:
        previous, version_after = recorded, version_before
    result = dict(changed=bool(patch), version=version_after, previous_version=previous,
                  field=operator.version_field(current), auto_upgrade=operator.auto_upgrade(current),
                  helm=operator.helm_values_change(current, params["version"]))
    if module._diff:
        result["diff"] = {"before": json.dumps({"version": operator.resource_version_value(current),
                                                "annotations": (current.get("metadata") or {}).get("annotations")
                                                or {}}, indent=2, sort_keys=True) + "\n",
                          "after": json.dumps(patch, indent=2, sort_keys=True) + "\n"}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
