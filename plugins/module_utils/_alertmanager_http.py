# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The HTTP side of Alertmanager's API v2 for alertmanager_silence: ``AlertmanagerClient(params)`` with ``url``,
``bearer_token``, ``url_username``/``url_password``, ``validate_certs``, ``ca_path``, ``timeout``; ``request(method,
path, query, body)`` gives ``(status, text)`` or raises AlertmanagerAnswerError when Alertmanager cannot be
reached."""

from __future__ import annotations

import json
import socket
from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlencode

from ansible.module_utils.common.text.converters import to_native, to_text
from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import open_url

from ansible_collections.gpuops.nvidia.plugins.module_utils._alertmanager import (
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
        url = self.base_url + path + ("?" + urlencode(query) if query else "")
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = "application/json"
        try:
            answer = open_url(url, data=data, headers=headers, method=method, validate_certs=self.validate_certs,
                              ca_path=self.ca_path, timeout=self.timeout, url_username=self.username,
                              url_password=self.password, force_basic_auth=bool(self.username))
            status, text = answer.getcode(), answer.read()
        except HTTPError as error:
            status, text = error.code, read_error_body(error)
        except (URLError, UrlConnectionError, socket.timeout, OSError) as error:
            # URLError: refused, DNS, TLS handshake; UrlConnectionError: certificate validation, proxy
            reason = getattr(error, "reason", None) or error
            raise AlertmanagerAnswerError("cannot reach Alertmanager at %s: %s" % (self.base_url, to_native(reason)))
        return status, to_text(text, errors="surrogate_or_replace")

    def silences(self, filters=()):
        """The silences that pass ``filters`` (from filter_params; all silences without), expired ones included."""
        return parse_silences(*self.request("GET", "/api/v2/silences", list(filters) or None))

    def post_silence(self, body):
        return parse_created_id(*self.request("POST", "/api/v2/silences", body=body))

    def expire(self, silence_id):
        status, text = self.request("DELETE", "/api/v2/silence/%s" % quote(silence_id, safe=""))
        check_expired(status, text, silence_id)


def read_error_body(error):
    try:
        return error.read()
    except (IOError, OSError, AttributeError):
        return b""
