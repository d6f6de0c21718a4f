"""What the twin serves: storage key -> API description (group, version, kind, verbs, subresources, names)."""
from __future__ import annotations

from typing import Dict

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def _resource(group, version, kind, namespaced, short_names=(), subresources=(), verbs=None):
    return {"group": group, "version": version, "kind": kind, "namespaced": namespaced,
            "shortNames": list(short_names), "verbs": list(verbs or _VERBS), "subresources": list(subresources)}


# Storage key -> API description. The key is the plural, except where two groups serve the same plural
# (``events.events.k8s.io``); ``plural`` below gives the URL name.
RESOURCES: Dict[str, dict] = {
    "namespaces": _resource("", "v1", "Namespace", False, ["ns"], ["status", "finalize"],
                            ["create", "delete", "get", "list", "patch", "update", "watch"]),
    "nodes": _resource("", "v1", "Node", False, ["no"], ["status"]),
    "pods": _resource("", "v1", "Pod", True, ["po"], ["status", "eviction", "log", "binding"]),
    "configmaps": _resource("", "v1", "ConfigMap", True, ["cm"]),
    "secrets": _resource("", "v1", "Secret", True),
    "serviceaccounts": _resource("", "v1", "ServiceAccount", True, ["sa"], ["token"]),
    "services": _resource("", "v1", "Service", True, ["svc"], ["status"]),
    "events": _resource("", "v1", "Event", True, ["ev"]),
    "events.events.k8s.io": _resource("events.k8s.io", "v1", "Event", True, ["ev"]),
    "leases": _resource("coordination.k8s.io", "v1", "Lease", True),
    "poddisruptionbudgets": _resource("policy", "v1", "PodDisruptionBudget", True, ["pdb"], ["status"]),
    "deployments": _resource("apps", "v1", "Deployment", True, ["deploy"], ["status", "scale"]),
    "replicasets": _resource("apps", "v1", "ReplicaSet", True, ["rs"], ["status", "scale"]),
    "daemonsets": _resource("apps", "v1", "DaemonSet", True, ["ds"], ["status"]),
    "statefulsets": _resource("apps", "v1", "StatefulSet", True, ["sts"], ["status", "scale"]),
    "controllerrevisions": _resource("apps", "v1", "ControllerRevision", True),
    "jobs": _resource("batch", "v1", "Job", True, [], ["status"]),
    "clusterroles": _resource("rbac.authorization.k8s.io", "v1", "ClusterRole", False),
    "clusterrolebindings": _resource("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", False),
    "roles": _resource("rbac.authorization.k8s.io", "v1", "Role", True),
    "rolebindings": _resource("rbac.authorization.k8s.io", "v1", "RoleBinding", True),
    "runtimeclasses": _resource("node.k8s.io", "v1", "RuntimeClass", False),
    "resourceslices": _resource("resource.k8s.io", "v1beta1", "ResourceSlice", False),
    "deviceclasses": _resource("resource.k8s.io", "v1beta1", "DeviceClass", False),
    "resourceclaims": _resource("resource.k8s.io", "v1beta1", "ResourceClaim", True, [], ["status"]),
}
for _key, _info in RESOURCES.items():
    _info["plural"] = _key.split(".", 1)[0]
    _info["apiVersion"] = "%s/%s" % (_info["group"], _info["version"]) if _info["group"] else _info["version"]
    _info["listKind"] = _info["kind"] + "List"
    _info["singular"] = _info["kind"].lower()

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-node-lease", "kube-public")


def qualified(resource: str) -> str:
    """"nodes", "deployments.apps": the name API messages give a resource."""
    info = RESOURCES[resource]
    return info["plural"] + ("." + info["group"] if info["group"] else "")
