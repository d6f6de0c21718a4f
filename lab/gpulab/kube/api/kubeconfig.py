"""Write the kubeconfig through which kubectl, the Python client and Ansible reach the twin."""
from __future__ import annotations

import base64
import json
import os

CLUSTER_NAME = "gpulab"
USER_NAME = "gpulab-admin"


def kubeconfig_document(url: str, ca_pem: str, token: str, cluster_name: str = CLUSTER_NAME) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {
            "server": url,
            "certificate-authority-data": base64.b64encode(ca_pem.encode()).decode()}}],
        "users": [{"name": USER_NAME, "user": {"token": token}}],
        "contexts": [{"name": cluster_name,
                      "context": {"cluster": cluster_name, "user": USER_NAME, "namespace": "default"}}],
        "current-context": cluster_name,
        "preferences": {},
    }


def write_kubeconfig(path: str, url: str, ca_pem: str, token: str, cluster_name: str = CLUSTER_NAME) -> str:
    """Write ``path`` (mode 0600; JSON is valid YAML, and every kubeconfig reader accepts it)."""
    document = kubeconfig_document(url, ca_pem, token, cluster_name)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    temporary = path + ".tmp"
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=2)
        handle.write("\n")
    os.replace(temporary, path)
    return path
