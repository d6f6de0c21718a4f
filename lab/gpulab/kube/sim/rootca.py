"""kube-controller-manager's root-CA publisher: a `kube-root-ca.crt` ConfigMap in every namespace.

Since Kubernetes 1.21 (the RootCAConfigMap feature, GA and then removed as a gate) kube-controller-manager puts a
ConfigMap named `kube-root-ca.crt` into every namespace: `data["ca.crt"]` is the CA bundle that verifies the
API server (what projected ServiceAccount token volumes mount), annotated `kubernetes.io/description`. It is
there as soon as a namespace is, comes back when deleted, and its data is put back when changed. Clients see
it: `kubectl get configmaps` / `k8s_info kind=ConfigMap` in a fresh namespace list it first
(kubernetes.core's `k8s_full` target counts on that).

`RootCaPublisher(store, ca_pem).start()`: publishes in the namespaces there are, then follows the store's
changes (its callbacks run in the writing thread after the store's lock is released, so the ConfigMap is there
before the request that created the namespace is answered). The twin writes it with field manager
`kube-controller-manager`, as upstream.
"""
from __future__ import annotations

from ..api.errors import ApiError

NAME = "kube-root-ca.crt"
KEY = "ca.crt"
MANAGER = "kube-controller-manager"
DESCRIPTION = ("Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints"
               " such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across"
               " distributions of Kubernetes clusters.")


def config_map(namespace: str, ca_pem: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": NAME, "namespace": namespace,
                         "annotations": {"kubernetes.io/description": DESCRIPTION}},
            "data": {KEY: ca_pem}}


class RootCaPublisher:
    def __init__(self, store, ca_pem: str):
        self.store = store
        self.ca_pem = ca_pem

    def start(self) -> "RootCaPublisher":
        self.store.subscribe(self._on_change)
        namespaces, _ = self.store.list("namespaces")
        for namespace in namespaces:
            self.publish(namespace["metadata"]["name"])
        return self

    def _on_change(self, event_type: str, resource: str, obj: dict) -> None:
        metadata = obj.get("metadata") or {}
        if resource == "namespaces" and event_type == "ADDED":
            self.publish(metadata["name"])
        elif resource == "configmaps" and metadata.get("name") == NAME and event_type in ("MODIFIED", "DELETED"):
            self.publish(metadata.get("namespace") or "")

    def publish(self, namespace: str) -> None:
        """Create or put back the ConfigMap of ``namespace`` (nothing when the namespace is gone or going)."""
        try:
            current = self.store.get("configmaps", NAME, namespace)
        except ApiError as error:
            if error.code != 404:
                raise
            current = None
        try:
            if current is None:
                if self._namespace_active(namespace):
                    self.store.create("configmaps", config_map(namespace, self.ca_pem), namespace,
                                      field_manager=MANAGER)
            elif current.get("data") != {KEY: self.ca_pem} and not current["metadata"].get("deletionTimestamp"):
                current["data"] = {KEY: self.ca_pem}
                self.store.update("configmaps", current, namespace, field_manager=MANAGER)
        except ApiError as error:
            if error.code not in (404, 409):     # the namespace went meanwhile, or another write won: resync later
                raise

    def _namespace_active(self, namespace: str) -> bool:
        try:
            found = self.store.get("namespaces", namespace)
        except ApiError:
            return False
        return not found["metadata"].get("deletionTimestamp")
