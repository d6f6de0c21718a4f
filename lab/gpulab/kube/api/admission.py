"""Admission the twin does on create, as kube-apiserver's plugins do: the ServiceAccount plugin (a pod names an
existing ServiceAccount of its namespace, ``default`` when it names none)."""
from __future__ import annotations

from typing import Callable

from .errors import ApiError

MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"


def admit_service_account(pod: dict, namespace: str, service_account_exists: Callable[[str, str], bool]) -> None:
    """Default ``spec.serviceAccountName`` (and the deprecated ``serviceAccount``) to ``default``; refuse a
    pod whose ServiceAccount does not exist with the plugin's 403 Forbidden. Mirror pods are left alone."""
    metadata = pod.get("metadata") or {}
    if MIRROR_POD_ANNOTATION in (metadata.get("annotations") or {}):
        return
    spec = pod.setdefault("spec", {})
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = spec["serviceAccount"] = account
    if service_account_exists(namespace, account):
        return
    # admission.NewForbidden names the pod by its generateName while the name is still to be generated
    name = metadata.get("name") or metadata.get("generateName") or "Unknown"
    raise ApiError(403, "Forbidden", 'pods "%s" is forbidden: error looking up service account %s/%s: '
                   'serviceaccount "%s" not found' % (name, namespace, account, account),
                   {"name": name, "kind": "pods"})
