#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: rollout_lock
short_description: A cluster-wide lock (a Kubernetes Lease) so two operators never roll the same fleet at once
version_added: 0.1.0
description:
  - Acquires, renews or releases a lock held in a C(coordination.k8s.io/v1) Lease. The Lease names its holder,
    when it was acquired, when it was last renewed and for how long (O(ttl)); the lock expires O(ttl) seconds after
    its last renewal.
  - Every write carries the C(resourceVersion) that was read, so of two operators racing for the lock exactly one
    wins; the other reads the Lease again and fails naming the holder.
  - A lock held by someone else fails the task with who holds it, since when and until when. An expired lock
    is taken over only with O(steal_expired=true). Renewing or releasing a lock held by someone else fails.
author: gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.k8s_auth
attributes:
  check_mode:
    support: full
    details: Reads the Lease and reports what would happen (a held lock still fails the task); writes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  state:
    description:
      - V(acquired) takes the lock (no change when this holder already has it), V(renewed) extends the lock this
        holder has by O(ttl) from now, V(released) frees it (no change when nobody holds it).
    type: str
    choices: [acquired, renewed, released]
    default: acquired
  name:
    description:
      - Name of the Lease; one name per fleet that must not be rolled twice at once.
    type: str
    default: gpuops-nvidia-rollout
  namespace:
    description:
      - Namespace of the Lease.
    type: str
    default: kube-system
  holder:
    description:
      - Who takes the lock. Renew and release with the same value.
      - Default - C(user@host/run-PID.START) of the C(ansible-playbook) (or C(ansible)) process this task runs
        under, so every task of one playbook run is the same holder and another run is not. Modules that do
        not run on the controller should get an explicit holder.
    type: str
  ttl:
    description:
      - Seconds the lock stays valid after it was acquired or last renewed.
    type: int
    default: 3600
  steal_expired:
    description:
      - Take over a lock held by someone else whose ttl has run out. Without it such a lock fails the task like
        a live one (the message says it expired).
    type: bool
    default: false
seealso:
  - module: gpuops.nvidia.node_drain
  - module: gpuops.nvidia.gpu_allocatable_wait
"""

EXAMPLES = r"""
- name: Roll the GPU fleet under one lock
  hosts: localhost
  gather_facts: false
  module_defaults:
    group/gpuops.nvidia.k8s:
      kubeconfig: /etc/gpuops/kubeconfig
  tasks:
    - name: Take the rollout lock for two hours
      gpuops.nvidia.rollout_lock:
        name: gpu-driver-rollout
        ttl: 7200
      register: rollout_lock

    - name: Renew it between batches
      gpuops.nvidia.rollout_lock:
        name: gpu-driver-rollout
        state: renewed
        holder: "{{ rollout_lock.holder }}"
        ttl: 7200

    - name: Release it
      gpuops.nvidia.rollout_lock:
        name: gpu-driver-rollout
        state: released
        holder: "{{ rollout_lock.holder }}"

- name: Recover a fleet whose rollout died
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Take over the lock whose holder died (its ttl ran out)
      gpuops.nvidia.rollout_lock:
        name: gpu-driver-rollout
        holder: "oncall@bastion/incident-4711"
        steal_expired: true
"""

RETURN = r"""
holder:
  description: Who holds the lock after the task (null once released).
  returned: always
  type: str
  sample: sre@bastion-1/run-81234.99120345
acquired_at:
  description: When the holder acquired the lock (RFC 3339).
  returned: always
  type: str
  sample: "2026-12-03T03:00:00Z"
renewed_at:
  description: When the lock was last renewed (RFC 3339).
  returned: always
  type: str
expires_at:
  description: When the lock expires unless renewed (RFC 3339).
  returned: always
  type: str
  sample: "2026-12-03T04:00:00Z"
ttl:
  description: The lock's ttl in seconds as the Lease holds it.
  returned: always
  type: int
transitions:
  description: How many times the lock changed hands (the Lease's C(leaseTransitions)).
  returned: always
  type: int
msg:
  description: What was done, for example C(acquired), C(already held by ...), C(took over the expired lock of ...).
  returned: always
  type: str
"""

import getpass
import os
import socket
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC,
    api_client_from_module,
    api_error_message,
    request_json,
    resource_path,
    status_of,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.lease_lock import decide, default_holder, result_of

CONFLICT_RETRIES = 5
LEASES_API = 'coordination.k8s.io/v1'
ANSIBLE_COMMANDS = ('ansible-playbook', 'ansible', 'ansible-runner')


def run_id():
    """``run-PID.START`` of the ansible-playbook/ansible process this task runs under (its PID and start time in
    clock ticks, unique across PID reuse): the topmost of the ancestors running it, since each task runs in a
    forked worker with the same command line. ``run-PPID`` when none is found (no /proc, or not run locally)."""
    pid, found = os.getppid(), None
    for dummy in range(32):
        try:
            with open('/proc/%d/cmdline' % pid, 'rb') as stream:
                argv = stream.read().split(b'\0')
            with open('/proc/%d/stat' % pid) as stream:
                fields = stream.read().rsplit(')', 1)[1].split()
        except (IOError, OSError, IndexError):
            break
        names = [os.path.basename(part.decode('utf-8', 'replace')) for part in argv[:2]]
        if any(name in ANSIBLE_COMMANDS for name in names):
            found = 'run-%d.%s' % (pid, fields[19])
        elif found:
            break
        pid = int(fields[1])
        if pid <= 1:
            break
    return found or 'run-%d' % os.getppid()


def read_lease(module, api, name, namespace):
    try:
        return request_json(api, 'GET', resource_path(LEASES_API, 'leases', name, namespace))
    except Exception as error:  # pylint: disable=broad-except
        if status_of(error)[0] == 404:
            return None
        module.fail_json(msg=api_error_message(error, 'read lease %s/%s' % (namespace, name)))


def write_lease(api, decision, namespace):
    body = decision.body
    if decision.action == 'create':
        return request_json(api, 'POST', resource_path(LEASES_API, 'leases', namespace=namespace), body=body)
    return request_json(api, 'PUT', resource_path(LEASES_API, 'leases', body['metadata']['name'], namespace),
                        body=body)


def main():
    argument_spec = dict(
        K8S_AUTH_ARG_SPEC,
        state=dict(type='str', choices=['acquired', 'renewed', 'released'], default='acquired'),
        name=dict(type='str', default='gpuops-nvidia-rollout'),
        namespace=dict(type='str', default='kube-system'),
        holder=dict(type='str'),
        ttl=dict(type='int', default=3600),
        steal_expired=dict(type='bool', default=False),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    params = module.params
    if params['ttl'] < 1:
        module.fail_json(msg='ttl must be at least 1 second, got %d' % params['ttl'])
    if not params['name'] or not params['namespace']:
        module.fail_json(msg='name and namespace must not be empty')
    if not params['holder']:
        params['holder'] = default_holder(getpass.getuser(), socket.gethostname(), run_id())
    request = dict((key, params[key]) for key in ('state', 'name', 'namespace', 'holder', 'ttl', 'steal_expired'))
    api = api_client_from_module(module)
    for dummy in range(CONFLICT_RETRIES):
        lease = read_lease(module, api, params['name'], params['namespace'])
        now = time.time()
        decision = decide(lease, request, now)
        if decision.action == 'fail':
            module.fail_json(msg=decision.message, **result_of(lease, now))
        if decision.action == 'none' or module.check_mode:
            after = decision.body if decision.body is not None else lease
            module.exit_json(changed=decision.changed, msg=decision.message, **result_of(after, now))
        try:
            written = write_lease(api, decision, params['namespace'])
        except Exception as error:  # pylint: disable=broad-except
            if status_of(error)[0] == 409:
                continue  # someone wrote the Lease since we read it: decide again on what is there now
            module.fail_json(msg=api_error_message(error, '%s lock %s/%s' % (
                params['state'], params['namespace'], params['name'])))
        module.exit_json(changed=True, msg=decision.message, **result_of(written, time.time()))
    module.fail_json(msg='lock %s/%s kept changing under us (%d conflicts); try again' % (
        params['namespace'], params['name'], CONFLICT_RETRIES))


if __name__ == '__main__':
    main()
