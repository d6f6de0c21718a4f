# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The HTTP side of the Prometheus API for the modules that read it (prometheus_gate, gpu_fleet_report):
``PrometheusClient(params)`` with ``url``, ``bearer_token``, ``validate_certs``, ``ca_path``, ``timeout``;
``call(path, form)`` gives ``(data, warnings)`` or raises PrometheusAnswerError with a one-line reason."""

from __future__ import annotations

from urllib.parse import urlencode

from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring import http as http_api
from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.prometheus import PrometheusAnswerError, parse_api_answer


class PrometheusClient:
    """GET/POST on the API with the module's TLS, token and timeout options; answers are read by parse_api_answer
    into ``(data, warnings)``."""

    def __init__(self, params):
        self.base_url = params["url"].rstrip("/")
        self.headers = {"Accept": "application/json"}
        if params["bearer_token"]:
            self.headers["Authorization"] = "Bearer %s" % params["bearer_token"]
        self.validate_certs = params["validate_certs"]
        self.ca_path = params["ca_path"]
        self.timeout = params["timeout"]

    def call(self, path, form=None):
        """``(data, warnings)`` of the answer to ``path`` (POST with ``form`` when given); PrometheusAnswerError
        otherwise."""
        headers = dict(self.headers)
        body = None
        if form is not None:
            body = urlencode(form)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        return parse_api_answer(*http_api.request(
            self.base_url, path, "Prometheus", PrometheusAnswerError, method="POST" if body else "GET", data=body,
            headers=headers, validate_certs=self.validate_certs, ca_path=self.ca_path, timeout=self.timeout))
