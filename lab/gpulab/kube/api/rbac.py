"""RBAC authorization as kube-apiserver's RBAC authorizer does it: a request's attributes (verb, API group,
resource and subresource, namespace, name) are allowed when a rule of a Role or ClusterRole bound to the user
(RoleBinding in the request's namespace, or ClusterRoleBinding) matches them; otherwise the request is answered
with kube-apiserver's 403 Forbidden Status. ``system:masters`` (the twin's admin token) is allowed everything.
No aggregation, no escalation checks on role writes; non-resource paths (discovery, health, OpenAPI) are
allowed to every authenticated user, as the default ``system:discovery`` binding does.

Also ``SelfSubjectAccessReview`` (``kubectl auth can-i``), answered from the same rules.
"""
from __future__ import annotations

from typing import Dict, Iterator, List, Optional

from .authn import User
from .errors import ApiError
from .resources import RESOURCES, qualified
from .routes import Route, is_true, query_value

SELF_SUBJECT_ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


class Attributes:
    """What a resource request asks for, in the terms of RBAC rules."""

    def __init__(self, verb: str, group: str, resource: str, subresource: str = "", namespace: str = "",
                 name: str = "", resource_key: Optional[str] = None):
        self.verb = verb
        self.group = group
        self.resource = resource
        self.subresource = subresource
        self.namespace = namespace
        self.name = name
        self.resource_key = resource_key


def request_attributes(method: str, route: Route, query: Dict[str, List[str]]) -> Attributes:
    """The RBAC verb and names of a request, as kube-apiserver's RequestInfo derives them."""
    watch = route.watch_path or is_true(query_value(query, "watch"))
    if method in ("GET", "HEAD"):
        verb = "watch" if watch else ("get" if route.name else "list")
    elif method == "POST":
        verb = "create"
    elif method == "PUT":
        verb = "update"
    elif method == "PATCH":
        verb = "patch"
    elif method == "DELETE":
        verb = "delete" if route.name else "deletecollection"
    else:
        verb = method.lower()
    namespace = route.namespace or ""
    if route.resource == "namespaces" and route.name:
        namespace = route.name   # a Namespace is in itself, for RoleBindings
    return Attributes(verb, route.info["group"], route.info["plural"], route.subresource or "", namespace,
                      route.name or "", route.resource)


def _matches(values: List[str], wanted: str) -> bool:
    return "*" in values or wanted in values


def _resource_matches(rule_resources: List[str], attributes: Attributes) -> bool:
    if not attributes.subresource:
        return _matches(rule_resources, attributes.resource)
    combined = attributes.resource + "/" + attributes.subresource
    return combined in rule_resources or "*" in rule_resources or ("*/" + attributes.subresource) in rule_resources


def rule_allows(rule: dict, attributes: Attributes) -> bool:
    names = rule.get("resourceNames") or []
    return (_matches(rule.get("verbs") or [], attributes.verb)
            and _matches(rule.get("apiGroups") or [], attributes.group)
            and _resource_matches(rule.get("resources") or [], attributes)
            and (not names or attributes.name in names))


def _subject_matches(subject: dict, user: User, binding_namespace: str) -> bool:
    kind = subject.get("kind")
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return user.name == "system:serviceaccount:%s:%s" % (namespace, subject.get("name"))
    if kind == "User":
        return user.name == subject.get("name")
    if kind == "Group":
        return subject.get("name") in user.groups
    return False


class Authorizer:
    """RBAC over the roles and bindings in ``store``; ``authorize(user, attributes)`` raises the 403."""

    def __init__(self, store):
        self.store = store

    def _rules_of(self, role_ref: dict, namespace: str) -> List[dict]:
        kind = role_ref.get("kind")
        try:
            role = (self.store.get("clusterroles", role_ref.get("name")) if kind == "ClusterRole"
                    else self.store.get("roles", role_ref.get("name"), namespace))
        except ApiError:
            return []   # a binding to a missing role grants nothing
        return role.get("rules") or []

    def rules_for(self, user: User, namespace: str) -> Iterator[dict]:
        """Every rule that applies to ``user`` in ``namespace`` ("" = cluster scope: ClusterRoleBindings only)."""
        bindings, _ = self.store.list("clusterrolebindings")
        for binding in bindings:
            if any(_subject_matches(subject, user, "") for subject in binding.get("subjects") or []):
                yield from self._rules_of(binding.get("roleRef") or {}, "")
        if not namespace:
            return
        try:
            bindings, _ = self.store.list("rolebindings", namespace)
        except ApiError:
            return
        for binding in bindings:
            if any(_subject_matches(subject, user, namespace) for subject in binding.get("subjects") or []):
                yield from self._rules_of(binding.get("roleRef") or {}, namespace)

    def allowed(self, user: User, attributes: Attributes) -> bool:
        if user.is_admin:
            return True
        return any(rule_allows(rule, attributes) for rule in self.rules_for(user, attributes.namespace))

    def authorize(self, user: User, attributes: Attributes) -> None:
        if not self.allowed(user, attributes):
            raise forbidden(user, attributes)

    def self_subject_access_review(self, user: User, review: dict) -> dict:
        """The SelfSubjectAccessReview answer: ``status.allowed`` for the attributes in ``spec``."""
        spec = (review or {}).get("spec") or {}
        resource_attributes = spec.get("resourceAttributes")
        if resource_attributes is not None:
            attributes = Attributes(resource_attributes.get("verb") or "", resource_attributes.get("group") or "",
                                    resource_attributes.get("resource") or "",
                                    resource_attributes.get("subresource") or "",
                                    resource_attributes.get("namespace") or "", resource_attributes.get("name") or "")
            allowed = self.allowed(user, attributes)
        else:
            allowed = True   # non-resource URLs: discovery and health are open to every authenticated user
        return {"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                "metadata": {"creationTimestamp": None}, "spec": spec,
                "status": {"allowed": allowed} if allowed else {"allowed": False}}


def forbidden(user: User, attributes: Attributes) -> ApiError:
    """kube-apiserver's 403: ``nodes "x" is forbidden: User "..." cannot patch resource "nodes" in API group ""
    at the cluster scope``."""
    resource = attributes.resource + ("/" + attributes.subresource if attributes.subresource else "")
    scope = ('in the namespace "%s"' % attributes.namespace) if attributes.namespace else "at the cluster scope"
    reason = 'User "%s" cannot %s resource "%s" in API group "%s" %s' % (
        user.name, attributes.verb, resource, attributes.group, scope)
    group_resource = (qualified(attributes.resource_key) if attributes.resource_key in RESOURCES
                      else attributes.resource)
    subject = '%s "%s"' % (group_resource, attributes.name) if attributes.name else group_resource
    return ApiError(403, "Forbidden", "%s is forbidden: %s" % (subject, reason),
                    {"name": attributes.name, "group": attributes.group, "kind": attributes.resource}
                    if attributes.name else {"group": attributes.group, "kind": attributes.resource})
