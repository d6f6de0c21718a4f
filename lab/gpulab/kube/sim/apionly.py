"""`--api-only N`: N extra GPU Node objects that exist only in the API (scale work), with one cheap
shared kubelet for all of them.

Upstream kubelets renew their Lease every 10 s and post node status only when it changes or every
`nodeStatusReportFrequency` (5 min). The shared kubelet renews in batches, once per `batch_s` (1 s), each
batch a slice of the fleet, so 1,000 nodes cost one controller pass a second instead of a pass per renewal.
To keep `kube-records.jsonl` small it renews each Lease every 60 s by default (the twin's node lifecycle
does not judge Lease age) and posts status every 5 min, as upstream.
Pods bound to these nodes are started and finalized like on a real kubelet, without containers.
"""

from __future__ import annotations

import math

from gpulab.nvidia.profiles import H100_MEMORY_MIB, H100_NAME

from ..api.eviction import pod_is_terminal
from ..api.timefmt import rfc3339
from . import deviceplugin
from .objects import pod_is_terminating
from .nodestatus import (CONTAINER_RUNTIME_VERSION, KUBELET_VERSION, LEASE_NAMESPACE, NODE_ALLOCATABLE, NODE_CAPACITY,
                         OS_IMAGE, micro_time, node_lease, ready_conditions, status_unknown_conditions)

API_ONLY_LABEL = "gpulab.io/api-only"
GPUS_PER_NODE = 8


def api_only_node_name(index: int) -> str:
    return "api-gpu-%04d" % index


class ApiOnlyFleet:
    """The Node + Lease objects of the api-only nodes and their shared heartbeat loop."""

    def __init__(self, client, count: int, lease_renew_s: float = 60.0, status_report_s: float = 300.0,
                 batch_s: float = 1.0, driver_version: str = "550.54.15"):
        self.client = client
        self.names = [api_only_node_name(index) for index in range(1, count + 1)]
        self.lease_renew_s = lease_renew_s
        self.status_report_s = status_report_s
        self.batch_s = batch_s
        self.driver_version = driver_version
        self.down = set()
        self._lease_cursor = 0
        self._status_cursor = 0
        self._lease_credit = 0.0      # renewals owed, carried between batches (fractions add up)
        self._status_credit = 0.0
        self._last_sync = None

    def register(self, now: float) -> None:
        for name in self.names:
            if self.client.informer.get("nodes", name) is None:
                node = self.client.create("nodes", self._node_object(name, now))
                self._create_lease(node, now)

    def _labels(self, name: str) -> dict:
        gpus = [{"index": index, "uuid": "", "name": H100_NAME, "memory_mib": H100_MEMORY_MIB}
                for index in range(GPUS_PER_NODE)]
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  API_ONLY_LABEL: "true"}
        labels.update(deviceplugin.gfd_labels(gpus, self.driver_version, True))
        return labels

    def _node_object(self, name: str, now: float) -> dict:
        extended = {deviceplugin.GPU_RESOURCE: str(GPUS_PER_NODE)}
        return {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": self._labels(name)},
            "spec": {},
            "status": {"capacity": dict(NODE_CAPACITY, **extended), "allocatable": dict(NODE_ALLOCATABLE, **extended),
                       "conditions": ready_conditions([], now, True),
                       "addresses": [{"type": "Hostname", "address": name}],
                       "nodeInfo": {"bootID": "api-only-%s" % name, "kubeletVersion": KUBELET_VERSION,
                                    "kubeProxyVersion": KUBELET_VERSION, "osImage": OS_IMAGE,
                                    "kernelVersion": "6.1.0-18-amd64", "operatingSystem": "linux",
                                    "architecture": "amd64", "containerRuntimeVersion": CONTAINER_RUNTIME_VERSION,
                                    "machineID": "", "systemUUID": ""}},
        }

    def _create_lease(self, node, now: float) -> None:
        if node is None:
            return
        self.client.create("leases", node_lease(node, now), namespace=LEASE_NAMESPACE)

    # --- heartbeats -----------------------------------------------------------------------------
    def sync(self, now: float) -> None:
        if self._last_sync is None:
            self._last_sync = now
        elapsed = now - self._last_sync
        if not self.names or elapsed < self.batch_s:
            return
        self._last_sync = now
        self._lease_credit += len(self.names) * elapsed / self.lease_renew_s
        self._status_credit += len(self.names) * elapsed / self.status_report_s
        self._lease_cursor, self._lease_credit = self._renew_slice(
            self._lease_cursor, self._lease_credit, now, self._renew_lease)
        self._status_cursor, self._status_credit = self._renew_slice(
            self._status_cursor, self._status_credit, now, self._post_status)

    def _renew_slice(self, cursor: int, credit: float, now: float, action):
        """Run `action` on the next int(credit) nodes, round-robin; returns (cursor, credit left)."""
        count = min(len(self.names), int(math.floor(credit)))
        for offset in range(count):
            name = self.names[(cursor + offset) % len(self.names)]
            if name not in self.down:
                action(name, now)
        return (cursor + count) % len(self.names), min(credit - count, float(len(self.names)))

    def _renew_lease(self, name: str, now: float) -> None:
        lease = self.client.informer.get("leases", name, LEASE_NAMESPACE)
        if lease is None:
            self._create_lease(self.client.informer.get("nodes", name), now)
        else:
            self.client.patch("leases", lease, {"spec": {"renewTime": micro_time(now)}})

    def _post_status(self, name: str, now: float) -> None:
        node = self.client.informer.get("nodes", name)
        if node is None:
            node = self.client.create("nodes", self._node_object(name, now))
            self._create_lease(node, now)
            return
        conditions = ready_conditions((node.get("status") or {}).get("conditions") or [], now, True)
        self.client.patch("nodes", node, {"status": {"conditions": conditions}}, subresource="status")

    def set_down(self, name: str, down: bool, now: float) -> None:
        """kubelet-down on an api-only node: stop posting and mark it NotReady (Unknown)."""
        node = self.client.informer.get("nodes", name)
        if down:
            self.down.add(name)
            if node is not None:
                unknown = status_unknown_conditions((node.get("status") or {}).get("conditions") or [], now)
                self.client.patch("nodes", node, {"status": {"conditions": unknown}}, subresource="status")
        else:
            self.down.discard(name)
            self._post_status(name, now)

    # --- pods -----------------------------------------------------------------------------------
    def sync_pods(self, pods_by_node: dict, now: float) -> None:
        for name in self.names:
            if name in self.down:
                continue
            for pod in pods_by_node.get(name, ()):
                if pod_is_terminating(pod):
                    self.client.delete("pods", pod, grace_period_seconds=0)
                elif not pod_is_terminal(pod) and (pod.get("status") or {}).get("phase") != "Running":
                    self._start(pod, now)

    def _start(self, pod: dict, now: float) -> None:
        stamp = rfc3339(now)
        statuses = [{"name": c.get("name"), "image": c.get("image", ""), "imageID": "", "ready": True,
                     "started": True, "restartCount": 0, "state": {"running": {"startedAt": stamp}}, "lastState": {}}
                    for c in (pod.get("spec") or {}).get("containers") or []]
        conditions = [{"type": kind, "status": "True", "lastTransitionTime": stamp}
                      for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                   "PodScheduled")]
        self.client.patch("pods", pod, {"status": {"phase": "Running", "startTime": stamp, "conditions": conditions,
                                                   "containerStatuses": statuses}}, subresource="status")
