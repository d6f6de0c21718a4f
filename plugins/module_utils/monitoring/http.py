# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""One HTTP request to a monitoring API (Prometheus, Alertmanager) with the modules' TLS, auth and timeout
options: ``request(...)`` gives ``(status, text)`` for any HTTP answer, error statuses included, and raises the
caller's error class with a one-line reason when the server cannot be reached."""

from __future__ import annotations

import socket
from urllib.error import HTTPError, URLError

from ansible.module_utils.common.text.converters import to_native, to_text
from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import open_url


def request(base_url, path, service, unreachable_error, method="GET", data=None, headers=None, validate_certs=True,
            ca_path=None, timeout=10, url_username=None, url_password=None):
    """``(status, text)`` of ``method base_url + path``; ``unreachable_error("cannot reach <service> at
    <base_url>: <reason>")`` is raised when no HTTP answer came."""
    try:
        answer = open_url(base_url + path, data=data, headers=headers, method=method, validate_certs=validate_certs,
                          ca_path=ca_path, timeout=timeout, url_username=url_username, url_password=url_password,
                          force_basic_auth=bool(url_username))
        status, text = answer.getcode(), answer.read()
    except HTTPError as error:
        status, text = error.code, read_error_body(error)
    except (URLError, UrlConnectionError, socket.timeout, OSError) as error:
        # URLError: refused, DNS, TLS handshake; UrlConnectionError: certificate validation, proxy
        reason = getattr(error, "reason", None) or error
        raise unreachable_error("cannot reach %s at %s: %s" % (service, base_url, to_native(reason)))
    return status, to_text(text, errors="surrogate_or_replace")


def read_error_body(error):
    try:
        return error.read()
    except (IOError, OSError, AttributeError):
        return b""
