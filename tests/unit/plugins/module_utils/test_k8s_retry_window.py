# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""k8s/client.request's retry window: transient failures (a refused or reset connection, 5xx, 429 with its
Retry-After) are tried again with capped exponential back-off until a deadline (30 s, never past the request's own
timeout), so that an API server restart of 10-30 s does not fail the step; other answers fail at once. Against real
HTTP servers on 127.0.0.1: one that starts listening only after a while (a restart), and one that answers a
scripted sequence of codes."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC, RETRY_WINDOW_S, ApiError, K8sRequestError, api_error_message, build_api_client,
    request_json, resource_path, retry_after)

pytest.importorskip("kubernetes")

LEASE = resource_path("coordination.k8s.io/v1", "leases", "lock", "gpuops-system")
LEASES = resource_path("coordination.k8s.io/v1", "leases", namespace="gpuops-system")
EVICTION = resource_path("v1", "pods", "trainer", "jobs", "eviction")


def api_at(port, **given):
    values = dict.fromkeys(K8S_AUTH_ARG_SPEC)
    values.update(host="http://127.0.0.1:%d" % port, api_key="t0ken", **given)
    return build_api_client(values)


class Scripted(BaseHTTPRequestHandler):
    """Answers with the next (code, headers) of ``server.script`` (200 once it is used up), a ``metav1.Status``
    body for errors; ``server.calls`` records (method, path, monotonic time) of each request."""

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.server.calls.append((self.command, urlsplit(self.path).path, time.monotonic()))
        code, headers = self.server.script.pop(0) if self.server.script else (200, {})
        if code < 300:
            data = json.dumps({"metadata": {"resourceVersion": "8"}}).encode()
        else:
            status = {"kind": "Status", "code": code, "reason": "Reason%d" % code, "message": "answered %d" % code}
            if "X-Status-Details" in headers:       # retryAfterSeconds in the body only
                status["details"] = {"retryAfterSeconds": int(headers.pop("X-Status-Details"))}
            data = json.dumps(status).encode()
        self.send_response(code)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, *args):
        pass


def serve(port=0):
    httpd = ThreadingHTTPServer(("127.0.0.1", port), Scripted)
    httpd.calls, httpd.script = [], []
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@pytest.fixture(name="scripted")
def fixture_scripted():
    httpd = serve()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(name="restarting")
def fixture_restarting():
    """``start(after_s)``: a port where nothing listens (connections refused, as while the API server process is
    down) until ``after_s`` seconds from now, then a server that answers 200. The server, once up."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    started = []

    def start(after_s):
        def later():
            time.sleep(after_s)
            started.append(serve(port))
        threading.Thread(target=later, daemon=True).start()
        return port
    yield start, started
    for httpd in started:
        httpd.shutdown()
        httpd.server_close()


def test_the_back_off_doubles_up_to_its_cap_and_ends_at_the_deadline():
    waits = [retry_after(attempt, 100.0, True, now=0.0) for attempt in range(1, 7)]
    assert waits == [0.5, 1, 2, 4, 4, 4]
    assert retry_after(5, 101.5, True, now=100.0) == 1.5       # cut to end at the deadline: the last attempt there
    assert retry_after(2, 100.0, True, now=100.0) is None       # the window is over
    assert retry_after(1, 100.0, False, now=0.0) is None        # not retriable
    assert retry_after(1, 100.0, True, "3", now=0.0) == 3       # Retry-After asks more than the back-off
    assert retry_after(4, 100.0, True, "1", now=0.0) == 4       # ... or less: the back-off stands
    assert retry_after(1, 100.0, True, "120", now=0.0) is None  # past the window: no point waiting
    assert retry_after(1, 100.0, True, "Fri, 04 Dec 2026 16:00:00 GMT", now=0.0) == 0.5


def test_the_window_is_30_s_by_default():
    assert RETRY_WINDOW_S == 30 and K8S_AUTH_ARG_SPEC["request_timeout"]["default"] == 60


def test_a_get_rides_out_an_api_server_down_for_6_s(restarting):
    start, started = restarting
    port = start(6)
    began = time.monotonic()
    assert request_json(api_at(port), "GET", LEASE) == {"metadata": {"resourceVersion": "8"}}
    elapsed = time.monotonic() - began
    assert 6 <= elapsed < 11, elapsed          # attempts at 0, 0.5, 1.5, 3.5, 7.5 s
    assert [call[:2] for call in started[0].calls] == [("GET", LEASE)]


def test_a_create_whose_connection_is_refused_is_retried_it_never_reached_the_server(restarting):
    start, started = restarting
    port = start(2)
    request_json(api_at(port), "POST", LEASES, body={"metadata": {"name": "lock"}})
    assert [call[:2] for call in started[0].calls] == [("POST", LEASES)]


def test_the_window_never_outlasts_the_request_timeout(restarting):
    start, dummy = restarting
    port = start(60)
    began = time.monotonic()
    with pytest.raises(K8sRequestError) as caught:
        request_json(api_at(port, request_timeout=2), "GET", LEASE)
    elapsed = time.monotonic() - began
    assert 1.9 <= elapsed < 3.5, elapsed
    assert caught.value.attempts == 4 and "(4 attempts)" in str(caught.value)     # at 0, 0.5, 1.5 and 2 s
    assert "Connection refused" in str(caught.value) or "NewConnectionError" in str(caught.value)


def test_5xx_answers_are_retried_until_the_window_ends_then_fail_naming_the_attempts(scripted):
    scripted.script = [(503, {})] * 100
    began = time.monotonic()
    with pytest.raises(ApiError) as caught:
        request_json(api_at(scripted.server_address[1], request_timeout=5), "GET", LEASE)
    elapsed = time.monotonic() - began
    assert 4.9 <= elapsed < 6.5, elapsed
    times = [call[2] - scripted.calls[0][2] for call in scripted.calls]
    assert len(times) == 5          # at 0, 0.5, 1.5, 3.5 and 5 s (the last wait cut to the deadline)
    gaps = [later - earlier for earlier, later in zip(times, times[1:])]
    assert all(wanted - 0.05 <= gap < wanted + 0.5 for gap, wanted in zip(gaps, [0.5, 1, 2])), gaps
    assert gaps[3] < 1.6, gaps
    assert api_error_message(caught.value, "read lease") == (
        "read lease: answered 503 (reason Reason503, HTTP 503; GET %s, 5 attempts)" % LEASE)


def test_a_429_waits_what_retry_after_asks_and_is_retried_for_a_create(scripted):
    scripted.script = [(429, {"Retry-After": "2"})]
    request_json(api_at(scripted.server_address[1]), "POST", LEASES, body={"metadata": {"name": "lock"}})
    (first, second) = scripted.calls
    assert (first[0], second[0]) == ("POST", "POST") and 1.9 <= second[2] - first[2] < 3


def test_a_429_without_the_header_waits_what_its_status_details_ask(scripted):
    scripted.script = [(429, {"X-Status-Details": "2"})]
    request_json(api_at(scripted.server_address[1]), "GET", LEASE)
    (first, second) = scripted.calls
    assert 1.9 <= second[2] - first[2] < 3


def test_a_429_whose_retry_after_is_past_the_window_fails_at_once(scripted):
    scripted.script = [(429, {"Retry-After": "10"})]
    with pytest.raises(ApiError) as caught:
        request_json(api_at(scripted.server_address[1], request_timeout=5), "GET", LEASE)
    assert caught.value.status == 429 and len(scripted.calls) == 1


def test_an_eviction_refused_429_by_a_disruption_budget_goes_back_to_the_drain_at_once(scripted):
    scripted.script = [(429, {"Retry-After": "1"})]
    with pytest.raises(ApiError) as caught:
        request_json(api_at(scripted.server_address[1]), "POST", EVICTION, body={"metadata": {"name": "trainer"}})
    assert caught.value.status == 429 and len(scripted.calls) == 1


@pytest.mark.parametrize("code", [400, 403, 404, 409, 422])
def test_other_answers_fail_at_once_a_conflict_is_not_retried_blindly(scripted, code):
    scripted.script = [(code, {})]
    body = {"metadata": {"name": "lock", "resourceVersion": "7"}, "spec": {}}
    with pytest.raises(ApiError) as caught:
        request_json(api_at(scripted.server_address[1]), "PUT", LEASE, body=body)
    assert caught.value.status == code and len(scripted.calls) == 1


def test_a_create_answered_503_is_not_retried_the_server_may_have_acted_on_it(scripted):
    scripted.script = [(503, {})]
    with pytest.raises(ApiError):
        request_json(api_at(scripted.server_address[1]), "POST", LEASES, body={"metadata": {"name": "lock"}})
    assert len(scripted.calls) == 1


def test_a_create_whose_connection_is_reset_is_not_retried():
    """The server read the request and reset the connection: it may have acted on it."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(5)
    seen = []

    def reset_all():
        try:
            while True:
                connection, dummy = listener.accept()
                seen.append(connection.recv(65536))
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                connection.close()
        except OSError:
            return
    thread = threading.Thread(target=reset_all, daemon=True)
    thread.start()
    try:
        with pytest.raises(K8sRequestError) as caught:
            request_json(api_at(listener.getsockname()[1]), "POST", LEASES, body={"metadata": {"name": "lock"}})
        assert caught.value.attempts == 1 and len(seen) == 1
    finally:
        listener.close()
        thread.join(6)
