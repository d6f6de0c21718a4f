"""Kubelets as the API server sees them (their x509 client certificates are ``authn.certificate_user``'s): the node
identity's rights on Node objects, as the Node authorizer and the NodeRestriction admission plugin give them.

A node identity (user ``system:node:NAME`` in group ``system:nodes``) may get, patch and update its own Node object
(and its ``status``); modifying another node is refused with NodeRestriction's 403. Every other request of a node
identity goes to RBAC, where nothing is bound to it: 403.
"""
from __future__ import annotations

from typing import Optional

from .authn import User
from .errors import ApiError

NODES_GROUP = "system:nodes"
NODE_USER_PREFIX = "system:node:"
_OWN_NODE_VERBS = ("get", "patch", "update")
_MODIFY_VERBS = ("patch", "update", "delete")


def node_name(user: User) -> Optional[str]:
    """NAME of a node identity ``system:node:NAME`` in ``system:nodes``; None for any other user."""
    if NODES_GROUP in user.groups and user.name.startswith(NODE_USER_PREFIX) and len(user.name) > len(NODE_USER_PREFIX):
        return user.name[len(NODE_USER_PREFIX):]
    return None


def authorize_node(user: User, attributes) -> bool:
    """True when a node identity's request on Node objects is allowed here (its own node); raises NodeRestriction's
    403 when it would modify another node; False when this rule has no opinion (RBAC decides)."""
    node = node_name(user)
    if node is None or attributes.group != "" or attributes.resource != "nodes" \
            or attributes.subresource not in ("", "status"):
        return False
    if attributes.name == node and attributes.verb in _OWN_NODE_VERBS:
        return True
    if attributes.name and attributes.name != node and attributes.verb in _MODIFY_VERBS:
        raise ApiError(403, "Forbidden", 'nodes "%s" is forbidden: node "%s" is not allowed to modify node "%s"'
                       % (attributes.name, node, attributes.name), {"name": attributes.name, "kind": "nodes"})
    return False
