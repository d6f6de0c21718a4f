# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """Connection options and action group of the Kubernetes modules (option names, meanings and environment
    variables as kubernetes.core)."""

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
  username:
    description:
      - User name for HTTP basic authentication to the API server, with O(password).
      - Only for clusters that accept basic authentication (Kubernetes itself removed it in 1.19); O(api_key)
        takes precedence when both are set.
      - Can also be set with the E(K8S_AUTH_USERNAME) environment variable.
    type: str
  password:
    description:
      - Password for HTTP basic authentication, with O(username).
      - Can also be set with the E(K8S_AUTH_PASSWORD) environment variable.
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
  no_proxy:
    description:
      - Comma-separated hosts, domains, IP addresses or CIDRs reached without O(proxy), for example
        C(localhost,.cluster.local,10.0.0.0/8).
      - Can also be set with the E(K8S_AUTH_NO_PROXY) environment variable.
    type: str
  proxy_headers:
    description:
      - Headers sent to the HTTP proxy of O(proxy), built with urllib3's C(make_headers).
    type: dict
    suboptions:
      proxy_basic_auth:
        description:
          - C(username:password) for the proxy's basic authentication (C(Proxy-Authorization) header).
          - Can also be set with the E(K8S_AUTH_PROXY_HEADERS_PROXY_BASIC_AUTH) environment variable.
        type: str
      basic_auth:
        description:
          - C(username:password) for a basic authentication header to the proxy.
          - Can also be set with the E(K8S_AUTH_PROXY_HEADERS_BASIC_AUTH) environment variable.
        type: str
      user_agent:
        description:
          - User agent sent to the proxy, for example C(gpuops/1.0).
          - Can also be set with the E(K8S_AUTH_PROXY_HEADERS_USER_AGENT) environment variable.
        type: str
  persist_config:
    description:
      - Whether to write refreshed credentials (OIDC refresh tokens and the like) back to the kubeconfig file.
      - Without it the refreshed token is used for this task only, and an expired refresh token makes a later
        run fail to authenticate.
      - Only for a kubeconfig file (O(kubeconfig) as a path or the default one), not for a dictionary.
      - Can also be set with the E(K8S_AUTH_PERSIST_CONFIG) environment variable.
      - Not set means V(false), as in kubernetes.core.
    type: bool
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
      - Transient failures are retried with back-off (0.5, 1, 2, 4, 4, ... seconds) for up to 30 seconds, or
        O(request_timeout) when shorter, so that an API server restart does not fail the task; then the task fails
        naming the call and the attempts. A refused connection is retried for every call; a reset connection and
        an answer 500, 502, 503 or 504 for reads, evictions and writes guarded by the C(resourceVersion) read; a
        429 for every call but an eviction (there it is the disruption budget's answer), waiting at least its
        C(Retry-After). Timeouts and other answers (a 409 conflict) are not retried.
      - Can also be set with the E(K8S_AUTH_REQUEST_TIMEOUT) environment variable.
    type: float
    default: 60
attributes:
  action_group:
    description:
      - Use C(group/gpuops.nvidia.k8s) in C(module_defaults) to set the connection options of these modules;
        the group extends C(kubernetes.core.k8s), so the same block also sets them for C(kubernetes.core.k8s),
        C(kubernetes.core.k8s_info) and the other kubernetes.core modules.
    support: full
    membership:
      - gpuops.nvidia.k8s
requirements:
  - kubernetes >= 28.1.0 (the official Python client, on the machine that runs the module)
notes:
  - "These modules talk to the API server from where they run: use C(delegate_to: localhost) or a play on
    C(localhost)."
  - "Set the connection once for all of them, and for the kubernetes.core modules, with
    C(module_defaults: {group/gpuops.nvidia.k8s: {kubeconfig: ...}})."
"""
