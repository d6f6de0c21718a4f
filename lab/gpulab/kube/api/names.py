"""Object names: ``generateName`` and the RFC 1123 subdomain rule of kube-apiserver's name validation."""
from __future__ import annotations

import random
import re
import string

from .errors import invalid

_NAME_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_MESSAGE = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.',"
                 " and must start and end with an alphanumeric character (e.g. 'example.com', regex used for"
                 " validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


def assign_name(resource: str, metadata: dict) -> None:
    """Generate the name from ``generateName`` when there is none; 422 Invalid when it is no RFC 1123 subdomain."""
    if not metadata.get("name") and metadata.get("generateName"):
        suffix = "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(5))
        metadata["name"] = metadata["generateName"] + suffix
    name = metadata.get("name")
    if not name:
        raise invalid(resource, "", "metadata.name", "", "name or generateName is required")
    if len(name) > 253 or not _NAME_PATTERN.match(name):
        raise invalid(resource, name, "metadata.name", name, _NAME_MESSAGE)
