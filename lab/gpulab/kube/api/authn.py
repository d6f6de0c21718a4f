"""Who a request is: the twin's one admin bearer token (``system:masters``, allowed everything) and
ServiceAccount tokens the twin issues through the TokenRequest API
(``POST /api/v1/namespaces/NS/serviceaccounts/NAME/token``, what ``kubectl create token`` calls).

ServiceAccount tokens are JWTs (HS256 with a key kept in the twin's CA folder, so they stay valid across daemon
restarts) naming the account and its uid; a token stops authenticating when it expires or when its ServiceAccount
is deleted (or recreated with another uid), as kube-apiserver's bound tokens do.

Also the legacy tokens of ``kubernetes.io/service-account-token`` Secrets (``legacy_token``, what the sim's tokens
controller writes into ``data.token``; issuer ``kubernetes/serviceaccount``, no expiry): valid while the Secret
holds that token and its ServiceAccount exists with the uid the token names, as kube-apiserver's legacy
validator checks. And x509 client certificates signed by the twin CA (``certificate_user``): the subject's CN is
the user, its O entries the groups, as kube-apiserver's client-certificate authenticator reads them.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from typing import List, Optional

from .errors import ApiError, not_found

ISSUER = "https://kubernetes.default.svc.cluster.local"
LEGACY_ISSUER = "kubernetes/serviceaccount"
LEGACY_CLAIM_PREFIX = "kubernetes.io/serviceaccount/"
ADMIN_USER = "admin"
MASTERS_GROUP = "system:masters"
AUTHENTICATED_GROUP = "system:authenticated"
DEFAULT_EXPIRATION_S = 3600
MIN_EXPIRATION_S = 600
_KEY_FILE = "serviceaccount-signing.key"


class User:
    """An authenticated identity: name, groups and (for ServiceAccounts) uid."""

    def __init__(self, name: str, groups: List[str], uid: str = ""):
        self.name = name
        self.groups = groups
        self.uid = uid

    @property
    def is_admin(self) -> bool:
        return MASTERS_GROUP in self.groups


def service_account_user(namespace: str, name: str, uid: str = "") -> User:
    return User("system:serviceaccount:%s:%s" % (namespace, name),
                ["system:serviceaccounts", "system:serviceaccounts:" + namespace, AUTHENTICATED_GROUP], uid)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _timestamp(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))


class Authenticator:
    """``authenticate(header)`` -> User or None; ``token_request(namespace, name, body)`` -> TokenRequest."""

    def __init__(self, store, admin_token: str, key_dir: str):
        self.store = store
        self.admin_token = admin_token
        self.key_dir = key_dir
        self._key_bytes: Optional[bytes] = None

    @property
    def _key(self) -> bytes:
        """The signing key, made on first use (a server that never sees a ServiceAccount token writes nothing)."""
        if self._key_bytes is None:
            path = os.path.join(self.key_dir, _KEY_FILE)
            if not os.path.exists(path):
                os.makedirs(self.key_dir, exist_ok=True)
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(descriptor, "w") as stream:
                    stream.write(secrets.token_hex(32))
            with open(path) as stream:
                self._key_bytes = stream.read().strip().encode()
        return self._key_bytes

    def authenticate(self, header: str) -> Optional[User]:
        if not header.startswith("Bearer "):
            return None
        token = header[len("Bearer "):].strip()
        if hmac.compare_digest(token, self.admin_token):
            return User(ADMIN_USER, [MASTERS_GROUP, AUTHENTICATED_GROUP])
        claims = self._verified_claims(token)
        if claims is None:
            return None
        if claims.get("iss") == LEGACY_ISSUER:
            return self._legacy_user(token, claims)
        account = claims.get("kubernetes.io") or {}
        namespace = account.get("namespace")
        name = (account.get("serviceaccount") or {}).get("name")
        uid = (account.get("serviceaccount") or {}).get("uid")
        try:
            current = self.store.get("serviceaccounts", name, namespace)
        except ApiError:
            return None
        if current["metadata"].get("uid") != uid:
            return None
        return service_account_user(namespace, name, uid)

    def _verified_claims(self, token: str) -> Optional[dict]:
        parts = token.split(".")
        if len(parts) != 3:
            return None
        expected = hmac.new(self._key, ("%s.%s" % (parts[0], parts[1])).encode(), hashlib.sha256).digest()
        try:
            if not hmac.compare_digest(_unb64(parts[2]), expected):
                return None
            claims = json.loads(_unb64(parts[1]))
        except ValueError:
            return None
        if not isinstance(claims, dict):
            return None
        if claims.get("iss") == LEGACY_ISSUER:
            return claims   # legacy Secret tokens do not expire
        if claims.get("iss") != ISSUER or claims.get("exp", 0) <= time.time():
            return None
        return claims

    def _signed(self, claims: dict) -> str:
        signing_input = "%s.%s" % (_b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()),
                                   _b64(json.dumps(claims, separators=(",", ":")).encode()))
        signature = hmac.new(self._key, signing_input.encode(), hashlib.sha256).digest()
        return signing_input + "." + _b64(signature)

    def legacy_token(self, namespace: str, account_name: str, account_uid: str, secret_name: str) -> str:
        """The token a ``kubernetes.io/service-account-token`` Secret holds (the legacy claims)."""
        return self._signed({"iss": LEGACY_ISSUER, "sub": "system:serviceaccount:%s:%s" % (namespace, account_name),
                             LEGACY_CLAIM_PREFIX + "namespace": namespace,
                             LEGACY_CLAIM_PREFIX + "secret.name": secret_name,
                             LEGACY_CLAIM_PREFIX + "service-account.name": account_name,
                             LEGACY_CLAIM_PREFIX + "service-account.uid": account_uid})

    def _legacy_user(self, token: str, claims: dict) -> Optional[User]:
        """A legacy token is valid while its Secret holds it and its ServiceAccount (same uid) exists."""
        namespace = claims.get(LEGACY_CLAIM_PREFIX + "namespace")
        name = claims.get(LEGACY_CLAIM_PREFIX + "service-account.name")
        uid = claims.get(LEGACY_CLAIM_PREFIX + "service-account.uid")
        try:
            secret = self.store.get("secrets", claims.get(LEGACY_CLAIM_PREFIX + "secret.name"), namespace)
            account = self.store.get("serviceaccounts", name, namespace)
        except ApiError:
            return None
        held = (secret.get("data") or {}).get("token") or ""
        try:
            held = base64.b64decode(held).decode()
        except ValueError:
            return None
        if secret["metadata"].get("deletionTimestamp") or not hmac.compare_digest(held, token) or \
                account["metadata"].get("uid") != uid:
            return None
        return service_account_user(namespace, name, uid)

    def token_request(self, namespace: str, name: str, body: dict) -> dict:
        """The TokenRequest answer (201) for ServiceAccount ``namespace/name``: a signed token in ``status``."""
        try:
            account = self.store.get("serviceaccounts", name, namespace)
        except ApiError:
            raise not_found("serviceaccounts", name)
        spec = dict((body or {}).get("spec") or {})
        expiration_s = spec.get("expirationSeconds") or DEFAULT_EXPIRATION_S
        if not isinstance(expiration_s, int) or expiration_s < MIN_EXPIRATION_S:
            raise ApiError(422, "Invalid", 'TokenRequest.authentication.k8s.io "%s" is invalid: spec.expirationSeconds:'
                           ' Invalid value: %s: may not specify a duration less than 10 minutes'
                           % (name, json.dumps(expiration_s)))
        audiences = spec.get("audiences") or [ISSUER]
        now = int(time.time())
        token = self._signed({"iss": ISSUER, "sub": "system:serviceaccount:%s:%s" % (namespace, name),
                              "aud": audiences, "iat": now, "nbf": now, "exp": now + expiration_s,
                              "kubernetes.io": {"namespace": namespace,
                                                "serviceaccount": {"name": name, "uid": account["metadata"]["uid"]}}})
        spec.update(audiences=audiences, expirationSeconds=expiration_s)
        return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": name, "namespace": namespace, "creationTimestamp": _timestamp(now)},
                "spec": spec,
                "status": {"token": token, "expirationTimestamp": _timestamp(now + expiration_s)}}


def certificate_user(peer_certificate: Optional[dict]) -> Optional[User]:
    """The user of a verified client certificate (``ssl.getpeercert()``): CN the name, each O a group."""
    if not peer_certificate:
        return None
    names, groups = [], []
    for relative_name in peer_certificate.get("subject") or ():
        for key, value in relative_name:
            if key == "commonName":
                names.append(value)
            elif key == "organizationName":
                groups.append(value)
    if not names:
        return None
    return User(names[0], groups + [AUTHENTICATED_GROUP])
