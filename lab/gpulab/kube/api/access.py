"""The API server's access control in one place (what ``server.py`` calls): authentication (``authn.py``: a
bearer token, else a client certificate), impersonation (``impersonation.py``), RBAC authorization
(``rbac.py``, after the node rule of ``nodeauth.py``) of every resource request, and the two requests that are about access itself (TokenRequest,
SelfSubjectAccessReview)."""
from __future__ import annotations

from typing import Callable, Dict, List, Optional

from .authn import Authenticator, User, certificate_user
from .impersonation import impersonated
from .nodeauth import authorize_node
from .rbac import SELF_SUBJECT_ACCESS_REVIEW_PATH, Authorizer, request_attributes
from .routes import parse_resource_path


class Access:
    def __init__(self, store, admin_token: str, key_dir: str):
        self.authenticator = Authenticator(store, admin_token, key_dir)
        self.authorizer = Authorizer(store)

    def authenticate(self, authorization_header: str, peer_certificate: Optional[dict] = None,
                     headers=None) -> Optional[User]:
        """The user a request acts as: its bearer token's, else its client certificate's (None: 401), then the
        one it impersonates (403 when it may not)."""
        user = self.authenticator.authenticate(authorization_header)
        if user is None and not authorization_header:
            user = certificate_user(peer_certificate)
        if user is not None and headers is not None:
            user = impersonated(self.authorizer, user, headers)
        return user

    def check(self, method: str, path: str, query: Dict[str, List[str]], user: User,
              read_body: Callable[[], dict]) -> Optional[dict]:
        """Raises the 403 of a request ``user`` may not make; returns the 201 answer of a TokenRequest or a
        SelfSubjectAccessReview (None for every other request, which the server then serves)."""
        if path.rstrip("/") == SELF_SUBJECT_ACCESS_REVIEW_PATH and method == "POST":
            return self.authorizer.self_subject_access_review(user, read_body())
        route = parse_resource_path(path)
        if route is None:
            return None
        attributes = request_attributes(method, route, query)
        if not authorize_node(user, attributes):   # a kubelet on its own Node object; else RBAC
            self.authorizer.authorize(user, attributes)
        if route.resource == "serviceaccounts" and route.subresource == "token" and method == "POST":
            return self.authenticator.token_request(route.namespace, route.name, read_body())
        return None
