"""The ServiceAccount tokens controller of kube-controller-manager, for legacy token Secrets: a Secret of type
``kubernetes.io/service-account-token`` whose annotation ``kubernetes.io/service-account.name`` names a
ServiceAccount of its namespace gets ``data.token`` (a token the API twin accepts as that ServiceAccount, see
``kube.api.authn.Authenticator.legacy_token``), ``data.ca.crt`` (the cluster CA) and ``data.namespace``, and the
annotation ``kubernetes.io/service-account.uid``. A token Secret whose ServiceAccount does not exist (deleted, or
recreated with another uid) is deleted, as the real controller deletes it.

An addon of the ``ControllerManager`` (``sync(now)`` each pass); ``KubeCluster`` adds it when it serves the API
(the tokens are signed with the server's key).
"""
from __future__ import annotations

import base64
from typing import Callable

from ..api.errors import ApiError
from ..api.patch import MERGE_PATCH

TOKEN_SECRET_TYPE = "kubernetes.io/service-account-token"
NAME_ANNOTATION = "kubernetes.io/service-account.name"
UID_ANNOTATION = "kubernetes.io/service-account.uid"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class TokensController:
    """``sign(namespace, account_name, account_uid, secret_name)`` -> token; ``ca_pem``: the cluster CA."""

    def __init__(self, store, sign: Callable[[str, str, str, str], str], ca_pem: str):
        self.store = store
        self.sign = sign
        self.ca_pem = ca_pem

    def sync(self, now: float = 0.0) -> None:
        secrets, _ = self.store.list("secrets")
        for secret in secrets:
            if secret.get("type") == TOKEN_SECRET_TYPE and not secret["metadata"].get("deletionTimestamp"):
                try:
                    self._sync_secret(secret)
                except ApiError as error:
                    if error.code not in (404, 409):
                        raise

    def _sync_secret(self, secret: dict) -> None:
        metadata = secret["metadata"]
        namespace, annotations = metadata.get("namespace"), metadata.get("annotations") or {}
        try:
            account = self.store.get("serviceaccounts", annotations.get(NAME_ANNOTATION) or "", namespace)
        except ApiError:
            account = None
        uid = account["metadata"]["uid"] if account is not None else None
        if account is None or annotations.get(UID_ANNOTATION) not in (None, uid):
            self.store.delete("secrets", metadata["name"], namespace)
            return
        data = secret.get("data") or {}
        if data.get("token") and data.get("ca.crt") and data.get("namespace") and annotations.get(UID_ANNOTATION):
            return
        token = data.get("token") or _b64(self.sign(namespace, account["metadata"]["name"], uid, metadata["name"]))
        self.store.patch("secrets", metadata["name"],
                         {"metadata": {"annotations": {UID_ANNOTATION: uid},
                                       "resourceVersion": metadata["resourceVersion"]},
                          "data": {"token": token, "ca.crt": _b64(self.ca_pem), "namespace": _b64(namespace)}},
                         MERGE_PATCH, namespace)
