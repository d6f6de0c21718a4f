# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The pod behind the module gpuops.nvidia.gpu_smoke_test: ``run_smoke_pod(api, params, gpus, warn)`` creates a
pod on the node asking for its GPUs, watches it to its end, reads its log and deletes it again; ``listed_gpus(log)``
are the C(nvidia-smi -L) lines of the log; ``smoke_node`` is the whole test of one node, judged (the module runs it
for one node, or for each node of a batch at once). ``params`` are the module's options."""

from __future__ import annotations

import re
import time
import uuid

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    api_error_message, request, request_json, resource_path, status_of)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.watch import watch_events

GPU_LINE = re.compile(r"^GPU [0-9]+: ", re.MULTILINE)


def pod_manifest(name, params, gpus):
    container = {"name": "smoke", "image": params["image"], "command": list(params["command"]),
                 "resources": {"limits": {params["resource"]: str(gpus)}}}
    spec = {"nodeName": params["node"], "restartPolicy": "Never", "containers": [container],
            "tolerations": [{"operator": "Exists"}]}
    if params["runtime_class"]:
        spec["runtimeClassName"] = params["runtime_class"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": params["namespace"],
                         "labels": {"app.kubernetes.io/managed-by": "gpuops.nvidia",
                                    "gpuops.nvidia/smoke-test": params["node"]}},
            "spec": spec}


def wait_finished(api, name, namespace, timeout):
    """The pod's final phase, watched (no polling); the last phase seen on timeout."""
    phase = "Pending"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = request(api, "GET", resource_path("v1", "pods", namespace=namespace), stream=True,
                           query=dict(watch=True, field_selector="metadata.name=%s" % name,
                                      timeout_seconds=max(1, int(deadline - time.monotonic()))))
        try:
            for dummy, obj in watch_events(response):
                phase = (obj.get("status") or {}).get("phase") or phase
                if phase in ("Succeeded", "Failed"):
                    return phase
        finally:
            response.release_conn()
    return phase


class SmokePodError(Exception):
    """The pod could not be created (``phase`` None), or its log not read (``phase`` the pod's last phase)."""

    def __init__(self, message, phase=None):
        super(SmokePodError, self).__init__(message)
        self.phase = phase
        self.result = {}


def run_smoke_pod(api, name, params, gpus, warn):
    """``(phase, log)`` of pod ``name`` run to its end on ``params['node']``; the pod is deleted again, and a
    deletion that fails for another reason than "already gone" goes to ``warn(message)``."""
    try:
        request(api, "POST", resource_path("v1", "pods", namespace=params["namespace"]),
                body=pod_manifest(name, params, gpus))
    except Exception as error:
        raise SmokePodError(api_error_message(error, "create the smoke-test pod on %s" % params["node"]))
    try:
        phase = wait_finished(api, name, params["namespace"], params["timeout"])
        try:
            log = request(api, "GET", resource_path("v1", "pods", name, params["namespace"], "log")).data.decode(
                "utf-8", "replace")
        except Exception as error:
            raise SmokePodError(api_error_message(error, "read the log of pod %s" % name), phase=phase)
    finally:
        try:
            request(api, "DELETE", resource_path("v1", "pods", name, params["namespace"]),
                    query=dict(grace_period_seconds=0))
        except Exception as error:
            if status_of(error)[0] != 404:   # gone already is fine; anything else leaves a pod behind: say so
                warn(api_error_message(error, "delete the smoke-test pod %s/%s" % (params["namespace"], name)))
    return phase, log


def listed_gpus(log):
    return [line for line in log.splitlines() if GPU_LINE.match(line)]


def smoke_node(api, params, node, gpus, warn, check_mode=False):
    """The smoke test of one node (its pod run, judged and gone again): the result the module returns for it.

    ``gpus`` 0 requests the node's whole allocatable ``params['resource']``; ``check_mode`` stops before the pod
    is created. Raises SmokePodError (with what is
    known of the pod in ``error.result``) when the test fails."""
    started = time.monotonic()
    params = dict(params, node=node)
    if gpus <= 0:
        try:
            found = request_json(api, "GET", resource_path("v1", "nodes", node))
            allocatable = (found.get("status") or {}).get("allocatable") or {}
        except Exception as error:
            raise SmokePodError(api_error_message(error, "read node %s" % node))
        gpus = int(allocatable.get(params["resource"], "0"))
        if gpus <= 0:
            raise SmokePodError("%s has no allocatable %s: nothing to test" % (node, params["resource"]))
    name = "gpuops-smoke-%s" % uuid.uuid4().hex[:8]
    if check_mode:
        return dict(changed=False, pod=name, elapsed=0.0)
    try:
        phase, log = run_smoke_pod(api, name, params, gpus, warn)
    except SmokePodError as error:
        error.result = {} if error.phase is None else dict(pod=name, phase=error.phase)
        raise
    listed = listed_gpus(log)
    # the pod is gone again: the test leaves nothing changed, so a re-run of a runbook reports no change
    result = dict(changed=False, pod=name, phase=phase, gpus_listed=listed, log=log,
                  elapsed=round(time.monotonic() - started, 1))
    problem = None
    if phase != "Succeeded":
        problem = "smoke-test pod on %s ended %s: %s" % (node, phase, log.strip()[-500:])
    elif len(listed) != gpus:
        problem = "smoke-test pod on %s listed %d GPU(s), %d expected" % (node, len(listed), gpus)
    if problem:
        failure = SmokePodError(problem, phase=phase)
        failure.result = result
        raise failure
    return result
