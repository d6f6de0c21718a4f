# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The HTTP side of Alertmanager's API v2 for alertmanager_silence: ``AlertmanagerClient(params)`` with ``url``,
``bearer_token``, ``url_username``/``url_password``, ``validate_certs``, ``ca_path``, ``timeout``; ``request(method,
path, query, body)`` gives ``(status, text)`` or raises AlertmanagerAnswerError when Alertmanager cannot be
reached."""

from __future__ import annotations

import json
from urllib.parse import quote, urlencode

from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring import http as http_api
from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.alertmanager import (
    AlertmanagerAnswerError,
    check_expired,
    parse_created_id,
    parse_silences,
)


class AlertmanagerClient:
    def __init__(self, params):
        self.base_url = params["url"].rstrip("/")
        self.headers = {"Accept": "application/json"}
        if params.get("bearer_token"):
            self.headers["Authorization"] = "Bearer %s" % params["bearer_token"]
        self.username = params.get("url_username")
        self.password = params.get("url_password")
        self.validate_certs = params["validate_certs"]
        self.ca_path = params["ca_path"]
        self.timeout = params["timeout"]

    def request(self, method, path, query=None, body=None):
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = "application/json"
        return http_api.request(self.base_url, path + ("?" + urlencode(query) if query else ""), "Alertmanager",
                                AlertmanagerAnswerError, method=method, data=data, headers=headers,
                                validate_certs=self.validate_certs, ca_path=self.ca_path, timeout=self.timeout,
                                url_username=self.username, url_password=self.password)

    def silences(self, filters=()):
        """The silences that pass ``filters`` (from filter_params; all silences without), expired ones included."""
        return parse_silences(*self.request("GET", "/api/v2/silences", list(filters) or None))

    def post_silence(self, body):
        return parse_created_id(*self.request("POST", "/api/v2/silences", body=body))

    def expire(self, silence_id):
        status, text = self.request("DELETE", "/api/v2/silence/%s" % quote(silence_id, safe=""))
        check_expired(status, text, silence_id)
