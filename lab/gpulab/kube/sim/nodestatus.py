"""What a kubelet posts about its node: versions, capacity of an 8-GPU HGX-class host, the four node conditions
and the Lease in kube-node-lease (shared by the per-node kubelets and the API-only fleet)."""
from __future__ import annotations

from ..api.timefmt import rfc3339
from .objects import meta

KUBELET_VERSION = "v1.34.2"
CONTAINER_RUNTIME_VERSION = "containerd://1.7.24"
OS_IMAGE = "Debian GNU/Linux 12 (bookworm)"
LEASE_DURATION_S = 40
LEASE_NAMESPACE = "kube-node-lease"
# A GPU node of the twin: an 8-GPU HGX-class host.
NODE_CAPACITY = {"cpu": "96", "memory": "1056426312Ki", "pods": "110", "ephemeral-storage": "1843126272Ki",
                 "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
NODE_ALLOCATABLE = {"cpu": "95", "memory": "1054226312Ki", "pods": "110", "ephemeral-storage": "1698632785592",
                    "hugepages-1Gi": "0", "hugepages-2Mi": "0"}


def conditions_without_times(conditions) -> list:
    return [{k: v for k, v in c.items() if k not in ("lastHeartbeatTime", "lastTransitionTime")}
            for c in conditions or []]


def status_unknown_conditions(conditions: list, now: float) -> list:
    """``conditions`` as the node lifecycle controller rewrites them when the kubelet stops posting status."""
    return [dict(condition, status="Unknown", reason="NodeStatusUnknown",
                 message="Kubelet stopped posting node status.", lastTransitionTime=rfc3339(now))
            for condition in conditions]


def micro_time(now: float) -> str:
    """A metav1.MicroTime (what a Lease's renewTime holds)."""
    return rfc3339(now, digits=6)


def node_lease(node: dict, now: float) -> dict:
    """The kubelet's Lease in kube-node-lease, owned by its Node and renewed at ``now``."""
    name = meta(node)["name"]
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": LEASE_NAMESPACE,
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name,
                                              "uid": meta(node).get("uid")}]},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_S, "renewTime": micro_time(now)}}


def ready_conditions(previous: list, now: float, heartbeat_due: bool) -> list:
    """The kubelet's four node conditions; transition times kept while the status holds."""
    stamp = rfc3339(now)
    old = {c.get("type"): c for c in previous}
    wanted = [("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
              ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
              ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
              ("Ready", "True", "KubeletReady", "kubelet is posting ready status")]
    conditions = []
    for condition_type, status, reason, message in wanted:
        before = old.get(condition_type) or {}
        same = before.get("status") == status
        conditions.append({
            "type": condition_type, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": stamp if heartbeat_due or not same else before.get("lastHeartbeatTime", stamp),
            "lastTransitionTime": before.get("lastTransitionTime", stamp) if same else stamp,
        })
    return conditions
