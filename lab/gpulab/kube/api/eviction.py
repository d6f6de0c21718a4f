"""PodDisruptionBudget arithmetic (policy/v1), as the disruption controller and the eviction REST handler
of kube-apiserver compute it.

- healthy pod: matches the selector, has no deletionTimestamp and its ``Ready`` condition is ``True``;
- ``minAvailable: N`` -> expected = number of matching pods, desired = N;
- ``minAvailable: P%`` / ``maxUnavailable`` -> expected = the sum of the scale (``spec.replicas``) of the
  pods' controllers; desired = ceil(P% of expected) or expected - maxUnavailable (percent rounded up);
- ``disruptionsAllowed = max(0, currentHealthy - desiredHealthy)``.

Twin simplification: a matching pod without a controller counts as a controller of scale 1 (the real
controller reports an error and allows no disruption).
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional

from .selectors import label_selector_from_object

EVICTION_REFUSED_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


def pod_is_ready(pod: dict) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def pod_is_healthy(pod: dict) -> bool:
    return not (pod.get("metadata") or {}).get("deletionTimestamp") and pod_is_ready(pod)


def pod_is_terminal(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def pods_selected_by(pdb: dict, pods: List[dict]) -> List[dict]:
    selector = label_selector_from_object((pdb.get("spec") or {}).get("selector"))
    return [pod for pod in pods if selector.matches((pod.get("metadata") or {}).get("labels"))]


def scaled_int_or_percent(value, total: int, round_up: bool) -> int:
    """An IntOrString (``2`` or ``"50%"``) scaled against ``total`` (upstream
    ``intstr.GetScaledValueFromIntOrPercent``)."""
    if isinstance(value, str) and value.endswith("%"):
        fraction = int(value[:-1]) * total / 100.0
        return int(math.ceil(fraction)) if round_up else int(math.floor(fraction))
    return int(value)


def controller_owner(obj: dict) -> Optional[dict]:
    """The ownerReference marked ``controller: true``, or None."""
    for reference in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if reference.get("controller"):
            return reference
    return None


_SCALED_KINDS = {"ReplicaSet": "replicasets", "Deployment": "deployments", "StatefulSet": "statefulsets"}


def controller_scale(reference: dict, namespace: str,
                     lookup: Callable[[str, str, str], Optional[dict]]) -> Optional[int]:
    """``spec.replicas`` of the controller an ownerReference names (a ReplicaSet owned by a Deployment counts
    the Deployment's), or None when it is not a scaled kind or not found; ``lookup(resource, namespace, name)``
    returns the stored object or None."""
    resource = _SCALED_KINDS.get(reference.get("kind", ""))
    owner = lookup(resource, namespace, reference.get("name", "")) if resource else None
    if owner is None:
        return None
    if resource == "replicasets":
        for parent in (owner.get("metadata") or {}).get("ownerReferences") or []:
            if parent.get("controller") and parent.get("kind") == "Deployment":
                return controller_scale(parent, namespace, lookup)
    return (owner.get("spec") or {}).get("replicas", 1)


def expected_pod_count(pods: List[dict], controller_scale: Callable[[dict, str], Optional[int]]) -> int:
    """Sum of the scales of the distinct controllers of ``pods``; ``controller_scale(owner_ref, namespace)``
    returns ``spec.replicas`` of the owner or None when unknown."""
    scales: Dict[str, int] = {}
    for pod in pods:
        reference = controller_owner(pod)
        if reference is None:
            scales["pod/" + pod["metadata"]["name"]] = 1
            continue
        if reference.get("uid") in scales:
            continue
        scale = controller_scale(reference, pod["metadata"].get("namespace", ""))
        scales[reference.get("uid")] = 1 if scale is None else scale
    return sum(scales.values())


def compute_pdb_status(pdb: dict, namespace_pods: List[dict],
                       controller_scale: Callable[[dict, str], Optional[int]], now: str) -> dict:
    """The ``status`` the disruption controller would write for ``pdb`` given the pods of its namespace."""
    spec = pdb.get("spec") or {}
    pods = [pod for pod in pods_selected_by(pdb, namespace_pods) if not pod_is_terminal(pod)]
    current_healthy = sum(1 for pod in pods if pod_is_healthy(pod))
    if spec.get("maxUnavailable") is not None:
        expected = expected_pod_count(pods, controller_scale)
        desired = max(0, expected - scaled_int_or_percent(spec["maxUnavailable"], expected, round_up=True))
    elif isinstance(spec.get("minAvailable"), str):
        expected = expected_pod_count(pods, controller_scale)
        desired = scaled_int_or_percent(spec["minAvailable"], expected, round_up=True)
    else:
        expected = len(pods)
        desired = int(spec.get("minAvailable") or 0)
    allowed = max(0, current_healthy - desired)
    status = dict(pdb.get("status") or {})
    status.update({
        "observedGeneration": (pdb.get("metadata") or {}).get("generation", 1),
        "currentHealthy": current_healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "disruptionsAllowed": allowed,
        "conditions": [_disruption_allowed_condition(allowed, status, now)],
    })
    return status


def _disruption_allowed_condition(allowed: int, previous_status: dict, now: str) -> dict:
    wanted_status = "True" if allowed > 0 else "False"
    reason = "SufficientPods" if allowed > 0 else "InsufficientPods"
    for condition in previous_status.get("conditions") or []:
        if condition.get("type") == "DisruptionAllowed" and condition.get("status") == wanted_status:
            return condition
    return {"type": "DisruptionAllowed", "status": wanted_status, "reason": reason, "message": "",
            "lastTransitionTime": now}


def eviction_refusal(pdb: dict, pod: dict) -> Optional[str]:
    """None when evicting ``pod`` under ``pdb`` (status already computed) is allowed; otherwise the
    ``DisruptionBudget`` cause message kube-apiserver puts in its 429 answer."""
    spec = pdb.get("spec") or {}
    status = pdb.get("status") or {}
    current_healthy = status.get("currentHealthy", 0)
    desired_healthy = status.get("desiredHealthy", 0)
    if not pod_is_healthy(pod):
        policy = spec.get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
        if policy == "AlwaysAllow" or current_healthy >= desired_healthy:
            return None
    if status.get("disruptionsAllowed", 0) > 0:
        return None
    return "The disruption budget %s needs %d healthy pods and has %d currently" % (
        pdb["metadata"]["name"], desired_healthy, current_healthy)
