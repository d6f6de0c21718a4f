"""The twin's kube-scheduler: pure placement rules plus one `schedule_pending` pass.

Filters follow the upstream plugins of the same names: NodeUnschedulable (cordon), NodeName,
NodeAffinity (nodeSelector + required matchExpressions/matchFields), TaintToleration
(NoSchedule/NoExecute) and NodeResourcesFit (requests, `nvidia.com/gpu`, `nvidia.com/mig-*`,
pods count) against allocatable minus what is already bound. Among feasible nodes the one with
the fewest bound pods wins, so replicas spread the way the default LeastAllocated score does.
"""

from __future__ import annotations

import re
from decimal import Decimal

from ..api.eviction import pod_is_terminal

UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"

_QUANTITY_RE = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX_FACTORS = {
    "": Decimal(1), "m": Decimal("0.001"), "u": Decimal("0.000001"), "n": Decimal("0.000000001"),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}


def parse_quantity(text) -> Decimal:
    """Parse a Kubernetes resource.Quantity ("500m", "80Gi", "8", 8) into a Decimal of base units. None (a
    `null` a client's apply left in `resources`) is 0, as kube-apiserver decodes a null Quantity."""
    if text is None:
        return Decimal(0)
    match = _QUANTITY_RE.match(str(text).strip())
    if not match or match.group(2) not in _SUFFIX_FACTORS:
        raise ValueError("invalid resource quantity %r" % (text,))
    return Decimal(match.group(1)) * _SUFFIX_FACTORS[match.group(2)]


def pod_requests(pod: dict) -> dict:
    """Sum of container requests per resource name (limits count as requests when requests are absent,
    as the API server defaults them). Init containers count with their maximum, as upstream does."""
    spec = pod.get("spec") or {}
    totals = {}
    for container in spec.get("containers") or []:
        for name, amount in _container_requests(container).items():
            totals[name] = totals.get(name, Decimal(0)) + amount
    for container in spec.get("initContainers") or []:
        for name, amount in _container_requests(container).items():
            totals[name] = max(totals.get(name, Decimal(0)), amount)
    return totals


def _container_requests(container: dict) -> dict:
    resources = container.get("resources") or {}
    merged = dict(resources.get("limits") or {})
    merged.update(resources.get("requests") or {})
    return {name: parse_quantity(value) for name, value in merged.items()}


def _expression_matches(expression: dict, values_by_key: dict) -> bool:
    key = expression.get("key")
    operator = expression.get("operator")
    values = expression.get("values") or []
    present = key in values_by_key
    if operator == "In":
        return present and values_by_key[key] in values
    if operator == "NotIn":
        return not present or values_by_key[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and values:
        try:
            actual, wanted = int(values_by_key[key]), int(values[0])
        except ValueError:
            return False
        return actual > wanted if operator == "Gt" else actual < wanted
    return False


def tolerates(tolerations: list, taint: dict) -> bool:
    """True when one of the pod's tolerations matches the taint (key, value, effect, operator)."""
    for toleration in tolerations or []:
        effect = toleration.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        operator = toleration.get("operator") or "Equal"
        key = toleration.get("key")
        if operator == "Exists":
            if not key or key == taint.get("key"):
                return True
            continue
        if key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def untolerated_taints(pod: dict, node: dict, effects=("NoSchedule", "NoExecute")) -> list:
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    return [taint for taint in (node.get("spec") or {}).get("taints") or []
            if taint.get("effect") in effects and not tolerates(tolerations, taint)]


def node_matches_affinity(pod: dict, node: dict) -> bool:
    """nodeSelector plus requiredDuringSchedulingIgnoredDuringExecution node affinity."""
    spec = pod.get("spec") or {}
    node_labels = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if node_labels.get(key) != value:
            return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if not required:
        return True
    node_fields = {"metadata.name": node["metadata"]["name"]}
    # nodeSelectorTerms are ORed; expressions inside one term are ANDed.
    for term in required.get("nodeSelectorTerms") or []:
        expressions_ok = all(_expression_matches(e, node_labels) for e in term.get("matchExpressions") or [])
        fields_ok = all(_expression_matches(e, node_fields) for e in term.get("matchFields") or [])
        if expressions_ok and fields_ok and (term.get("matchExpressions") or term.get("matchFields")):
            return True
    return False


def free_resources(node: dict, bound_pods: list) -> dict:
    """Allocatable minus the requests of the bound pods that still hold node resources (not
    Succeeded/Failed); `pods` counts pods."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    free = {name: parse_quantity(value) for name, value in allocatable.items()}
    active = [pod for pod in bound_pods if not pod_is_terminal(pod)]
    if "pods" in free:
        free["pods"] -= len(active)
    for pod in active:
        for name, amount in pod_requests(pod).items():
            free[name] = free.get(name, Decimal(0)) - amount
    return free


def unfit_reasons(pod: dict, node: dict, free: dict, requests=None) -> list:
    """Why the pod cannot go to the node, in the scheduler's own words (empty list = it fits);
    `free` is the node's allocatable minus what is bound there (see `free_resources`)."""
    if (node.get("spec") or {}).get("unschedulable") and not tolerates(
            (pod.get("spec") or {}).get("tolerations"), {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"}):
        return ["node(s) were unschedulable"]
    if not node_matches_affinity(pod, node):
        return ["node(s) didn't match Pod's node affinity/selector"]
    taints = untolerated_taints(pod, node)
    if taints:
        taint = taints[0]
        shown = taint["key"] + (": " + taint["value"] if taint.get("value") else "")
        return ["node(s) had untolerated taint {%s}" % shown]
    reasons = []
    if free.get("pods", Decimal(1)) < 1:
        reasons.append("Too many pods")
    for name, amount in sorted((requests if requests is not None else pod_requests(pod)).items()):
        if amount > 0 and free.get(name, Decimal(0)) < amount:
            reasons.append("Insufficient %s" % name)
    return reasons


class Placement:
    """Free resources and pod counts per node for one scheduling pass, kept current as pods are bound,
    so placing P pods on N nodes costs P x N cheap checks, not P x N x (pods per node)."""

    def __init__(self, nodes: list, pods: list):
        self.nodes = nodes
        grouped = pods_by_node_name(pods)
        self.free = {}
        self.pod_counts = {}
        for node in nodes:
            name = node["metadata"]["name"]
            bound = grouped.get(name, [])
            self.free[name] = free_resources(node, bound)
            self.pod_counts[name] = len(bound)

    def pick(self, pod: dict):
        """(node_name, None) for the feasible node with the fewest pods, or (None, FailedScheduling message)."""
        requests = pod_requests(pod)
        best = None
        reason_counts = {}
        for node in self.nodes:
            name = node["metadata"]["name"]
            reasons = unfit_reasons(pod, node, self.free[name], requests)
            if reasons:
                for reason in reasons:
                    reason_counts[reason] = reason_counts.get(reason, 0) + 1
            elif best is None or (self.pod_counts[name], name) < best:
                best = (self.pod_counts[name], name)
        if best is not None:
            return best[1], None
        return None, unschedulable_message(len(self.nodes), reason_counts)

    def assign(self, pod: dict, node_name: str) -> None:
        free = self.free.setdefault(node_name, {})
        for name, amount in pod_requests(pod).items():
            free[name] = free.get(name, Decimal(0)) - amount
        if "pods" in free:
            free["pods"] -= 1
        self.pod_counts[node_name] = self.pod_counts.get(node_name, 0) + 1


def unschedulable_message(node_count: int, reason_counts: dict) -> str:
    parts = ", ".join("%d %s" % (count, reason) for reason, count in sorted(reason_counts.items()))
    message = "0/%d nodes are available" % node_count
    if parts:
        message += ": " + parts
    return message + ". preemption: 0/%d nodes are available: %d Preemption is not helpful for scheduling." % (
        node_count, node_count)


def pods_by_node_name(pods) -> dict:
    grouped = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name:
            grouped.setdefault(node_name, []).append(pod)
    return grouped
