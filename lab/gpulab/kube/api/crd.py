"""CustomResourceDefinitions (``apiextensions.k8s.io/v1``): what the API server does with a CRD (defaults, the
status its controllers write at once: names accepted, established) and what the CRD makes it serve — the
resource's API description (storage version, scope, ``status`` subresource), the structural schema applied
to every write of its objects, and the ``additionalPrinterColumns`` of ``kubectl get``.

Twin simplifications: only the storage version is served; no conversion webhooks, ``scale`` subresource,
CEL rules or deletion finalizer (deleting a CRD deletes its objects at once).
"""
from __future__ import annotations

import json
import re
from typing import List, Optional

from . import schema as structural
from .errors import ApiError
from .resources import custom_resource
from .tables import age_of
from .timefmt import now_rfc3339

CRD_RESOURCE = "customresourcedefinitions"
_AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def _crd_invalid(name: str, field: str, value, why: str) -> ApiError:
    message = "Invalid value: %s: %s" % (json.dumps(value), why)
    return ApiError(422, "Invalid", 'CustomResourceDefinition.apiextensions.k8s.io "%s" is invalid: %s: %s'
                    % (name, field, message), {"name": name, "group": "apiextensions.k8s.io",
                                               "kind": "CustomResourceDefinition",
                                               "causes": [{"reason": "FieldValueInvalid", "message": message,
                                                           "field": field}]})


def storage_version(crd: dict) -> Optional[dict]:
    stored = [version for version in (crd.get("spec") or {}).get("versions") or [] if version.get("storage")]
    return stored[0] if len(stored) == 1 else None


def prepare_crd(crd: dict) -> None:
    """Check a CRD as the API server's validation does (the parts the twin relies on), default it and set the
    status the CRD controllers would: ``NamesAccepted`` and ``Established`` true, ``storedVersions``."""
    name = crd["metadata"]["name"]
    spec = crd.setdefault("spec", {})
    names = spec.get("names") or {}
    if name != "%s.%s" % (names.get("plural"), spec.get("group")):
        raise _crd_invalid(name, "metadata.name", name, 'must be spec.names.plural+"."+spec.group')
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        raise _crd_invalid(name, "spec.scope", spec.get("scope"), 'supported values: "Cluster", "Namespaced"')
    version = storage_version(crd)
    if version is None:
        raise _crd_invalid(name, "spec.versions", spec.get("versions"), "must have exactly one version marked as"
                                                                        " storage version")
    spec.setdefault("conversion", {"strategy": "None"})
    accepted = dict(names)
    accepted.setdefault("singular", names["kind"].lower())
    accepted.setdefault("listKind", names["kind"] + "List")
    now = now_rfc3339()
    previous = {condition.get("type"): condition for condition in (crd.get("status") or {}).get("conditions") or []}
    conditions = []
    for condition_type, reason, message in (("NamesAccepted", "NoConflicts", "no conflicts found"),
                                            ("Established", "InitialNamesAccepted", "the initial names have been"
                                                                                    " accepted")):
        since = (previous.get(condition_type) or {}).get("lastTransitionTime") or now
        conditions.append({"type": condition_type, "status": "True", "lastTransitionTime": since, "reason": reason,
                           "message": message})
    stored = list((crd.get("status") or {}).get("storedVersions") or [])
    if version["name"] not in stored:
        stored.append(version["name"])
    crd["status"] = {"acceptedNames": accepted, "conditions": conditions, "storedVersions": stored}


def resource_info(crd: dict) -> dict:
    """The API description of the resource a CRD defines (``RESOURCES`` form, with its schema and printer)."""
    spec = crd["spec"]
    version = storage_version(crd) or {}
    subresources = ["status"] if "status" in (version.get("subresources") or {}) else []
    info = custom_resource(spec["group"], version.get("name", "v1"), spec["names"]["kind"],
                           spec["scope"] == "Namespaced", spec["names"], subresources)
    info["schema"] = (version.get("schema") or {}).get("openAPIV3Schema") or {}
    info["printer"] = printer(version.get("additionalPrinterColumns") or [_AGE_COLUMN])
    return info


def admit_custom_object(info: dict, obj: dict, field_validation: Optional[str] = None) -> None:
    """Default, prune and validate a custom object against its CRD's schema (422 Invalid as the API server).
    Unknown fields are dropped, or refused (400) when the request asked for ``fieldValidation=Strict``, which
    kubectl sends by default."""
    pruned = structural.default_and_prune(obj, info["schema"])
    if pruned and field_validation == "Strict":
        raise ApiError(400, "BadRequest", '%s in version "%s" cannot be handled as a %s: strict decoding error: %s'
                       % (info["kind"], info["version"], info["kind"],
                          ", ".join('unknown field "%s"' % path for path in pruned)))
    errors = structural.validate(obj, info["schema"])
    if not errors:
        return
    name = obj["metadata"].get("name", "")
    texts = ["%s: %s" % (field, message) for field, _, message in errors]
    summary = texts[0] if len(texts) == 1 else "[%s]" % ", ".join(texts)
    raise ApiError(422, "Invalid", '%s.%s "%s" is invalid: %s' % (info["kind"], info["group"], name, summary),
                   {"name": name, "group": info["group"], "kind": info["kind"],
                    "causes": [{"reason": reason, "message": message, "field": field}
                               for field, reason, message in errors]})


# ---------------------------------------------------------------- printer columns

_PATH_TOKEN = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")


def json_path_value(obj, path: str):
    """The value at a simple JSONPath (``.status.state``, ``.spec.items[0].name``); None when absent."""
    value = obj
    for field, index in _PATH_TOKEN.findall(path.strip().strip("{}")):
        if field:
            value = value.get(field) if isinstance(value, dict) else None
        else:
            value = value[int(index)] if isinstance(value, list) and int(index) < len(value) else None
        if value is None:
            return None
    return value


def _cell(value, column_type: str):
    """A column value as the API server's table convertor gives it: ``date`` as an age, ``string`` as JSONPath
    prints it (JSON for objects and lists, ``true``/``false``), other types as they are."""
    if value is None:
        return None
    if column_type == "date":
        return age_of(value) if isinstance(value, str) else None
    if column_type != "string" or isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return json.dumps(value) if isinstance(value, bool) else str(value)


def printer(columns: List[dict]):
    """Table columns and row function for ``additionalPrinterColumns`` (after NAME, as the API server prints)."""
    definitions = [{"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0}]
    definitions += [{"name": column["name"], "type": column.get("type", "string"), "format": column.get("format", ""),
                     "description": column.get("description", column["name"]), "priority": column.get("priority", 0)}
                    for column in columns]

    def row(obj: dict) -> list:
        return [obj["metadata"]["name"]] + [_cell(json_path_value(obj, column["jsonPath"]), column.get("type", "string"))
                                            for column in columns]
    return definitions, row
