"""Request paths and query parameters of the Kubernetes REST API: which resource, namespace, name and
subresource a path names, and the typed query parameters the server reads."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple
from urllib.parse import unquote

from .errors import ApiError
from .resources import RESOURCES
from .versions import served_info, served_infos

_RESOURCE_KEYS: Dict[Tuple[str, str, str], str] = {
    (info["group"], info["version"], info["plural"]): key for key, info in served_infos()}


class Route:
    """What a request path names."""

    def __init__(self, resource: str, namespace: Optional[str], name: Optional[str], subresource: Optional[str],
                 watch_path: bool, version: Optional[str] = None):
        self.resource = resource
        self.info = served_info(resource, version or RESOURCES[resource]["version"])
        self.version = self.info["version"]          # the version the client speaks (may differ from storage)
        self.namespace = namespace
        self.name = name
        self.subresource = subresource
        self.watch_path = watch_path


def parse_resource_path(path: str) -> Optional[Route]:
    """``/api/v1/namespaces/ns/pods/x/log`` → Route(pods, ns, x, log); None for non-resource paths."""
    parts = [unquote(part) for part in path.strip("/").split("/") if part]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    watch_path = bool(rest) and rest[0] == "watch"
    if watch_path:
        rest = rest[1:]
    if not rest:
        return None
    namespace = None
    # /namespaces/<ns>/<resource>... scopes a resource; /namespaces/<ns>/status|finalize are the Namespace's own
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    key = _RESOURCE_KEYS.get((group, version, rest[0]))
    if key is None or len(rest) > 3:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    if namespace is not None and not RESOURCES[key]["namespaced"]:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    if subresource and subresource not in RESOURCES[key]["subresources"]:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return Route(key, namespace, name, subresource, watch_path, version)


def query_value(query: Dict[str, List[str]], name: str, default: Optional[str] = None) -> Optional[str]:
    values = query.get(name)
    return values[0] if values else default


def is_true(value: Optional[str]) -> bool:
    return value in ("true", "1", "True")


def dry_run_requested(query: Dict[str, List[str]], options: Optional[dict] = None) -> bool:
    """``dryRun=All`` in the query, or ``dryRun: [All]`` in the DeleteOptions body (kubectl sends the latter)."""
    return query_value(query, "dryRun") == "All" or "All" in ((options or {}).get("dryRun") or [])


def int_param(query: Dict[str, List[str]], name: str) -> Optional[int]:
    value = query_value(query, name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise ApiError(400, "BadRequest", "invalid value for %s: %r" % (name, value))
