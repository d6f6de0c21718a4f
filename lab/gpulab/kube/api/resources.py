"""What the twin serves: storage key -> API description (group, version, kind, verbs, subresources, names)."""
from __future__ import annotations

from typing import Dict, Tuple

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
    # stored only: no provisioner binds them (they stay Pending), enough for clients that create and read them
    "persistentvolumeclaims": _resource("", "v1", "PersistentVolumeClaim", True, ["pvc"], ["status"]),
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
    "networkpolicies": _resource("networking.k8s.io", "v1", "NetworkPolicy", True, ["netpol"]),  # stored only
    # create only, answered by access.py (nothing stored): listed so clients that discover by kind find it
    "selfsubjectaccessreviews": _resource("authorization.k8s.io", "v1", "SelfSubjectAccessReview", False,
                                          verbs=["create"]),
    "resourceslices": _resource("resource.k8s.io", "v1beta1", "ResourceSlice", False),
    "deviceclasses": _resource("resource.k8s.io", "v1beta1", "DeviceClass", False),
    "resourceclaims": _resource("resource.k8s.io", "v1beta1", "ResourceClaim", True, [], ["status"]),
    # evaluated on writes by admission_policy.py (CEL through celpy)
    "validatingadmissionpolicies": _resource("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy",
                                             False, [], ["status"]),
    "validatingadmissionpolicybindings": _resource("admissionregistration.k8s.io", "v1",
                                                   "ValidatingAdmissionPolicyBinding", False),
    "customresourcedefinitions": _resource("apiextensions.k8s.io", "v1", "CustomResourceDefinition", False,
                                           ["crd", "crds"], ["status"]),
}


def _complete(key: str, info: dict) -> dict:
    info.setdefault("plural", key.split(".", 1)[0])
    info["apiVersion"] = "%s/%s" % (info["group"], info["version"]) if info["group"] else info["version"]
    info.setdefault("listKind", info["kind"] + "List")
    info.setdefault("singular", info["kind"].lower())
    return info


for _key, _info in RESOURCES.items():
    _complete(_key, _info)

# (group, version, plural) -> storage key: what a request path names
RESOURCE_KEYS: Dict[Tuple[str, str, str], str] = {
    (info["group"], info["version"], info["plural"]): key for key, info in RESOURCES.items()}


def register_custom(key: str, info: dict) -> None:
    """Serve a custom resource (``info`` as ``_resource`` makes it, with ``custom: True``). The table is shared
    by every store of the process; a store answers only for the custom resources of its own CRDs."""
    info = _complete(key, info)
    for path_key in [path_key for path_key, known in RESOURCE_KEYS.items() if known == key]:
        del RESOURCE_KEYS[path_key]
    RESOURCES[key] = info
    RESOURCE_KEYS[(info["group"], info["version"], info["plural"])] = key


def custom_resource(group: str, version: str, kind: str, namespaced: bool, names: dict, subresources) -> dict:
    info = _resource(group, version, kind, namespaced, names.get("shortNames") or (), subresources)
    info.update(custom=True, plural=names["plural"], singular=names.get("singular") or kind.lower(),
                listKind=names.get("listKind") or kind + "List", categories=list(names.get("categories") or []))
    return info

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-node-lease", "kube-public")


def qualified(resource: str) -> str:
    """"nodes", "deployments.apps": the name API messages give a resource."""
    info = RESOURCES[resource]
    return info["plural"] + ("." + info["group"] if info["group"] else "")
