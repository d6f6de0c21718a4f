"""Resources served in more than one version. The store keeps each object in one version (its storage version,
``RESOURCES[key]["version"]``); requests made in another served version are converted on the way in and out, as
kube-apiserver's conversion does.

Served besides the storage version: ResourceSlices in ``resource.k8s.io/v1`` (GA since Kubernetes 1.34), stored as
``v1beta1``. The only difference between the two for a ResourceSlice: a v1beta1 device nests its fields under
``basic``, a v1 device has them directly (``devices[].attributes``, ``.capacity``, ...).
"""
from __future__ import annotations

import copy
from typing import Dict, Iterator, Tuple

from .resources import RESOURCES

EXTRA_VERSIONS: Dict[str, Tuple[str, ...]] = {"resourceslices": ("v1",)}
# What discovery names as a group's preferred version where it is not the storage version.
PREFERRED_VERSIONS = {"resource.k8s.io": "v1"}


def served_info(resource: str, version: str) -> dict:
    """RESOURCES[resource] as served in `version`."""
    info = RESOURCES[resource]
    if version == info["version"]:
        return info
    served = dict(info, version=version)
    served["apiVersion"] = "%s/%s" % (info["group"], version)
    return served


def served_infos() -> Iterator[Tuple[str, dict]]:
    """(storage key, served info) for every resource in every version it is served in."""
    for key, info in RESOURCES.items():
        yield key, info
        for version in EXTRA_VERSIONS.get(key, ()):
            yield key, served_info(key, version)


def to_served(resource: str, obj: dict, version: str) -> dict:
    """A stored object as a client of `version` sees it."""
    if version == RESOURCES[resource]["version"] or not isinstance(obj, dict) or "metadata" not in obj:
        return obj
    served = copy.deepcopy(obj)
    served["apiVersion"] = served_info(resource, version)["apiVersion"]
    if resource == "resourceslices":
        devices = (served.get("spec") or {}).get("devices") or []
        for index, device in enumerate(devices):
            flat = {key: value for key, value in device.items() if key != "basic"}
            flat.update(device.get("basic") or {})
            devices[index] = flat
    return served


def to_storage(resource: str, obj: dict, version: str) -> dict:
    """An object a client of `version` sent, in the storage version."""
    info = RESOURCES[resource]
    if version == info["version"] or not isinstance(obj, dict):
        return obj
    stored = copy.deepcopy(obj)
    stored["apiVersion"] = info["apiVersion"]
    if resource == "resourceslices":
        devices = (stored.get("spec") or {}).get("devices") or []
        for index, device in enumerate(devices):
            devices[index] = {"name": device.get("name"),
                              "basic": {key: value for key, value in device.items() if key != "name"}}
    return stored
