# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The pod behind the module gpuops.nvidia.gpu_smoke_test: ``run_smoke_pod(api, params, gpus, warn)`` creates a
pod on the node asking for its GPUs, watches it to its end, reads its log and deletes it again; ``listed_gpus(log)``
are the C(nvidia-smi -L) lines of the log. ``params`` are the module's options."""

from __future__ import annotations

import re
import time

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    api_error_message, request, resource_path, status_of)
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
