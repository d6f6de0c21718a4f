"""Optimistic concurrency of writes: a stale ``metadata.resourceVersion`` or failed DeleteOptions
preconditions answer 409 Conflict with kube-apiserver's messages."""
from __future__ import annotations

from typing import Optional

from .errors import conflict


def check_resource_version(resource: str, name: str, current: dict, wanted_rv) -> None:
    """Optimistic concurrency: 409 Conflict when a write names a resourceVersion that is not the stored one
    (a write without one is unconditional)."""
    if wanted_rv and str(wanted_rv) != current["metadata"]["resourceVersion"]:
        raise conflict(resource, name, "the object has been modified; please apply your changes to the latest"
                                        " version and try again")


def check_preconditions(resource: str, name: str, obj: dict, preconditions: Optional[dict]) -> None:
    if not preconditions:
        return
    uid = preconditions.get("uid")
    if uid and uid != obj["metadata"]["uid"]:
        raise conflict(resource, name, "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                        % (uid, obj["metadata"]["uid"]))
    rv = preconditions.get("resourceVersion")
    if rv and rv != obj["metadata"]["resourceVersion"]:
        raise conflict(resource, name, "Precondition failed: ResourceVersion in precondition: %s, ResourceVersion"
                        " in object meta: %s" % (rv, obj["metadata"]["resourceVersion"]))
