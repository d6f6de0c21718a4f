# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """Connection options of the modules that talk to Prometheus or Alertmanager (monitoring_http_argument_spec())."""

    DOCUMENTATION = r"""
options:
  url:
    description:
      - Base URL of the server, with its path prefix if it has one (a reverse proxy's path, Alertmanager's
        C(--web.route-prefix)), for example V(https://prometheus.example.com/prometheus).
    type: str
    required: true
  bearer_token:
    description:
      - "Token sent as C(Authorization: Bearer <token>)."
      - Mutually exclusive with O(url_username).
    type: str
  url_username:
    description:
      - User name for HTTP basic authentication (sent with every request).
    type: str
  url_password:
    description:
      - Password for HTTP basic authentication; needs O(url_username).
    type: str
  validate_certs:
    description:
      - Verify the server's TLS certificate.
    type: bool
    default: true
  ca_path:
    description:
      - PEM file of the CA that signed the server's certificate, instead of the system's trust store.
    type: path
  timeout:
    description:
      - Seconds each HTTP request may take (at least 1).
    type: int
    default: 10
"""
