#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: pods_completion_wait
short_description: Wait until the pods matching a selector on a node have finished
version_added: 0.1.0
description:
  - Lets work that must not be evicted (training jobs, for example) finish before a node is drained, as the GPU
    Operator's C(waitForCompletion) does. Run it after the node is cordoned, so no new such pod lands on it.
  - Watches the node's pods (one list and one watch, no polling) until none that matches O(selector) is still
    running (phase other than C(Succeeded) or C(Failed)), or O(timeout) passes; then fails naming the pods still
    running.
author: gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.k8s_auth
attributes:
  check_mode:
    support: full
    details: Reports the matching pods once and does not wait.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  node:
    description: The node.
    type: str
    required: true
  selector:
    description: A label selector of the pods to wait for, for example V(gpuops.nvidia/wait-before-drain=true).
    type: str
    required: true
  timeout:
    description: Seconds to wait.
    type: int
    default: 3600
"""

EXAMPLES = r"""
- name: Let the training jobs on the node finish
  gpuops.nvidia.pods_completion_wait:
    node: gpu-node-01
    selector: workload=training
    timeout: 7200
  delegate_to: localhost
"""

RETURN = r"""
running:
  description: Pods still running when the wait ended (C(namespace/name)); empty on success.
  returned: always
  type: list
  elements: str
waited:
  description: Seconds waited.
  returned: always
  type: float
"""

import queue
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC, api_client_from_module, api_error_message, list_call, resource_path)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.pods import is_finished, pod_key
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.watch import ListWatch


def still_running(pods):
    return sorted(pod_key(pod) for pod in pods if not is_finished(pod))


def main():
    argument_spec = dict(
        K8S_AUTH_ARG_SPEC,
        node=dict(type="str", required=True),
        selector=dict(type="str", required=True),
        timeout=dict(type="int", default=3600),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    params = module.params
    api = api_client_from_module(module)
    pods_call = list_call(api, resource_path("v1", "pods"), label_selector=params["selector"],
                          field_selector="spec.nodeName=%s" % params["node"])
    started = time.monotonic()
    events = queue.Queue()
    watch = ListWatch("pods", pods_call, events)
    running, known = None, {}
    try:
        if module.check_mode:
            watch.list_once()
        else:
            watch.start(time.time() + params["timeout"])
        while running is None or (running and not module.check_mode):
            left = params["timeout"] - (time.monotonic() - started)
            try:
                _key, kind, payload = events.get(timeout=max(0.1, left))
            except queue.Empty:
                break
            if kind == "FAILED":
                module.fail_json(msg="watching pods on %s: %s" % (params["node"], payload))
            if kind == "SYNC":
                known = dict((pod_key(pod), pod) for pod in payload)
            elif kind == "DELETED":
                known.pop(pod_key(payload), None)
            else:
                known[pod_key(payload)] = payload
            running = still_running(known.values())
            if left <= 0:
                break
    except Exception as error:
        action = "list pods matching %s on %s" % (params["selector"], params["node"])
        module.fail_json(msg=api_error_message(error, action))
    finally:
        watch.stop()
    running = running or []
    waited = round(time.monotonic() - started, 1)
    if running and not module.check_mode:
        module.fail_json(msg="pods matching %s still running on %s after %ss: %s" % (
            params["selector"], params["node"], params["timeout"], ", ".join(running)), running=running, waited=waited)
    module.exit_json(changed=False, running=running, waited=waited)


if __name__ == "__main__":
    main()
