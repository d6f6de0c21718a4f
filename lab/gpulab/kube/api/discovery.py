"""Discovery documents: ``/version``, ``/api``, ``/apis``, ``/api/v1``, ``/apis/<group>/<version>`` and the
OpenAPI v2/v3 documents kubectl reads for ``apply`` and field validation.

Only the legacy (unaggregated) discovery format is served: client-go asks for aggregated discovery first and
falls back when the answer's Content-Type is plain ``application/json``.
"""
from __future__ import annotations

import hashlib
import json
from typing import Dict, List, Optional, Tuple

from .versions import PREFERRED_VERSIONS, served_infos

SERVER_VERSION = {"major": "1", "minor": "34", "gitVersion": "v1.34.2-gpulab", "gitCommit": "gpulab",
                  "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.9",
                  "compiler": "gc", "platform": "linux/amd64"}

_SUBRESOURCE_SHAPES = {
    # name -> (group, version, kind, verbs)
    "status": (None, None, None, ["get", "patch", "update"]),
    "eviction": ("policy", "v1", "Eviction", ["create"]),
    "log": ("", "v1", "Pod", ["get"]),
    "binding": ("", "v1", "Binding", ["create"]),
    "scale": ("autoscaling", "v1", "Scale", ["get", "patch", "update"]),
    "finalize": (None, None, None, ["update"]),
    "token": ("authentication.k8s.io", "v1", "TokenRequest", ["create"]),
}


_CATEGORY_ALL = ("pods", "deployments", "daemonsets", "replicasets", "statefulsets", "services", "jobs")


def group_versions(resources: Optional[Dict[str, dict]] = None) -> List[Tuple[str, str]]:
    """Every (group, version) served, core first."""
    seen: List[Tuple[str, str]] = []
    for _, info in served_infos(resources):
        pair = (info["group"], info["version"])
        if pair not in seen:
            seen.append(pair)
    return sorted(seen, key=lambda pair: (pair[0] != "", pair[0]))


def core_versions(server_address: str) -> dict:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def group_list(resources: Optional[Dict[str, dict]] = None) -> dict:
    versions: Dict[str, List[str]] = {}
    for group, version in group_versions(resources):
        if group:
            versions.setdefault(group, []).append(version)
    groups = []
    for group, served in versions.items():
        preferred = PREFERRED_VERSIONS.get(group, served[0])
        entries = [{"groupVersion": "%s/%s" % (group, version), "version": version}
                   for version in [preferred] + [one for one in served if one != preferred]]
        groups.append({"name": group, "versions": entries, "preferredVersion": entries[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(group: str, resources: Optional[Dict[str, dict]] = None) -> Optional[dict]:
    for entry in group_list(resources)["groups"]:
        if entry["name"] == group:
            return dict(entry, kind="APIGroup", apiVersion="v1")
    return None


def _subresource_entry(info: dict, subresource: str) -> dict:
    group, version, kind, verbs = _SUBRESOURCE_SHAPES[subresource]
    entry = {"name": "%s/%s" % (info["plural"], subresource), "singularName": "", "namespaced": info["namespaced"],
             "kind": kind or info["kind"], "verbs": verbs}
    if group is not None and (group, version) != (info["group"], info["version"]):
        entry["group"], entry["version"] = group, version
    return entry


def resource_list(group: str, version: str, served: Optional[Dict[str, dict]] = None) -> Optional[dict]:
    """The APIResourceList of one group version, or None when it is not served."""
    resources = []
    for _, info in served_infos(served):
        if (info["group"], info["version"]) != (group, version):
            continue
        entry = {"name": info["plural"], "singularName": info["singular"], "namespaced": info["namespaced"],
                 "kind": info["kind"], "verbs": info["verbs"]}
        if info["shortNames"]:
            entry["shortNames"] = info["shortNames"]
        if info["plural"] in _CATEGORY_ALL:
            entry["categories"] = ["all"]
        elif info.get("categories"):
            entry["categories"] = info["categories"]
        entry["storageVersionHash"] = hashlib.sha256(info["kind"].encode()).hexdigest()[:11]
        resources.append(entry)
        resources.extend(_subresource_entry(info, name) for name in info["subresources"])
    if not resources:
        return None
    group_version = "%s/%s" % (group, version) if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}


# ---------------------------------------------------------------- OpenAPI

_OPENAPI_PACKAGES = {"": "io.k8s.api.core", "apps": "io.k8s.api.apps", "policy": "io.k8s.api.policy",
                     "coordination.k8s.io": "io.k8s.api.coordination", "events.k8s.io": "io.k8s.api.events",
                     "batch": "io.k8s.api.batch", "rbac.authorization.k8s.io": "io.k8s.api.rbac",
                     "node.k8s.io": "io.k8s.api.node", "authorization.k8s.io": "io.k8s.api.authorization", "resource.k8s.io": "io.k8s.api.resource"}


def _openapi_definition_name(info: dict) -> str:
    group = info["group"] or "core"
    package = _OPENAPI_PACKAGES.get(info["group"], "io.gpulab." + group)
    return "%s.%s.%s" % (package, info["version"], info["kind"])


def _gvk(info: dict) -> List[dict]:
    return [{"group": info["group"], "version": info["version"], "kind": info["kind"]}]


def _object_schema(info: dict, ref_prefix: str) -> dict:
    """A permissive schema (any fields) that still names its GVK, which is what kubectl looks up."""
    return {"description": "%s (gpulab twin: fields are not validated client-side)" % info["kind"],
            "type": "object",
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                           "metadata": {"$ref": ref_prefix + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}},
            "additionalProperties": True,
            "x-kubernetes-group-version-kind": _gvk(info)}


_OBJECT_META = {"type": "object", "additionalProperties": True,
                "properties": {"name": {"type": "string"}, "namespace": {"type": "string"},
                               "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                               "annotations": {"type": "object", "additionalProperties": {"type": "string"}}}}


def _patch_operation(info: dict) -> dict:
    """The PATCH operation kubectl's query-param verifier inspects for ``fieldValidation`` support."""
    return {"operationId": "patch" + info["kind"],
            "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                           {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
                           {"name": "fieldManager", "in": "query", "schema": {"type": "string"}}],
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": _gvk(info)[0]}


def _resource_path(info: dict) -> str:
    prefix = "/apis/%s/%s" % (info["group"], info["version"]) if info["group"] else "/api/v1"
    if info["namespaced"]:
        return "%s/namespaces/{namespace}/%s/{name}" % (prefix, info["plural"])
    return "%s/%s/{name}" % (prefix, info["plural"])


def openapi_v3_index(resources: Optional[Dict[str, dict]] = None) -> dict:
    paths = {}
    for group, version in group_versions(resources):
        key = "apis/%s/%s" % (group, version) if group else "api/v1"
        paths[key] = {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (key, _hash(openapi_v3_group(group, version, resources)))}
    return {"paths": paths}


def _hash(document: dict) -> str:
    return hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest()[:32].upper()


def openapi_v3_group(group: str, version: str, resources: Optional[Dict[str, dict]] = None) -> Optional[dict]:
    schemas: Dict[str, dict] = {"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": _OBJECT_META}
    paths: Dict[str, dict] = {}
    for _, info in served_infos(resources):
        if (info["group"], info["version"]) != (group, version):
            continue
        schemas[_openapi_definition_name(info)] = _object_schema(info, "#/components/schemas/")
        paths[_resource_path(info)] = {"patch": _patch_operation(info)}
    if not paths:
        return None
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes (gpulab twin)", "version": SERVER_VERSION["gitVersion"]},
            "paths": paths, "components": {"schemas": schemas}}


def openapi_v2(resources: Optional[Dict[str, dict]] = None) -> dict:
    definitions: Dict[str, dict] = {"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": _OBJECT_META}
    paths: Dict[str, dict] = {}
    for _, info in served_infos(resources):
        definitions[_openapi_definition_name(info)] = _object_schema(info, "#/definitions/")
        operation = _patch_operation(info)
        operation["parameters"] = [{"name": parameter["name"], "in": "query", "type": "string", "uniqueItems": True}
                                   for parameter in operation["parameters"]]
        paths[_resource_path(info)] = {"patch": operation}
    return {"swagger": "2.0", "info": {"title": "Kubernetes (gpulab twin)", "version": SERVER_VERSION["gitVersion"]},
            "paths": paths, "definitions": definitions}


def _length_delimited(number: int, payload: bytes) -> bytes:
    length, header = len(payload), bytes([number << 3 | 2])
    while length >= 0x80:
        header += bytes([length & 0x7F | 0x80])
        length >>= 7
    return header + bytes([length]) + payload


def openapi_v2_protobuf() -> bytes:
    """The smallest gnostic ``openapi_v2.Document`` (swagger = 1, info = 2 {title = 1, version = 2}).

    kubectl 1.27/1.28 ``apply`` asks for OpenAPI v2 in protobuf only; with no definitions it validates nothing
    client-side and computes strategic merge patches from its compiled-in types, as for any unknown schema.
    """
    info = _length_delimited(1, b"Kubernetes (gpulab twin)") + _length_delimited(2, SERVER_VERSION["gitVersion"].encode())
    return _length_delimited(1, b"2.0") + _length_delimited(2, info)
