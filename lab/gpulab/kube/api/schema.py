"""Structural schemas of CustomResourceDefinitions, as kube-apiserver applies them to custom objects on every
write: defaults (``default`` of a missing property whose parent exists), pruning of unknown fields (unless
``x-kubernetes-preserve-unknown-fields``), then validation of ``required``, ``type`` and ``enum`` with the
field errors of the real server (``spec.nodeName: Required value``). ``metadata`` is the API server's own and
is neither pruned nor validated here. Not done: CEL rules (``x-kubernetes-validations``), formats, patterns,
bounds and lengths.
"""
from __future__ import annotations

import copy
import json
from typing import List, Tuple

_ROOT_FIELDS_KEPT = ("apiVersion", "kind", "metadata")
_JSON_TYPES = {"object": (dict,), "array": (list,), "string": (str,), "integer": (int,), "number": (int, float),
               "boolean": (bool,)}

# (field path, cause reason, cause message) of one failed check
FieldError = Tuple[str, str, str]


def default_and_prune(obj: dict, schema: dict) -> List[str]:
    """Apply the schema's defaults to ``obj`` and drop the fields it does not know, in place; returns the paths
    of the fields dropped (``spec.unknownField``)."""
    pruned: List[str] = []
    for field in list(obj):
        if field in _ROOT_FIELDS_KEPT:
            continue
        properties = schema.get("properties") or {}
        if field not in properties and not schema.get("x-kubernetes-preserve-unknown-fields"):
            del obj[field]
            pruned.append(field)
    for field, sub_schema in (schema.get("properties") or {}).items():
        if field in _ROOT_FIELDS_KEPT:
            continue
        if field not in obj and "default" in sub_schema:
            obj[field] = copy.deepcopy(sub_schema["default"])
        if field in obj:
            _default_value(obj[field], sub_schema, field, pruned)
    return pruned


def _default_value(value, schema: dict, path: str, pruned: List[str]) -> None:
    if isinstance(value, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        if properties is not None and not schema.get("x-kubernetes-preserve-unknown-fields") and not additional:
            for field in [field for field in value if field not in properties]:
                del value[field]
                pruned.append("%s.%s" % (path, field))
        for field, sub_schema in (properties or {}).items():
            if field not in value and "default" in sub_schema:
                value[field] = copy.deepcopy(sub_schema["default"])
            if field in value:
                _default_value(value[field], sub_schema, "%s.%s" % (path, field), pruned)
        if isinstance(additional, dict):
            for field in value:
                _default_value(value[field], additional, "%s.%s" % (path, field), pruned)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            _default_value(item, schema["items"], "%s[%d]" % (path, index), pruned)


def validate(obj: dict, schema: dict) -> List[FieldError]:
    """The field errors of ``obj`` against its schema (empty when valid)."""
    errors: List[FieldError] = []
    for field in schema.get("required") or []:
        if field not in obj:
            errors.append((field, "FieldValueRequired", "Required value"))
    for field, sub_schema in (schema.get("properties") or {}).items():
        if field in obj and field not in _ROOT_FIELDS_KEPT:
            _validate_value(obj[field], sub_schema, field, errors)
    return errors


def _type_name(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    for name in ("object", "array", "string", "integer", "number"):
        if isinstance(value, _JSON_TYPES[name]):
            return name
    return type(value).__name__


def _has_type(value, wanted: str) -> bool:
    if isinstance(value, bool) and wanted in ("integer", "number"):
        return False
    if wanted == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _JSON_TYPES.get(wanted, (object,)))


def _validate_value(value, schema: dict, path: str, errors: List[FieldError]) -> None:
    if value is None and schema.get("nullable"):
        return
    wanted = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            detail = "%s in body must be of type integer,string: %s" % (path, json.dumps(_type_name(value)))
            errors.append((path, "FieldValueTypeInvalid", "Invalid value: %s: %s" % (json.dumps(_type_name(value)),
                                                                                     detail)))
        return
    if wanted and not _has_type(value, wanted):
        actual = json.dumps(_type_name(value))
        errors.append((path, "FieldValueTypeInvalid", "Invalid value: %s: %s in body must be of type %s: %s"
                       % (actual, path, wanted, actual)))
        return
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(json.dumps(item) for item in schema["enum"])
        errors.append((path, "FieldValueNotSupported", "Unsupported value: %s: supported values: %s"
                       % (json.dumps(value), supported)))
    if isinstance(value, dict):
        for field in schema.get("required") or []:
            if field not in value:
                errors.append(("%s.%s" % (path, field), "FieldValueRequired", "Required value"))
        for field, sub_schema in (schema.get("properties") or {}).items():
            if field in value:
                _validate_value(value[field], sub_schema, "%s.%s" % (path, field), errors)
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            for field, item in value.items():
                _validate_value(item, additional, "%s[%s]" % (path, field), errors)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            _validate_value(item, schema["items"], "%s[%d]" % (path, index), errors)
