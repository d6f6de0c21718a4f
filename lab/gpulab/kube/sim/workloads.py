"""Pure rules of the simulated controllers: deployment rollout targets and status, ReplicaSet scale-down order,
DaemonSet placement, node lifecycle taints and NoExecute deadlines (what kube-controller-manager decides)."""
from __future__ import annotations

from ..api.eviction import controller_owner, pod_is_ready, pod_is_terminal, scaled_int_or_percent
from ..api.timefmt import parse_rfc3339, rfc3339
from . import scheduler
from .objects import meta, node_ready_status, pod_is_terminating

NOT_READY_TAINT_KEY = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT_KEY = "node.kubernetes.io/unreachable"
# What the DefaultTolerationSeconds admission plugin adds to every pod.
DEFAULT_POD_TOLERATIONS = [
    {"key": NOT_READY_TAINT_KEY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": UNREACHABLE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]
# What the DaemonSet controller adds to its pods (pkg/controller/daemon/util).
DAEMONSET_TOLERATIONS = [
    {"key": NOT_READY_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"},
    {"key": UNREACHABLE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": scheduler.UNSCHEDULABLE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
]


def status_differs(current: dict, wanted: dict) -> bool:
    """True when a wanted field differs; an absent field equals a zero or empty one (the API server drops
    `omitempty` fields that are zero, so a written `active: 0` reads back absent)."""
    return any((current.get(key) or None) != (value or None) for key, value in wanted.items())


def pods_by_owner_uid(pods: list) -> dict:
    grouped = {}
    for pod in pods:
        owner = controller_owner(pod)
        if owner:
            grouped.setdefault(owner.get("uid"), []).append(pod)
    return grouped


def needs_scheduling(pod: dict) -> bool:
    spec = pod.get("spec") or {}
    return (not spec.get("nodeName") and not pod_is_terminating(pod) and not pod_is_terminal(pod)
            and (spec.get("schedulerName") or "default-scheduler") == "default-scheduler")


def daemon_pod_node_name(pod: dict):
    """The node a DaemonSet pod belongs to: its binding, else the matchFields target."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return spec["nodeName"]
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in required.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return field["values"][0]
    return None


def daemonset_should_run_on(probe_pod: dict, node: dict) -> bool:
    return scheduler.node_matches_affinity(probe_pod, node) and not scheduler.untolerated_taints(probe_pod, node)


def daemonset_may_continue_on(probe_pod: dict, node: dict) -> bool:
    return scheduler.node_matches_affinity(probe_pod, node) and \
        not scheduler.untolerated_taints(probe_pod, node, effects=("NoExecute",))


def pods_to_scale_down(active_pods: list, count: int) -> list:
    """Upstream order: unscheduled first, then pending, then not ready, then the newest."""
    if count <= 0:
        return []
    newest_first = sorted(active_pods, key=lambda pod: meta(pod).get("creationTimestamp") or "", reverse=True)
    newest_first.sort(key=lambda pod: (bool((pod.get("spec") or {}).get("nodeName")),
                                       (pod.get("status") or {}).get("phase") != "Pending",
                                       pod_is_ready(pod)))
    return newest_first[:count]


def rollout_targets(spec: dict, desired: int, new_rs: dict, old_sets: list) -> list:
    """[(replicaset, replicas)] for the next step of a RollingUpdate (or Recreate) rollout."""
    def replicas(rs):
        return int((rs.get("spec") or {}).get("replicas", 0))

    def available(rs):
        return int((rs.get("status") or {}).get("availableReplicas", 0))

    strategy = spec.get("strategy") or {}
    if strategy.get("type") == "Recreate":
        old_pods_left = any((rs.get("status") or {}).get("replicas") for rs in old_sets)
        return [(rs, 0) for rs in old_sets] + [(new_rs, replicas(new_rs) if old_pods_left else desired)]
    if not any(replicas(rs) for rs in old_sets):
        return [(new_rs, desired)] + [(rs, 0) for rs in old_sets]
    rolling = strategy.get("rollingUpdate") or {}
    max_surge = scaled_int_or_percent(rolling.get("maxSurge", "25%"), desired, round_up=True)
    max_unavailable = scaled_int_or_percent(rolling.get("maxUnavailable", "25%"), desired, round_up=False)
    if max_surge == 0 and max_unavailable == 0:
        max_unavailable = 1
    total = replicas(new_rs) + sum(replicas(rs) for rs in old_sets)
    pairs = [(new_rs, min(desired, replicas(new_rs) + max(0, desired + max_surge - total)))]
    # Old pods may go while availability stays at desired - maxUnavailable; unavailable old pods always may.
    budget = max(0, available(new_rs) + sum(available(rs) for rs in old_sets) - (desired - max_unavailable))
    for rs in sorted(old_sets, key=lambda r: meta(r).get("creationTimestamp") or ""):
        unavailable_here = max(0, replicas(rs) - available(rs))
        reduce_by = min(replicas(rs), unavailable_here + budget)
        budget -= max(0, reduce_by - unavailable_here)
        pairs.append((rs, replicas(rs) - reduce_by))
    return pairs


def deployment_status(deployment: dict, new_rs: dict, old_sets: list, desired: int, now: str) -> dict:
    sets = [new_rs] + old_sets

    def total(field):
        return sum(int((rs.get("status") or {}).get(field, 0)) for rs in sets)

    available = total("availableReplicas")
    updated = int((new_rs.get("status") or {}).get("replicas", 0))
    rolling = ((deployment.get("spec") or {}).get("strategy") or {}).get("rollingUpdate") or {}
    max_unavailable = scaled_int_or_percent(rolling.get("maxUnavailable", "25%"), desired, round_up=False)
    complete = updated == desired and total("replicas") == desired and available >= desired
    previous = {c.get("type"): c for c in (deployment.get("status") or {}).get("conditions") or []}
    minimum_available = available >= desired - max_unavailable
    conditions = [
        deployment_condition(previous, "Available", minimum_available,
                   "MinimumReplicasAvailable" if minimum_available else "MinimumReplicasUnavailable",
                   "Deployment has minimum availability." if minimum_available
                   else "Deployment does not have minimum availability.", now),
        # a paused Deployment says so in Progressing (status Unknown), as the controller's checkPausedConditions
        deployment_condition(previous, "Progressing", "Unknown", "DeploymentPaused", "Deployment is paused", now)
        if (deployment.get("spec") or {}).get("paused") else
        deployment_condition(previous, "Progressing", True,
                   "NewReplicaSetAvailable" if complete else "ReplicaSetUpdated",
                   ('ReplicaSet "%s" has successfully progressed.' if complete else 'ReplicaSet "%s" is progressing.')
                   % meta(new_rs)["name"], now),
    ]
    # unavailableReplicas counts against what the ReplicaSets are asked for (their spec.replicas), as the
    # deployment controller's calculateStatus does: a new ReplicaSet whose pods cannot be created (refused by
    # admission, e.g. a deleted ServiceAccount) leaves replicas unavailable while the old pods still serve.
    wanted = max(desired, sum(int((rs.get("spec") or {}).get("replicas", 0)) for rs in sets))
    return {"observedGeneration": meta(deployment).get("generation", 1), "replicas": total("replicas"),
            "updatedReplicas": updated, "readyReplicas": total("readyReplicas"), "availableReplicas": available,
            "unavailableReplicas": max(0, wanted - available) or None, "conditions": conditions}


def deployment_condition(previous: dict, condition_type: str, ok, reason: str, message: str,
                         now: str) -> dict:
    """``ok``: True/False, or a condition status as is ("Unknown")."""
    status = ok if isinstance(ok, str) else ("True" if ok else "False")
    old = previous.get(condition_type) or {}
    if old.get("status") == status and old.get("reason") == reason and old.get("message") == message:
        return old
    transition = old.get("lastTransitionTime") if old.get("status") == status else now
    return {"type": condition_type, "status": status, "reason": reason, "message": message,
            "lastUpdateTime": now, "lastTransitionTime": transition or now}


def replica_failure_conditions(conditions: list, create_error, now: str) -> list:
    """The ReplicaSet controller's ``ReplicaFailure`` condition (reason ``FailedCreate``, the API error as
    message): set at the first failed pod creation and kept, removed by the first sync without one."""
    others = [condition for condition in conditions if condition.get("type") != "ReplicaFailure"]
    if create_error is None:
        return others
    if len(others) < len(conditions):
        return list(conditions)
    return others + [{"type": "ReplicaFailure", "status": "True", "lastTransitionTime": now,
                      "reason": "FailedCreate", "message": create_error}]


def wanted_node_taints(node: dict, now: float) -> list:
    """Taints the node lifecycle controller keeps: cordon and NotReady/Unreachable, others untouched."""
    managed = (scheduler.UNSCHEDULABLE_TAINT_KEY, NOT_READY_TAINT_KEY, UNREACHABLE_TAINT_KEY)
    current = (node.get("spec") or {}).get("taints") or []
    kept = [taint for taint in current if taint.get("key") not in managed]
    wanted = []
    if (node.get("spec") or {}).get("unschedulable"):
        wanted.append({"key": scheduler.UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"})
    ready = node_ready_status(node)
    if ready != "True" and (node.get("status") or {}).get("conditions"):
        key = UNREACHABLE_TAINT_KEY if ready == "Unknown" else NOT_READY_TAINT_KEY
        wanted.append({"key": key, "effect": "NoSchedule"})
        wanted.append({"key": key, "effect": "NoExecute", "timeAdded": rfc3339(now)})
    result = list(kept)
    for taint in wanted:
        existing = next((t for t in current if t.get("key") == taint["key"] and t.get("effect") == taint["effect"]),
                        None)
        result.append(existing if existing is not None else taint)
    return result


def noexecute_deadline_passed(pod: dict, node: dict, now: float) -> bool:
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") != "NoExecute":
            continue
        matching = [t for t in tolerations if scheduler.tolerates([t], taint)]
        if not matching:
            return True
        seconds = [t.get("tolerationSeconds") for t in matching]
        if None in seconds:
            continue
        added = parse_rfc3339(taint["timeAdded"]) if taint.get("timeAdded") else now
        if now >= added + min(seconds):
            return True
    return False
