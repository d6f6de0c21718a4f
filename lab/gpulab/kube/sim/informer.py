"""The controller manager's informer: a local cache of the watched resources, fed by ``Store.subscribe``."""
from __future__ import annotations

import threading

from .objects import meta, object_key, resource_version_int

WATCHED_RESOURCES = ("namespaces", "nodes", "pods", "deployments", "replicasets", "daemonsets",
                     "statefulsets", "controllerrevisions", "jobs", "poddisruptionbudgets", "leases")


class Informer:
    """A local cache of the watched resources, updated by the store's change callbacks."""

    def __init__(self, store, resources=WATCHED_RESOURCES):
        self._store = store
        self._resources = resources
        self._lock = threading.Lock()
        self._objects = {resource: {} for resource in resources}
        self.changed = threading.Event()

    def start(self) -> None:
        # Subscribe before listing so no change falls between the two; resourceVersions settle the order.
        self._store.subscribe(self._on_change)
        for resource in self._resources:
            items, _ = self._store.list(resource)
            for item in items:
                self.observe(resource, item)

    def _on_change(self, event_type: str, resource: str, obj: dict) -> None:
        if resource not in self._objects:
            return
        if event_type == "DELETED":
            self.forget(resource, obj)
        else:
            self.observe(resource, obj)
        self.changed.set()

    def observe(self, resource: str, obj: dict) -> None:
        """Record an object we know is current (a callback or the answer to our own write)."""
        if obj is None or resource not in self._objects:
            return
        with self._lock:
            cached = self._objects[resource].get(object_key(obj))
            if cached is None or resource_version_int(obj) >= resource_version_int(cached):
                self._objects[resource][object_key(obj)] = obj

    def forget(self, resource: str, obj: dict) -> None:
        with self._lock:
            cached = self._objects[resource].get(object_key(obj))
            if cached is not None and resource_version_int(cached) <= resource_version_int(obj):
                del self._objects[resource][object_key(obj)]

    def items(self, resource: str, namespace=None) -> list:
        with self._lock:
            values = list(self._objects[resource].values())
        if namespace is None:
            return values
        return [obj for obj in values if meta(obj).get("namespace") == namespace]

    def get(self, resource: str, name: str, namespace=None):
        with self._lock:
            return self._objects[resource].get((namespace, name))
