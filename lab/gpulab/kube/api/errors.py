"""API failures as ``metav1.Status`` bodies: ApiError and the NotFound/Conflict/Invalid messages of kube-apiserver."""
from __future__ import annotations

import json
from typing import Optional

from .resources import RESOURCES, qualified


class ApiError(Exception):
    """An API failure; ``to_status()`` gives the ``metav1.Status`` body the server answers with."""

    def __init__(self, code: int, reason: str, message: str, details: Optional[dict] = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def to_status(self) -> dict:
        status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                  "message": self.message, "reason": self.reason, "code": self.code}
        if self.details is not None:
            status["details"] = self.details
        return status


def not_found(resource: str, name: str) -> ApiError:
    info = RESOURCES[resource]
    return ApiError(404, "NotFound", '%s "%s" not found' % (qualified(resource), name),
                    {"name": name, "group": info["group"], "kind": info["plural"]})


def conflict(resource: str, name: str, why: str) -> ApiError:
    info = RESOURCES[resource]
    return ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s' % (qualified(resource), name, why),
                    {"name": name, "group": info["group"], "kind": info["plural"]})


def invalid(resource: str, name: str, field: str, value, why: str) -> ApiError:
    info = RESOURCES[resource]
    detail = "%s: Invalid value: %s: %s" % (field, json.dumps(value), why)
    return ApiError(422, "Invalid", '%s.%s "%s" is invalid: %s' % (info["kind"], info["group"] or "core", name, detail)
                    if info["group"] else '%s "%s" is invalid: %s' % (info["kind"], name, detail),
                    {"name": name, "group": info["group"], "kind": info["kind"],
                     "causes": [{"reason": "FieldValueInvalid", "message": "Invalid value: %s: %s"
                                 % (json.dumps(value), why), "field": field}]})
