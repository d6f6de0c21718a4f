# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The one way to a monitoring HTTP API (Prometheus, Alertmanager): the option set every module talking to one
declares (``monitoring_http_argument_spec()``, documented once in ``doc_fragments/monitoring_http.py``), the check
of those options, and ``MonitoringApi.request(...)``, which gives ``(status, text)`` for any HTTP answer, error
statuses included, and raises the caller's error class with a one-line reason when the server cannot be
reached."""

from __future__ import annotations

import json
import socket
from urllib.error import HTTPError, URLError
from urllib.parse import urlencode

from ansible.module_utils.common.text.converters import to_native, to_text
from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import open_url

DEFAULT_TIMEOUT_S = 10

# pass these with the argument spec: AnsibleModule(required_by=..., mutually_exclusive=...)
MONITORING_HTTP_REQUIRED_BY = {"url_password": "url_username"}
MONITORING_HTTP_MUTUALLY_EXCLUSIVE = [("bearer_token", "url_username")]


def monitoring_http_argument_spec():
    """The connection options of a module that talks to Prometheus or Alertmanager (a new dict per call)."""
    return dict(
        url=dict(type="str", required=True),
        bearer_token=dict(type="str", no_log=True),
        url_username=dict(type="str"),
        url_password=dict(type="str", no_log=True),
        validate_certs=dict(type="bool", default=True),
        ca_path=dict(type="path"),
        timeout=dict(type="int", default=DEFAULT_TIMEOUT_S),
    )


def monitoring_http_option_errors(params):
    """What is wrong with the connection options that the argument spec cannot say, one message each."""
    errors = []
    if not params["url"].startswith(("http://", "https://")):
        errors.append("url must start with http:// or https://, got %r" % params["url"])
    if params["timeout"] < 1:
        errors.append("timeout must be at least 1 second")
    return errors


class MonitoringApi:
    """One monitoring server with its URL, auth, TLS and timeout; ``service`` names it in messages and
    ``unreachable_error`` is the exception class raised when no HTTP answer came."""

    def __init__(self, service, unreachable_error, url, bearer_token=None, url_username=None, url_password=None,
                 validate_certs=True, ca_path=None, timeout=DEFAULT_TIMEOUT_S):
        self.service = service
        self.unreachable_error = unreachable_error
        self.base_url = url.rstrip("/")
        self.headers = {"Accept": "application/json"}
        if bearer_token:
            self.headers["Authorization"] = "Bearer %s" % bearer_token
        self.url_username = url_username
        self.url_password = url_password
        self.validate_certs = validate_certs
        self.ca_path = ca_path
        self.timeout = timeout

    @classmethod
    def from_params(cls, service, unreachable_error, params):
        """From a module's params holding the options of monitoring_http_argument_spec()."""
        return cls(service, unreachable_error, **dict((name, params[name]) for name in monitoring_http_argument_spec()))

    def request(self, method, path, query=None, form=None, json_body=None):
        """``(status, text)`` of ``method path?query``, with ``form`` (URL-encoded) or ``json_body`` as the body."""
        headers = dict(self.headers)
        data = None
        if form is not None:
            data = urlencode(form)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif json_body is not None:
            data = json.dumps(json_body)
            headers["Content-Type"] = "application/json"
        url = self.base_url + path + ("?" + urlencode(query) if query else "")
        try:
            answer = open_url(url, data=data, headers=headers, method=method, validate_certs=self.validate_certs,
                              ca_path=self.ca_path, timeout=self.timeout, url_username=self.url_username,
                              url_password=self.url_password, force_basic_auth=bool(self.url_username))
            status, text = answer.getcode(), answer.read()
        except HTTPError as error:
            status, text = error.code, read_error_body(error)
        except (URLError, UrlConnectionError, socket.timeout, OSError) as error:
            # URLError: refused, DNS, TLS handshake; UrlConnectionError: certificate validation, proxy
            reason = getattr(error, "reason", None) or error
            raise self.unreachable_error("cannot reach %s at %s: %s" % (self.service, self.base_url,
                                                                        to_native(reason)))
        return status, to_text(text, errors="surrogate_or_replace")


def read_error_body(error):
    try:
        return error.read()
    except (IOError, OSError, AttributeError):
        return b""
