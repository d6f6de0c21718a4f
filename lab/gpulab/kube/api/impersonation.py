"""User impersonation as kube-apiserver's impersonation filter does it: the ``Impersonate-User``,
``Impersonate-Group``, ``Impersonate-Uid`` and ``Impersonate-Extra-<key>`` headers make a request act as another
user, when the authenticated user may ``impersonate`` each of them (RBAC: ``serviceaccounts`` with the account's
namespace and name for ``system:serviceaccount:NS:NAME``, else ``users``; ``groups``; ``uids`` and
``userextras/<key>`` in ``authentication.k8s.io``). An impersonated ServiceAccount without groups gets the
ServiceAccount groups; every impersonated user but ``system:anonymous`` is in ``system:authenticated``. A
refused impersonation is kube-apiserver's 403 (``... cannot impersonate resource "serviceaccounts" ...``)."""
from __future__ import annotations

from typing import List

from .authn import AUTHENTICATED_GROUP, User, service_account_user
from .errors import ApiError
from .rbac import Attributes, forbidden

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
ANONYMOUS_USER = "system:anonymous"
EXTRA_PREFIX = "impersonate-extra-"


def _header_values(headers, name: str) -> List[str]:
    return [value.strip() for value in (headers.get_all(name) or []) if value.strip()]


def impersonated(authorizer, user: User, headers) -> User:
    """``user`` itself when the request impersonates nobody; else the impersonated user (403 when not allowed)."""
    names = _header_values(headers, "Impersonate-User")
    groups = _header_values(headers, "Impersonate-Group")
    uids = _header_values(headers, "Impersonate-Uid")
    extras = [(key[len(EXTRA_PREFIX):], value) for key, value in headers.items()
              if key.lower().startswith(EXTRA_PREFIX)]
    if not (names or groups or uids or extras):
        return user
    if not names:
        raise ApiError(500, "InternalError", "Internal error occurred: requested %s without impersonating a user"
                       % ", ".join(groups + uids + [key for key, _ in extras]))
    name = names[0]
    checks = []
    if name.startswith(SERVICE_ACCOUNT_PREFIX) and name.count(":") == 3:
        namespace, account = name[len(SERVICE_ACCOUNT_PREFIX):].split(":")
        checks.append(Attributes("impersonate", "", "serviceaccounts", namespace=namespace, name=account,
                                 resource_key="serviceaccounts"))
    else:
        checks.append(Attributes("impersonate", "", "users", name=name))
    checks += [Attributes("impersonate", "", "groups", name=group) for group in groups]
    checks += [Attributes("impersonate", "authentication.k8s.io", "uids", name=uid) for uid in uids]
    checks += [Attributes("impersonate", "authentication.k8s.io", "userextras", subresource=key, name=value)
               for key, value in extras]
    for attributes in checks:
        if not authorizer.allowed(user, attributes):
            raise forbidden(user, attributes)
    if not groups and name.startswith(SERVICE_ACCOUNT_PREFIX) and name.count(":") == 3:
        namespace, account = name[len(SERVICE_ACCOUNT_PREFIX):].split(":")
        return _with_uid(service_account_user(namespace, account), uids)
    if name != ANONYMOUS_USER and AUTHENTICATED_GROUP not in groups:
        groups = groups + [AUTHENTICATED_GROUP]
    return _with_uid(User(name, groups), uids)


def _with_uid(user: User, uids: List[str]) -> User:
    user.uid = uids[0] if uids else user.uid
    return user

