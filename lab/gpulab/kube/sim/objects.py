"""Small accessors and builders of Kubernetes objects the simulated control plane shares: metadata, owner
references, generated names and template hashes, pod and node states."""
from __future__ import annotations

import hashlib
import json
import random

from ..api.eviction import pod_is_terminal

_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def random_suffix(length: int = 5) -> str:
    return "".join(random.choice(_NAME_ALPHABET) for _ in range(length))


def template_hash(template: dict) -> str:
    """A stable pod-template-hash (upstream uses FNV-32a; any stable short hash serves the twin)."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).digest()
    return "".join(_NAME_ALPHABET[byte % len(_NAME_ALPHABET)] for byte in digest[:10])


def meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def object_key(obj: dict):
    return meta(obj).get("namespace"), meta(obj).get("name")


def resource_version_int(obj: dict) -> int:
    try:
        return int(meta(obj).get("resourceVersion") or 0)
    except ValueError:
        return 0


def owner_reference(owner: dict) -> dict:
    return {"apiVersion": owner.get("apiVersion"), "kind": owner.get("kind"), "name": meta(owner)["name"],
            "uid": meta(owner).get("uid"), "controller": True, "blockOwnerDeletion": True}


def pod_is_terminating(pod: dict) -> bool:
    return bool(meta(pod).get("deletionTimestamp"))


def pod_counts_for_controller(pod: dict) -> bool:
    """Pods a ReplicaSet/DaemonSet counts as its own replicas (upstream `IsPodActive`)."""
    return not pod_is_terminating(pod) and not pod_is_terminal(pod)


def node_ready_status(node: dict) -> str:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") or "Unknown"
    return "Unknown"
