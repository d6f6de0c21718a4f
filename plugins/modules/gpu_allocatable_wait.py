#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_allocatable_wait
short_description: Wait until Kubernetes nodes are back as GPU nodes, and say why when they are not
version_added: 0.1.0
description:
  - Waits until every node of O(nodes) is back as a GPU node - Ready after its reboot, every device it should
    have allocatable, the required labels shown - and reports per node what it saw.
  - Watches instead of polling - one list and one watch for all the listed nodes (plus one list and one watch of
    ResourceSlices with O(resource=dra)), resumed from the last C(resourceVersion) when the API server closes it,
    listed again when the server answers 410 Expired. Reacts to a change as soon as the API server sends it.
  - On timeout the task fails with a per-node diagnosis, worst first - node missing; NotReady (since when); never
    rebooted (bootID unchanged); Ready only from before the reboot; no GPU capacity; capacity present but
    allocatable 0 (the stale device-plugin ledger, remedy M(gpuops.nvidia.device_plugin_restart)); fewer
    devices than expected (an unhealthy GPU, check Xid); a label mismatch (which value the node shows).
  - Reads only; never changes the cluster.
author: gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.k8s_auth
attributes:
  check_mode:
    support: full
    details: Evaluates the nodes once and reports, without waiting and without failing.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  nodes:
    description:
      - Names of the Kubernetes nodes to wait for.
    type: list
    elements: str
    required: true
  resource:
    description:
      - The extended resource that counts the node's devices, V(nvidia.com/gpu) or a MIG resource of the mixed
        strategy such as V(nvidia.com/mig-1g.10gb).
      - V(dra) counts whole-GPU devices of driver C(gpu.nvidia.com) in the node's ResourceSlices instead, read with
        the newest C(resource.k8s.io) version the API server serves (V(v1), GA in Kubernetes 1.34, else
        V(v1beta2) or V(v1beta1)).
    type: str
    default: nvidia.com/gpu
  count:
    description:
      - The number of devices each node must have allocatable.
      - Default - allocatable must equal capacity and be more than 0 (with O(resource=dra), more than 0 devices).
    type: int
  counts:
    description:
      - The number of devices a node must have allocatable, by node name, for nodes that differ from O(count) (a
        batch of nodes with different GPU counts in one wait).
      - A node may map to extended resource names and counts instead, a MIG layout such as two
        C(nvidia.com/mig-3g.40gb) and four C(nvidia.com/mig-1g.10gb) with the mixed strategy. Each must be
        allocatable at least that many times, O(resource) is not checked for that node, and the diagnosis names the
        resources missing.
    type: dict
    default: {}
  labels:
    description:
      - Node labels that must have these values, for example the driver version GPU Feature Discovery shows,
        label C(nvidia.com/cuda.driver-version.full) with value C(615.71.09).
    type: dict
    default: {}
  nvml_gpu_names:
    description:
      - Node name to the product names of its GPUs as NVML reports them on the node, one per GPU (for example
        C(ansible_facts.nvidia_driver.gpus | map(attribute='name')) of M(gpuops.nvidia.nvidia_driver_facts)).
      - Such a node is back only once GPU Feature Discovery's labels agree with them - C(nvidia.com/gpu.product)
        is the product name with its words joined by C(-) (a C(-MIG-...) or C(-SHARED) suffix allowed) and
        C(nvidia.com/gpu.count) the number of GPUs (not checked with the MIG single strategy, where it counts MIG
        devices). Every key must be one of O(nodes).
    type: dict
    default: {}
  boot_id_changed_from:
    description:
      - Node name to the C(status.nodeInfo.bootID) recorded before the reboot. Such a node is back only once its
        bootID differs; with O(require_ready), a Ready condition the module saw before the reboot does not count.
      - Nodes not listed here need no reboot. Every key must be one of O(nodes).
    type: dict
    default: {}
  require_ready:
    description:
      - The node's Ready condition must be True.
    type: bool
    default: true
  stable_seconds:
    description:
      - How long every check must hold before the node counts as back. The time starts at the later of the
        Ready transition and the moment the module saw every other check pass.
    type: int
    default: 10
  timeout:
    description:
      - Seconds to wait for all the nodes before failing with the diagnosis.
    type: int
    default: 600
seealso:
  - module: gpuops.nvidia.device_plugin_restart
  - module: gpuops.nvidia.node_drain
"""

EXAMPLES = r"""
- name: Record the bootID before the reboot
  kubernetes.core.k8s_info:
    kind: Node
    name: "{{ inventory_hostname }}"
  register: node_before
  delegate_to: localhost

- name: Reboot the node
  ansible.builtin.reboot:

- name: Wait until the node is back with all 8 GPUs and the new driver
  gpuops.nvidia.gpu_allocatable_wait:
    nodes: ["{{ inventory_hostname }}"]
    count: 8
    labels:
      nvidia.com/cuda.driver-version.full: "615.71.09"
    boot_id_changed_from:
      "{{ inventory_hostname }}": "{{ node_before.resources[0].status.nodeInfo.bootID }}"
    timeout: 900
  delegate_to: localhost

- name: Wait for a whole batch at once (one watch), DRA cluster
  gpuops.nvidia.gpu_allocatable_wait:
    kubeconfig: /etc/gpuops/kubeconfig
    nodes: "{{ ansible_play_batch }}"
    resource: dra
    stable_seconds: 30
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
nodes:
  description: What was seen of each node when the wait ended, by node name.
  returned: always
  type: dict
  sample:
    gpu-1:
      ready: true
      ready_since: "2026-12-03T03:10:04Z"
      boot_id: 5d2f0b3e-8c1a-4f7e-9b61-0c2d3e4f5a6b
      rebooted: true
      capacity: 8
      allocatable: 8
      labels_matched: true
      label_mismatches: {}
      satisfied: true
      satisfied_at: "2026-12-03T03:10:14.031207Z"
      problems: []
  contains:
    ready:
      description: The Ready condition is True.
      type: bool
    ready_since:
      description: The Ready condition's last transition (RFC 3339).
      type: str
    boot_id:
      description: C(status.nodeInfo.bootID).
      type: str
    rebooted:
      description: The bootID differs from O(boot_id_changed_from); null when no bootID was given for the node.
      type: bool
    capacity:
      description: Device capacity (with O(resource=dra), the GPUs in ResourceSlices); null when not advertised.
      type: int
    allocatable:
      description: Allocatable devices (with O(resource=dra), the GPUs in ResourceSlices).
      type: int
    labels_matched:
      description: Every label of O(labels) has its value.
      type: bool
    label_mismatches:
      description: Label name to the value the node shows (null when absent), for each label of O(labels) that differs.
      type: dict
    satisfied:
      description: The node is back.
      type: bool
    satisfied_at:
      description: When the module saw the node back (RFC 3339 with microseconds); null when it is not.
      type: str
    problems:
      description: What is wrong with the node, worst first (C(code), C(message)); empty once it is back.
      type: list
      elements: dict
diagnosis:
  description: The problems of every node that is not back, worst first (C(node), C(code), C(message)).
  returned: always
  type: list
  elements: dict
  sample: [{node: gpu-2, code: stale_device_plugin, message: "nvidia.com/gpu capacity 8 but allocatable 0: ..."}]
satisfied:
  description: Every node is back (false only in check mode; otherwise the task fails).
  returned: always
  type: bool
elapsed:
  description: Seconds the module waited.
  returned: always
  type: float
api_version:
  description: The resource.k8s.io version the ResourceSlices were read with (O(resource=dra) only).
  returned: when O(resource=dra)
  type: str
  sample: v1
watches_opened:
  description: Watch requests the module made (one per watched collection unless the server closed a watch).
  returned: always
  type: int
"""

import gc
import queue
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC,
    api_client_from_module,
    api_error_message,
    list_call,
    resource_path,
    served_versions,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.gpu_node_wait import GpuNodeWait, WatchFailed, node_list_call
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.watch import ListWatch
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.node_readiness import (
    DRA,
    DRA_API_VERSIONS,
    diagnosis,
    dra_api_version,
    summary,
)


def resource_slice_list_call(module, api):
    """The list call of ResourceSlices in the newest resource.k8s.io version the server serves (and we read)."""
    try:
        served = served_versions(api, 'resource.k8s.io')
    except Exception as error:  # pylint: disable=broad-except
        module.fail_json(msg=api_error_message(error, 'discover API groups'))
    version = dra_api_version(served)
    if version is None:
        module.fail_json(msg='resource: dra needs ResourceSlices: the API server serves resource.k8s.io %s, '
                             'this module reads %s' % (served or 'not at all', ', '.join(DRA_API_VERSIONS)))
    return version, list_call(api, resource_path('resource.k8s.io/' + version, 'resourceslices'))


def follow(module, wait, watchers, events, deadline):
    """The node states at the end of the wait (GpuNodeWait.follow); the watches are closed when it returns."""
    try:
        return wait.follow(events, len(watchers), deadline, check_mode=module.check_mode)
    except WatchFailed as error:
        module.fail_json(msg=str(error))
    finally:
        for watcher in watchers:
            watcher.stop()


def validate(module):
    params = module.params
    if not params['nodes'] or any(not name for name in params['nodes']):
        module.fail_json(msg='nodes: give at least one node name (no empty names)')
    for option in ('boot_id_changed_from', 'nvml_gpu_names', 'counts'):
        unknown = sorted(set(params[option]) - set(params['nodes']))
        if unknown:
            module.fail_json(msg='%s: %s not in nodes' % (option, ', '.join(unknown)))
    for name, gpu_names in params['nvml_gpu_names'].items():
        if not isinstance(gpu_names, list) or any(not isinstance(one, str) or not one.strip() for one in gpu_names):
            module.fail_json(msg='nvml_gpu_names: %s must map to a list of GPU product names' % name)
    if params['count'] is not None and params['count'] < 1:
        module.fail_json(msg='count must be at least 1, got %d' % params['count'])
    for name, count in params['counts'].items():
        if isinstance(count, dict):
            params['counts'][name] = resource_counts(module, name, count)
            continue
        try:
            params['counts'][name] = int(count)
        except (TypeError, ValueError):
            params['counts'][name] = 0
        if isinstance(count, bool) or params['counts'][name] < 1:
            module.fail_json(msg='counts: %s must map to a number of devices of at least 1, got %r' % (name, count))
    if params['stable_seconds'] < 0 or params['timeout'] < 1:
        module.fail_json(msg='stable_seconds must be >= 0 and timeout >= 1')
    if params['resource'] != DRA and not params['resource'].count('/') == 1:
        module.fail_json(msg='resource must be an extended resource name such as nvidia.com/gpu, or dra; got %s'
                         % params['resource'])
    params['labels'] = dict((key, str(value)) for key, value in params['labels'].items())


def resource_counts(module, name, counts):
    """A node's counts by extended resource name (each at least 1); fails the module on anything else."""
    checked = {}
    for resource, count in counts.items():
        try:
            checked[resource] = int(count)
        except (TypeError, ValueError):
            checked[resource] = 0
        if isinstance(count, bool) or checked[resource] < 1 or str(resource).count('/') != 1:
            module.fail_json(msg='counts: %s: %s must be an extended resource name mapped to a number of at least 1, '
                                 'got %r' % (name, resource, count))
    if not checked:
        module.fail_json(msg='counts: %s maps to no resource' % name)
    return checked


def main():
    argument_spec = dict(
        K8S_AUTH_ARG_SPEC,
        nodes=dict(type='list', elements='str', required=True),
        resource=dict(type='str', default='nvidia.com/gpu'),
        count=dict(type='int'),
        counts=dict(type='dict', default={}),
        labels=dict(type='dict', default={}),
        boot_id_changed_from=dict(type='dict', default={}),
        nvml_gpu_names=dict(type='dict', default={}),
        require_ready=dict(type='bool', default=True),
        stable_seconds=dict(type='int', default=10),
        timeout=dict(type='int', default=600),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    validate(module)
    api = api_client_from_module(module)
    started = time.time()
    deadline = started + module.params['timeout']
    wait = GpuNodeWait(module.params)
    events = queue.Queue()
    watchers = [ListWatch('nodes', node_list_call(api, wait.names), events)]
    result = dict(changed=False)
    if wait.dra:
        result['api_version'], slice_call = resource_slice_list_call(module, api)
        watchers.append(ListWatch('resourceslices', slice_call, events))
    for watcher in watchers:
        if module.check_mode:
            try:
                watcher.list_once()
            except Exception as error:  # pylint: disable=broad-except
                module.fail_json(msg=api_error_message(error, 'list %s' % watcher.key))
        else:
            watcher.start(deadline)
    states = follow(module, wait, watchers, events, deadline)
    # Nothing is left to collect: skip the final cyclic collection of what the kubernetes client loaded, which
    # delayed the process exit (and so the task's return) by 1-3 s on a busy controller.
    gc.freeze()
    rows = diagnosis(states)
    result.update(nodes=states, diagnosis=rows, satisfied=not rows and bool(states),
                  elapsed=round(time.time() - started, 3),
                  watches_opened=sum(watcher.watches_opened for watcher in watchers))
    if result['satisfied'] or module.check_mode:
        module.exit_json(**result)
    if not states:
        keys = '/'.join(watcher.key for watcher in watchers)
        module.fail_json(msg='no list of %s arrived within %ss' % (keys, module.params['timeout']), **result)
    waiting = sorted(name for name, state in states.items() if not state['satisfied'])
    module.fail_json(msg='timed out after %ss waiting for %d of %d node(s): %s' % (
        module.params['timeout'], len(waiting), len(states), summary(rows)), **result)


if __name__ == '__main__':
    main()
