# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """Connection options of the Kubernetes modules (names and environment variables as kubernetes.core)."""

    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file, or the kubeconfig itself as a dictionary.
      - Without O(kubeconfig) and O(host), the default kubeconfig (E(KUBECONFIG) or C(~/.kube/config)) is used,
        else the in-cluster service account.
      - Can also be set with the E(K8S_AUTH_KUBECONFIG) environment variable.
    type: raw
  context:
    description:
      - The kubeconfig context to use; the current context when omitted.
      - Can also be set with the E(K8S_AUTH_CONTEXT) environment variable.
    type: str
  host:
    description:
      - URL of the Kubernetes API server, overriding the kubeconfig's.
      - Can also be set with the E(K8S_AUTH_HOST) environment variable.
    type: str
  api_key:
    description:
      - Bearer token for the API server, overriding the kubeconfig's credentials.
      - Can also be set with the E(K8S_AUTH_API_KEY) environment variable.
    type: str
  validate_certs:
    description:
      - Whether to verify the API server's TLS certificate. Defaults to what the kubeconfig says (verify).
      - Can also be set with the E(K8S_AUTH_VERIFY_SSL) environment variable.
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description:
      - Path to the CA certificate that signed the API server's certificate.
      - Can also be set with the E(K8S_AUTH_SSL_CA_CERT) environment variable.
    type: path
    aliases: [ssl_ca_cert]
  client_cert:
    description:
      - Path to a client certificate for TLS client authentication.
      - Can also be set with the E(K8S_AUTH_CERT_FILE) environment variable.
    type: path
    aliases: [cert_file]
  client_key:
    description:
      - Path to the key of O(client_cert).
      - Can also be set with the E(K8S_AUTH_KEY_FILE) environment variable.
    type: path
    aliases: [key_file]
  proxy:
    description:
      - HTTP proxy URL for the connections to the API server.
      - Can also be set with the E(K8S_AUTH_PROXY) environment variable.
    type: str
  impersonate_user:
    description:
      - User name to act as (C(Impersonate-User) header).
      - Can also be set with the E(K8S_AUTH_IMPERSONATE_USER) environment variable.
    type: str
  impersonate_groups:
    description:
      - Group to act as (C(Impersonate-Group) header).
      - The kubernetes Python client sends one value per header, so at most one group is accepted; more fail
        the task before any request.
      - Can also be set with the E(K8S_AUTH_IMPERSONATE_GROUPS) environment variable.
    type: list
    elements: str
  request_timeout:
    description:
      - Seconds to wait for the API server to answer each request (the connection itself within 10 seconds at
        most), so that a server that accepts and never answers fails the task naming the call instead of hanging it.
        A watch waits for its own server-side timeout plus this.
      - Reads, evictions and writes guarded by the C(resourceVersion) read are retried after 0.5, 1 and 2 seconds
        when answered 500, 502, 503 or 504 or when the connection is refused or reset; then the task fails naming
        the call and the attempts. Other calls are not retried.
      - Can also be set with the E(K8S_AUTH_REQUEST_TIMEOUT) environment variable.
    type: float
    default: 60
requirements:
  - kubernetes >= 28.1.0 (the official Python client, on the machine that runs the module)
notes:
  - "These modules talk to the API server from where they run: use C(delegate_to: localhost) or a play on
    C(localhost)."
  - "Set the connection once for all of them with
    C(module_defaults: {group/gpuops.nvidia.k8s: {kubeconfig: ...}})."
"""
