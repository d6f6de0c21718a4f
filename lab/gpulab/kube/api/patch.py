"""The three patch kinds of the Kubernetes API: JSON merge (RFC 7386), JSON patch (RFC 6902) and
strategic merge (lists merged by key, ``$patch`` / ``$setElementOrder`` / ``$deleteFromPrimitiveList``
directives, as kubectl sends them).

Strategic merge is field-name based here, not schema based: the table below holds the list fields of the
kinds the twin serves whose Go type declares ``patchStrategy:"merge"`` with their ``patchMergeKey``; every
other list is replaced whole, as the API server does for lists without a strategy.
"""
from __future__ import annotations

import copy
import json
from typing import Any, List, Optional

from .errors import ApiError

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH)


class PatchError(ValueError):
    """A patch that cannot be applied (answered as 422/400 by the server)."""


# field name -> merge key (None: list of primitives merged as a set, e.g. finalizers)
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",   # container ports; Service ports (key "port") are handled in _item_key
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "conditions": "type",
    "addresses": "type",
    "ownerReferences": "uid",
    "resourceClaims": "name",
    "topologySpreadConstraints": "topologyKey",
    "finalizers": None,
}

# ---------------------------------------------------------------- JSON merge patch (RFC 7386)


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 merge patch; returns a new value, ``target`` is left unchanged."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ---------------------------------------------------------------- JSON patch (RFC 6902)

def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _pointer_tokens(pointer: str) -> List[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError("invalid JSON pointer %r: must start with /" % pointer)
    return [_unescape(token) for token in pointer[1:].split("/")]


def _list_index(container: list, token: str, for_add: bool) -> int:
    if token == "-" and for_add:
        return len(container)
    try:
        index = int(token)
    except ValueError:
        raise PatchError("invalid array index %r" % token)
    limit = len(container) if for_add else len(container) - 1
    if index < 0 or index > limit:
        raise PatchError("array index %d out of bounds" % index)
    return index


def _parent(document: Any, tokens: List[str], path: str) -> Any:
    node = document
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_list_index(node, token, for_add=False)]
        else:
            raise PatchError("doc is missing path: %r" % path)
    return node


def _get_pointer(document: Any, path: str) -> Any:
    tokens = _pointer_tokens(path)
    if not tokens:
        return document
    parent = _parent(document, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError("doc is missing path: %r" % path)
        return parent[last]
    if isinstance(parent, list):
        return parent[_list_index(parent, last, for_add=False)]
    raise PatchError("doc is missing path: %r" % path)


def _add(document: Any, path: str, value: Any) -> Any:
    tokens = _pointer_tokens(path)
    if not tokens:
        return value
    parent = _parent(document, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_list_index(parent, last, for_add=True), value)
    else:
        raise PatchError("doc is missing path: %r" % path)
    return document


def _remove(document: Any, path: str) -> Any:
    tokens = _pointer_tokens(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(document, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError("Unable to remove nonexistent key: %s: missing value" % last)
        del parent[last]
    elif isinstance(parent, list):
        del parent[_list_index(parent, last, for_add=False)]
    else:
        raise PatchError("doc is missing path: %r" % path)
    return document


def _replace(document: Any, path: str, value: Any) -> Any:
    _get_pointer(document, path)   # the target must exist
    tokens = _pointer_tokens(path)
    if not tokens:
        return value
    parent = _parent(document, tokens, path)
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    else:
        parent[_list_index(parent, tokens[-1], for_add=False)] = value
    return document


def json_patch(target: Any, operations: List[dict]) -> Any:
    """Apply an RFC 6902 JSON patch; returns a new value."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    document = copy.deepcopy(target)
    for operation in operations:
        op = operation.get("op")
        path = operation.get("path", "")
        if op == "add":
            document = _add(document, path, copy.deepcopy(operation.get("value")))
        elif op == "remove":
            document = _remove(document, path)
        elif op == "replace":
            document = _replace(document, path, copy.deepcopy(operation.get("value")))
        elif op == "move":
            value = _get_pointer(document, operation["from"])
            document = _add(_remove(document, operation["from"]), path, value)
        elif op == "copy":
            document = _add(document, path, copy.deepcopy(_get_pointer(document, operation["from"])))
        elif op == "test":
            if _get_pointer(document, path) != operation.get("value"):
                raise PatchError("testing value %s failed" % path)
        else:
            raise PatchError("Unexpected kind: %r" % op)
    return document


# ---------------------------------------------------------------- strategic merge patch

def _ordered(items: list, order: Optional[list], key: Optional[str]) -> list:
    """Sort merged items by a ``$setElementOrder`` list; items not named there keep their place at the end."""
    if not order:
        return items

    def identity(item: Any) -> Any:
        return item.get(key) if key and isinstance(item, dict) else item

    wanted = [identity(entry) for entry in order]
    rank = {value: position for position, value in enumerate(wanted)}
    return sorted(items, key=lambda item: rank.get(identity(item), len(rank)))


def _merge_primitive_list(original: list, patch: list, deletions: list) -> list:
    merged = [item for item in original if item not in deletions]
    for item in patch:
        if item not in merged:
            merged.append(item)
    return merged


def _item_key(item: Any, key: str) -> Optional[str]:
    """The merge key present in a patch item; ``ports`` of a Service are keyed by ``port``."""
    if not isinstance(item, dict):
        return None
    if key in item:
        return key
    if key == "containerPort" and "port" in item:
        return "port"
    return None


def _merge_keyed_list(original: list, patch: list, key: str) -> list:
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(item) for item in patch if not (isinstance(item, dict) and "$patch" in item)]
    merged = [copy.deepcopy(item) for item in original]
    for item in patch:
        item_key = _item_key(item, key)
        if item_key is None:
            merged.append(copy.deepcopy(item))
            continue
        position = next((i for i, existing in enumerate(merged)
                         if isinstance(existing, dict) and existing.get(item_key) == item[item_key]), None)
        if item.get("$patch") == "delete":
            if position is not None:
                del merged[position]
            continue
        if position is None:
            merged.append(strategic_merge_patch({}, item))
        else:
            merged[position] = strategic_merge_patch(merged[position], item)
    return merged


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Apply a strategic merge patch (as ``kubectl apply``/``patch`` send) to ``target``; returns a new value."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {key: copy.deepcopy(value) for key, value in patch.items() if key != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    retain_keys = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key.startswith("$deleteFromPrimitiveList/"):
            continue
        if key in ("$patch", "$retainKeys"):
            continue
        if value is None:
            result.pop(key, None)
            continue
        if isinstance(value, list):
            result[key] = _merge_list_field(key, result.get(key), value, patch)
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = copy.deepcopy(value)
    _apply_primitive_deletions(result, patch)
    if isinstance(retain_keys, list):
        for key in list(result):
            if key not in retain_keys and key not in patch:
                del result[key]
    return result


def _merge_list_field(field: str, original: Any, value: list, patch: dict) -> list:
    order = patch.get("$setElementOrder/" + field)
    if field not in MERGE_KEYS or not isinstance(original, list):
        merged = [strategic_merge_patch({}, item) if isinstance(item, dict) else copy.deepcopy(item)
                  for item in value if not (isinstance(item, dict) and item.get("$patch") == "delete")]
        if field in MERGE_KEYS and not isinstance(original, list):
            return _ordered(merged, order, MERGE_KEYS[field])
        return merged
    key = MERGE_KEYS[field]
    if key is None:
        deletions = patch.get("$deleteFromPrimitiveList/" + field) or []
        return _ordered(_merge_primitive_list(original, value, deletions), order, None)
    return _ordered(_merge_keyed_list(original, value, key), order, key)


def _apply_primitive_deletions(result: dict, patch: dict) -> None:
    for key, deletions in patch.items():
        if not key.startswith("$deleteFromPrimitiveList/"):
            continue
        field = key.split("/", 1)[1]
        if field in patch:
            continue   # already handled together with the additions
        if isinstance(result.get(field), list):
            result[field] = [item for item in result[field] if item not in (deletions or [])]
    for key, order in patch.items():
        if key.startswith("$setElementOrder/"):
            field = key.split("/", 1)[1]
            if field not in patch and isinstance(result.get(field), list):
                result[field] = _ordered(result[field], order, MERGE_KEYS.get(field))


# ---------------------------------------------------------------- a patch request as the API server takes it

def decode_patch(patch, patch_type: str):
    if isinstance(patch, (bytes, bytearray)):
        patch = patch.decode()
    if not isinstance(patch, str):
        return copy.deepcopy(patch)
    try:
        if patch_type == APPLY_PATCH:
            import yaml   # only server-side apply needs YAML
            return yaml.safe_load(patch)
        return json.loads(patch)
    except ValueError as error:
        raise ApiError(400, "BadRequest", "error decoding patch: %s" % error)


def check_patch_type(patch_type: str) -> None:
    """415 UnsupportedMediaType unless ``patch_type`` (the request's Content-Type) is one of PATCH_TYPES."""
    if patch_type not in PATCH_TYPES:
        raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted"
                       " media types include: " + ", ".join(PATCH_TYPES))


def apply_patch_document(current: dict, document, patch_type: str):
    """``current`` patched with the decoded ``document``; a patch that does not apply is 422 Invalid (JSON
    patch) or 400 BadRequest (the merge kinds), as kube-apiserver answers."""
    try:
        return _patched(current, document, patch_type)
    except PatchError as error:
        if patch_type == JSON_PATCH:
            raise ApiError(422, "Invalid", str(error))
        raise ApiError(400, "BadRequest", str(error))


def _patched(current: dict, document, patch_type: str):
    if patch_type == JSON_PATCH:
        return json_patch(current, document)
    if patch_type == MERGE_PATCH:
        return merge_patch(current, document)
    if not isinstance(document, dict):
        raise PatchError("a strategic merge patch must be a JSON object")
    if patch_type == APPLY_PATCH:
        document = {key: value for key, value in document.items() if key not in ("apiVersion", "kind")}
    return strategic_merge_patch(current, document)
