# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The restart engine of device_plugin_restart: a ``NodeRestart`` per node deletes that node's plugin pod and
follows its replacement (and the node's GPU allocatable) with a list+watch; ``run_in_parallel(restarts)`` runs them
in one thread each. What counts as the replacement, Ready and restored is k8s/device_plugin.py's."""

from __future__ import annotations

import queue
import threading
import time

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import device_plugin as _device_plugin
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    NodeApi, api_error_message, list_call, request, resource_path, status_of)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.watch import ListWatch


class NodeRestart:
    """Delete one node's plugin pod, then watch for its Ready replacement and the node's allocatable."""

    def __init__(self, api, daemonset, node, pod, deadline, wait_allocatable):
        self.api = api
        self.daemonset = daemonset
        self.namespace = daemonset["metadata"]["namespace"]
        self.selector = _device_plugin.pod_selector(daemonset)
        self.node_name = node["metadata"]["name"]
        self.pod = pod
        self.deadline = deadline
        self.wait_allocatable = wait_allocatable
        self.report = {"node": self.node_name, "deleted_pod": pod["metadata"]["name"], "new_pod": None,
                       "ready": False, "pod_state": None}
        self.resources = _device_plugin.gpu_resources(node)
        self.error = None

    def remaining(self):
        return self.deadline - time.monotonic()

    def _wait(self, key, list_call, satisfied):
        """Follow ``list_call``'s objects (list + watch) until ``satisfied(objects)`` or the deadline."""
        events = queue.Queue()
        watcher = ListWatch(key, list_call, events).start(time.time() + self.remaining())
        objects = {}
        try:
            while self.remaining() > 0:
                try:
                    _key, kind, payload = events.get(timeout=min(1.0, max(0.01, self.remaining())))
                except queue.Empty:
                    continue
                if kind == "FAILED":
                    raise RuntimeError(payload)
                if kind == "SYNC":
                    objects = {item["metadata"]["uid"]: item for item in payload}
                elif kind == "DELETED":
                    objects.pop(payload["metadata"]["uid"], None)
                else:
                    objects[payload["metadata"]["uid"]] = payload
                if satisfied(list(objects.values())):
                    return True
            return False
        finally:
            watcher.stop()

    def _replacement_ready(self, pods):
        found = _device_plugin.replacement(pods, self.daemonset, self.node_name, self.pod["metadata"]["uid"])
        if found:
            self.report.update(new_pod=found["pod"], ready=found["ready"], pod_state=found["state"])
        return bool(found and found["ready"])

    def _allocatable_back(self, nodes):
        for node in nodes:
            self.resources = _device_plugin.gpu_resources(node)
        return _device_plugin.allocatable_restored(self.resources)

    def _wait_for_pod(self):
        return self._wait("pods", list_call(self.api, resource_path("v1", "pods", namespace=self.namespace),
                                            label_selector=self.selector,
                                            field_selector="spec.nodeName=" + self.node_name),
                          self._replacement_ready)

    def _wait_for_allocatable(self):
        return self._wait("node", list_call(self.api, resource_path("v1", "nodes"),
                                            field_selector="metadata.name=" + self.node_name),
                          self._allocatable_back)

    def run(self):
        try:
            options = {"preconditions": {"uid": self.pod["metadata"]["uid"]}}
            try:
                request(self.api, "DELETE", resource_path("v1", "pods", self.pod["metadata"]["name"], self.namespace),
                        body=options)
            except Exception as error:
                if status_of(error)[0] not in (404, 409):     # already gone (or replaced): wait for the new one
                    raise
            if not self._wait_for_pod():
                state = self.report.get("pod_state")
                self.error = "replacement of %s on node %s not Running and Ready in time%s" % (
                    self.pod["metadata"]["name"], self.node_name,
                    " (%s: %s)" % (self.report["new_pod"], state) if state else "")
            elif self.wait_allocatable and not self._wait_for_allocatable():
                self.error = ("node %s: GPU allocatable %s still differs from capacity %s"
                              % (self.node_name, self.resources["allocatable"], self.resources["capacity"]))
            elif not self.wait_allocatable:
                self.resources = _device_plugin.gpu_resources(NodeApi(self.api).read_node(self.node_name))
        except Exception as error:
            self.error = api_error_message(error, "restart the device plugin on %s" % self.node_name)


def run_in_parallel(restarts):
    """Runs every restart in its own thread and returns when all are done (each keeps its error)."""
    threads = [threading.Thread(target=restart.run, daemon=True) for restart in restarts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
