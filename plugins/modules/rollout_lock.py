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
    is taken over only with O(steal_expired=true); the take-over is written into the Lease (annotation
    C(gpuops.nvidia/lock-stolen) - by whom, when, from whom) and returned in RV(stolen). Renewing or releasing a
    lock held by someone else fails.
  - O(holder) is a name for people and anyone can name it again, for example a second run started with the run id
    of the first. With O(holder_token_file), the holder also proves possession of a secret token kept in that
    file (256 random bits, created with mode 0600 on the first acquire); the Lease keeps only its SHA-256, and a
    request with the holder's name but not its token is refused.
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
  holder_token_file:
    description:
      - File on the machine that runs the module holding this holder's secret token (one line, at least 32
        characters). When it does not exist, acquiring the lock creates it (and its directory, mode 0700) with a
        fresh token from the operating system's secure random source, mode 0600; it must not be readable by group
        or others. The token is never returned or logged; the Lease keeps its SHA-256 in the annotation
        C(gpuops.nvidia/holder-token-sha256).
      - Renew and release with the same file, and a later run resumes the lock by presenting it (a new
        C(ansible-playbook) process has no other way to prove it is the same run). Releasing removes the file.
      - Without it, the lock is held by the O(holder) name alone. A lock taken with a token cannot be renewed,
        released or acquired again without it.
    type: path
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
    - name: Take over the lock whose holder died (its ttl ran out); the Lease records the take-over
      gpuops.nvidia.rollout_lock:
        name: gpu-driver-rollout
        holder: "oncall@bastion/incident-4711"
        holder_token_file: /var/lib/gpuops/runs/incident-4711.lock-token
        steal_expired: true

- name: Hold the lock with a token only this run has (a resumed run presents the same file)
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Take the lock
      gpuops.nvidia.rollout_lock:
        name: gpu-driver-rollout
        holder: "sre@bastion/{{ run_id }}"
        holder_token_file: "/var/lib/gpuops/runs/{{ run_id }}.lock-token"
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
expired:
  description: Whether the lock's ttl has run out.
  returned: always
  type: bool
stolen:
  description: The take-over this task did of an expired lock (null otherwise), as recorded in the Lease.
  returned: always
  type: dict
  sample: {by: oncall@bastion/incident-4711, at: "2026-12-03T05:00:00Z", from: sre@bastion-1/run-81234.99120345,
           expired_at: "2026-12-03T04:00:00Z"}
last_steal:
  description: The last take-over of an expired lock the Lease records (its C(gpuops.nvidia/lock-stolen)
    annotation), or null.
  returned: always
  type: dict
msg:
  description: What was done, for example C(acquired), C(already held by ...), C(took over the expired lock of ...).
  returned: always
  type: str
"""

import getpass
import os
import secrets
import socket
import stat
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC,
    api_client_from_module,
    api_error_message,
    object_name_problem,
    request_json,
    resource_path,
    status_of,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.lease_lock import (
    decide,
    default_holder,
    result_of,
    token_sha256_of,
)

CONFLICT_RETRIES = 5
TOKEN_MIN_CHARS = 32
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


class TokenFileError(Exception):
    """The holder token file cannot be used (its message names the file and why)."""


def read_token(path):
    """The token in ``path``, None when the file does not exist; refuses a file group or others can read."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise TokenFileError('holder_token_file %s: %s' % (path, error.strerror))
    if not stat.S_ISREG(info.st_mode):
        raise TokenFileError('holder_token_file %s is not a regular file' % path)
    if info.st_mode & 0o077:
        raise TokenFileError('holder_token_file %s is readable by others (mode %04o): it must be 0600, since whoever '
                             'reads the token can renew and release the lock' % (path, stat.S_IMODE(info.st_mode)))
    if info.st_uid != os.geteuid():
        raise TokenFileError('holder_token_file %s belongs to uid %d, not to this user' % (path, info.st_uid))
    with open(path) as stream:
        token = stream.read().strip()
    if len(token) < TOKEN_MIN_CHARS or any(char.isspace() for char in token):
        raise TokenFileError('holder_token_file %s does not hold a token (one line of at least %d characters)' % (
            path, TOKEN_MIN_CHARS))
    return token


def create_token(path):
    """A fresh token written to ``path`` (mode 0600, never over an existing file: two runs creating it at once
    both end with the one that was written first)."""
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    token = secrets.token_urlsafe(32)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return read_token(path)
    with os.fdopen(descriptor, 'w') as stream:
        stream.write(token + '\n')
    return token


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


def create_and_prove(module, token_file, request):
    try:
        token = create_token(token_file)
    except (OSError, TokenFileError) as error:
        module.fail_json(msg='cannot create holder_token_file %s: %s' % (token_file, getattr(error, 'strerror', None)
                                                                         or error))
    request['token_sha256'] = token_sha256_of(token)
    return token


def remove_token(module, token_file):
    if not token_file:
        return
    try:
        os.unlink(token_file)
    except FileNotFoundError:
        pass
    except OSError as error:
        module.warn('the lock is released, but holder_token_file %s could not be removed: %s' % (
            token_file, error.strerror))


def invalid_params(params):
    """Why the options cannot make a lock request (None when they can); each reason names its option."""
    if params['ttl'] < 1:
        return 'ttl must be at least 1 second, got %d' % params['ttl']
    for option in ('name', 'namespace'):
        problem = object_name_problem(option, params[option])
        if problem:
            return problem
    if params['holder'] is not None and not params['holder'].strip():
        return 'holder must not be empty (leave it out for the default holder)'
    if params['holder_token_file'] is not None and (not params['holder_token_file'].strip()
                                                    or params['holder_token_file'].endswith('/')):
        return 'holder_token_file must be a file path, got %r' % params['holder_token_file']
    if params['state'] != 'acquired' and params['steal_expired']:
        return 'steal_expired applies to state=acquired only, not to state=%s' % params['state']
    return None


def main():
    argument_spec = dict(
        K8S_AUTH_ARG_SPEC,
        state=dict(type='str', choices=['acquired', 'renewed', 'released'], default='acquired'),
        name=dict(type='str', default='gpuops-nvidia-rollout'),
        namespace=dict(type='str', default='kube-system'),
        holder=dict(type='str'),
        ttl=dict(type='int', default=3600),
        steal_expired=dict(type='bool', default=False),
        holder_token_file=dict(type='path'),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    params = module.params
    refusal = invalid_params(params)
    if refusal:
        module.fail_json(msg=refusal)
    if params['holder'] is None:
        params['holder'] = default_holder(getpass.getuser(), socket.gethostname(), run_id())
    request = dict((key, params[key]) for key in ('state', 'name', 'namespace', 'holder', 'ttl', 'steal_expired'))
    token_file = params['holder_token_file']
    try:
        token = read_token(token_file) if token_file else None
    except TokenFileError as error:
        module.fail_json(msg=str(error))
    # a token not written yet (check mode, or before the write) still decides as a token that matches no Lease
    request['token_sha256'] = token_sha256_of(token or (secrets.token_urlsafe(32) if token_file else None))
    api = api_client_from_module(module)
    for dummy in range(CONFLICT_RETRIES):
        lease = read_lease(module, api, params['name'], params['namespace'])
        now = time.time()
        decision = decide(lease, request, now)
        if decision.action == 'fail':
            module.fail_json(msg=decision.message, **result_of(lease, now))
        if decision.action == 'none' or module.check_mode:
            after = decision.body if decision.body is not None else lease
            if decision.action == 'none' and params['state'] == 'released' and not module.check_mode:
                remove_token(module, token_file)
            module.exit_json(changed=decision.changed, msg=decision.message, stolen=decision.stolen,
                             **result_of(after, now))
        if token_file and token is None and params['state'] == 'acquired':
            token = create_and_prove(module, token_file, request)
            continue   # decide again with the token as written (another process may have written it first)
        try:
            written = write_lease(api, decision, params['namespace'])
        except Exception as error:  # pylint: disable=broad-except
            if status_of(error)[0] == 409:
                continue  # someone wrote the Lease since we read it: decide again on what is there now
            module.fail_json(msg=api_error_message(error, '%s lock %s/%s' % (
                params['state'], params['namespace'], params['name'])))
        if params['state'] == 'released':
            remove_token(module, token_file)
        module.exit_json(changed=True, msg=decision.message, stolen=decision.stolen,
                         **result_of(written, time.time()))
    module.fail_json(msg='lock %s/%s kept changing under us (%d conflicts); try again' % (
        params['namespace'], params['name'], CONFLICT_RETRIES))


if __name__ == '__main__':
    main()
