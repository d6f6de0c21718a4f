# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""What k8s/client.request does when the API server does not answer well, against real servers on 127.0.0.1: one
that accepts and never answers, one that answers 5xx a given number of times before 200, one that resets the
connection, and a watch that goes silent."""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC, ApiError, K8sConfigError, K8sRequestError, api_error_message, build_api_client,
    idempotent_call, list_call, request_json, resource_path, status_of)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.watch import ListWatch

pytest.importorskip("kubernetes")

LEASE = resource_path("coordination.k8s.io/v1", "leases", "lock", "gpuops-system")
EVICTION = resource_path("v1", "pods", "trainer", "jobs", "eviction")


def api_at(port, **given):
    values = dict.fromkeys(K8S_AUTH_ARG_SPEC)
    values.update(host="http://127.0.0.1:%d" % port, api_key="t0ken", **given)
    return build_api_client(values)


@pytest.fixture(name="silent_port")
def fixture_silent_port():
    """A server that accepts connections and never answers (an API server stuck behind its load balancer)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(1)
    for connection in held:
        connection.close()
    listener.close()


class Flaky(BaseHTTPRequestHandler):
    """Answers ``server.failures`` times with ``server.failure_code`` (a Status body), then 201/200 with the request
    echoed; ``server.calls`` records (method, path) of each request."""

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.server.calls.append((self.command, urlsplit(self.path).path))
        if self.server.failures > 0:
            self.server.failures -= 1
            code = self.server.failure_code
            data = json.dumps({"kind": "Status", "code": code, "reason": "InternalError",
                               "message": "etcdserver: request timed out"}).encode()
        else:
            code = 201 if self.command == "POST" else 200
            data = json.dumps({"metadata": {"resourceVersion": "7"}, "echo": body}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, *args):
        pass


@pytest.fixture(name="flaky")
def fixture_flaky():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    httpd.calls, httpd.failures, httpd.failure_code = [], 0, 500
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_a_server_that_accepts_and_never_answers_fails_the_call_at_the_request_timeout(silent_port):
    api = api_at(silent_port, request_timeout=1)
    started = time.monotonic()
    with pytest.raises(K8sRequestError) as caught:
        request_json(api, "GET", LEASE)
    elapsed = time.monotonic() - started
    assert 0.9 < elapsed < 3, elapsed
    assert caught.value.timed_out
    assert str(caught.value) == "GET %s: no answer within the read timeout" % LEASE
    assert status_of(caught.value) == (None, None, str(caught.value))
    assert api_error_message(caught.value, "read lease") == "read lease: GET %s: no answer within the read timeout" % LEASE


def test_the_default_request_timeout_is_set_on_every_client(silent_port):
    assert K8S_AUTH_ARG_SPEC["request_timeout"]["default"] == 60
    assert api_at(silent_port).request_timeout_s == 60
    assert api_at(silent_port, request_timeout=2.5).request_timeout_s == 2.5


@pytest.mark.parametrize("value", [0, -1])
def test_a_request_timeout_that_is_not_positive_is_refused(silent_port, value):
    with pytest.raises(K8sConfigError, match="request_timeout must be a positive number of seconds"):
        api_at(silent_port, request_timeout=value)


@pytest.mark.parametrize("code", [500, 502, 503, 504])
def test_a_get_answered_5xx_is_retried_with_back_off_until_it_succeeds(flaky, code):
    flaky.failures, flaky.failure_code = 2, code
    started = time.monotonic()
    answer = request_json(api_at(flaky.server_address[1]), "GET", LEASE)
    assert answer["metadata"]["resourceVersion"] == "7"
    assert flaky.calls == [("GET", LEASE)] * 3
    assert 1.4 < time.monotonic() - started < 3   # 0.5 s then 1 s


def test_an_eviction_answered_500_is_retried(flaky):
    flaky.failures = 1
    body = {"metadata": {"name": "trainer", "namespace": "jobs"}}
    assert request_json(api_at(flaky.server_address[1]), "POST", EVICTION, body=body)["echo"] == body
    assert flaky.calls == [("POST", EVICTION)] * 2


def test_a_retried_call_that_keeps_failing_fails_naming_the_call_and_the_attempts(flaky):
    flaky.failures = 100
    with pytest.raises(ApiError) as caught:     # a 3 s budget: attempts at 0, 0.5, 1.5 and 3 s
        request_json(api_at(flaky.server_address[1], request_timeout=3), "GET", LEASE)
    assert len(flaky.calls) == 4
    assert caught.value.status == 500 and caught.value.attempts == 4
    assert api_error_message(caught.value, "read lease") == (
        "read lease: etcdserver: request timed out (reason InternalError, HTTP 500; GET %s, 4 attempts)" % LEASE)


@pytest.mark.parametrize("method, body", [
    ("POST", {"metadata": {"name": "lock"}}),                          # a create: a second one could create twice
    ("PUT", {"metadata": {"name": "lock"}, "spec": {}}),              # a replace not guarded by resourceVersion
    ("DELETE", None),
])
def test_calls_that_are_not_idempotent_are_not_retried(flaky, method, body):
    flaky.failures = 1
    with pytest.raises(ApiError) as caught:
        request_json(api_at(flaky.server_address[1]), method, LEASE, body=body)
    assert caught.value.status == 500 and len(flaky.calls) == 1
    assert "attempts" not in api_error_message(caught.value)


def test_a_replace_guarded_by_its_resource_version_is_retried(flaky):
    flaky.failures = 1
    body = {"metadata": {"name": "lock", "resourceVersion": "6"}, "spec": {}}
    request_json(api_at(flaky.server_address[1]), "PUT", LEASE, body=body)
    assert flaky.calls == [("PUT", LEASE)] * 2


@pytest.mark.parametrize("method, path, body, expected", [
    ("GET", LEASE, None, True),
    ("POST", EVICTION, {}, True),
    ("POST", LEASE, {}, False),
    ("PUT", LEASE, {"metadata": {"resourceVersion": "6"}}, True),
    ("PUT", LEASE, {"metadata": {}}, False),
    ("PATCH", LEASE, {"metadata": {"resourceVersion": "6", "annotations": {}}}, True),
    ("PATCH", LEASE, {"metadata": {"annotations": {}}}, False),
    ("PATCH", LEASE, [{"op": "test", "path": "/metadata/resourceVersion", "value": "6"},
                      {"op": "replace", "path": "/spec/holderIdentity", "value": "me"}], True),
    ("PATCH", LEASE, [{"op": "replace", "path": "/spec/holderIdentity", "value": "me"}], False),
    ("DELETE", LEASE, None, False),
])
def test_idempotent_calls_are_reads_evictions_and_writes_guarded_by_resource_version(method, path, body, expected):
    assert idempotent_call(method, path, body) is expected


def test_a_reset_connection_is_retried_on_a_get():
    """The first connection is closed with a TCP reset before any answer, the second is answered."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    answer = json.dumps({"metadata": {"resourceVersion": "9"}}).encode()

    def serve():
        first, dummy = listener.accept()
        first.recv(65536)
        first.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        first.close()
        second, dummy = listener.accept()
        second.recv(65536)
        second.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                       b"Connection: close\r\n\r\n%s" % (len(answer), answer))
        second.close()
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        assert request_json(api_at(listener.getsockname()[1]), "GET", LEASE) == {"metadata": {"resourceVersion": "9"}}
    finally:
        thread.join(2)
        listener.close()


class SilentWatch(BaseHTTPRequestHandler):
    """Lists one node; a watch gets its headers and then nothing, never closed (a dead connection)."""

    def do_GET(self):
        query = dict(parse_qsl(urlsplit(self.path).query))
        self.server.queries.append(query)
        if query.get("watch") == "true":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            self.server.release.wait(30)
            return
        data = json.dumps({"items": [{"metadata": {"name": "gpu-1"}}], "metadata": {"resourceVersion": "10"}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_a_silent_watch_is_given_up_at_its_read_timeout_and_the_collection_relisted():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), SilentWatch)
    httpd.queries, httpd.release = [], threading.Event()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    events = queue.Queue()
    try:
        api = api_at(httpd.server_address[1], request_timeout=1)
        watcher = ListWatch("nodes", list_call(api, resource_path("v1", "nodes")), events)
        started = time.monotonic()
        watcher.start(time.time() + 1)   # the watch asks the server to end it after 2 s; reads wait 2 + 1 s
        kinds = [events.get(timeout=10)[1] for dummy in range(2)]
        elapsed = time.monotonic() - started
        watcher.stop()
    finally:
        httpd.release.set()
        httpd.shutdown()
        httpd.server_close()
    assert kinds == ["SYNC", "SYNC"]
    assert 2.5 < elapsed < 6, elapsed
    assert watcher.relists_after_timeout == 1 and watcher.lists == 2
    assert [query.get("watch") for query in httpd.queries][:3] == [None, "true", None]
