"""The eviction work of the GPU Operator's upgrade controller (k8s-operator-libs `pod_manager.go`,
`drain_manager.go`): which pods a node's GPU-pod deletion or drain takes, and one asynchronous task per node
that evicts them through the Eviction API (PodDisruptionBudgets honoured, 429s retried) until they are gone or
the timeout passes — as kubectl's drain helper, which both use, does.

Pod deletion (`podDeletion`): pods Running or Pending that ask for `nvidia.com/gpu*` or `nvidia.com/mig-*`.
Drain (`drain`): every pod on the node matching `drain.podSelector` plus
`nvidia.com/gpu-driver-upgrade-drain.skip!=true`.
Both skip DaemonSet pods (IgnoreAllDaemonSets); unmanaged pods need `force`, pods with emptyDir `deleteEmptyDir`,
else the helper refuses before evicting anything (the task fails at once).
"""
from __future__ import annotations

from ..api.errors import ApiError
from ..api.eviction import controller_owner, pod_is_terminal
from ..api.selectors import parse_label_selector
from .objects import meta
from .scheduler import pod_requests

DRAIN_SKIP_LABEL = "nvidia.com/gpu-driver-upgrade-drain.skip"
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")


def is_gpu_pod(pod: dict) -> bool:
    """gpu-operator's pod-deletion filter: Running or Pending, a container asking for a GPU resource."""
    if (pod.get("status") or {}).get("phase") not in ("Running", "Pending"):
        return False
    return any(name.startswith(GPU_RESOURCE_PREFIXES) and amount > 0 for name, amount in pod_requests(pod).items())


def drain_selects(pod: dict, pod_selector: str) -> bool:
    selector = ",".join(part for part in (pod_selector or "", DRAIN_SKIP_LABEL + "!=true") if part)
    return parse_label_selector(selector).matches(meta(pod).get("labels") or {})


def _uses_empty_dir(pod: dict) -> bool:
    return any("emptyDir" in volume for volume in (pod.get("spec") or {}).get("volumes") or [])


def refusals(pods: list, force: bool, delete_empty_dir: bool) -> list:
    """What kubectl's drain helper refuses before evicting (its error texts)."""
    errors = []
    unmanaged = [meta(pod)["name"] for pod in pods if controller_owner(pod) is None]
    if unmanaged and not force:
        errors.append("cannot delete Pods that declare no controller (use --force to override): %s"
                      % ", ".join("%s/%s" % (meta(pod).get("namespace"), meta(pod)["name"])
                                  for pod in pods if controller_owner(pod) is None))
    local = [pod for pod in pods if _uses_empty_dir(pod)]
    if local and not delete_empty_dir:
        errors.append("cannot delete Pods with local storage (use --delete-emptydir-data to override): %s"
                      % ", ".join("%s/%s" % (meta(pod).get("namespace"), meta(pod)["name"]) for pod in local))
    return errors


class EvictionTask:
    """One node's pod deletion or drain in progress (the libraries' goroutine); `step(now)` -> None while
    running, True when every pod is gone, False on refusal or timeout (`error` says why)."""

    def __init__(self, manager, node_name: str, pods: list, timeout_s: float, now: float):
        self.manager = manager
        self.node_name = node_name
        self.keys = [(meta(pod).get("namespace"), meta(pod)["name"], meta(pod).get("uid")) for pod in pods]
        self.deadline = now + timeout_s if timeout_s > 0 else None
        self.error = None

    def step(self, now: float):
        remaining = []
        for namespace, name, uid in self.keys:
            pod = self.manager.informer.get("pods", name, namespace)
            if pod is None or meta(pod).get("uid") != uid or pod_is_terminal(pod):
                continue
            remaining.append(pod)
            if meta(pod).get("deletionTimestamp"):
                continue
            try:
                self.manager.store.evict(namespace, name, {"apiVersion": "policy/v1", "kind": "Eviction",
                                                           "metadata": {"name": name, "namespace": namespace}})
            except ApiError as error:
                if error.code == 404:
                    continue
                self.error = "error when evicting pods/\"%s\" -n \"%s\": %s" % (name, namespace, error.message)
        if not remaining:
            return True
        if self.deadline is not None and now >= self.deadline:
            self.error = "drain did not complete within the timeout: %s" % (
                self.error or "pods still terminating: %s" % ", ".join(meta(pod)["name"] for pod in remaining))
            return False
        return None
