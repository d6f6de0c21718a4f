"""The API twin's fault hook (gpulab/kube/api/faults.py): a rule file makes the server answer 500, 429 or 409 to
the matching requests, or hold one, for as many requests as the rule says; no file, no fault. Over HTTPS with
real requests to an in-process server."""
from __future__ import annotations

import http.client
import json
import ssl
import time
import urllib.error
import urllib.request

import pytest

from gpulab.kube.api.server import ApiServer
from gpulab.kube.api.store import Store


@pytest.fixture
def api(tmp_path):
    store = Store()
    store.create("nodes", {"metadata": {"name": "gpu-node-01"}, "spec": {}})
    server = ApiServer(store, "127.0.0.1", 0, str(tmp_path / "ca"), faults_path=str(tmp_path / "api-faults.json"))
    server.start()
    yield server, tmp_path / "api-faults.json"
    server.stop()


def call(server, path, method="GET", body=None):
    """(HTTP status, parsed body) of one request."""
    context = ssl.create_default_context(cadata=server.ca_pem)
    request = urllib.request.Request(server.url + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": "Bearer " + server.token,
                                              "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=20) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_without_a_rule_file_every_request_is_served(api):
    server, _rules = api
    assert call(server, "/api/v1/nodes")[0] == 200


def test_a_rule_answers_its_count_of_matching_requests_with_its_code_then_serves_again(api):
    server, rules = api
    rules.write_text(json.dumps([{"path": "^/api/v1/nodes", "methods": ["GET"], "code": 500, "count": 2},
                                 {"path": "^/api/v1/namespaces", "code": 429, "count": 1}]))
    first, second, third = (call(server, "/api/v1/nodes") for _ in range(3))
    assert first[0] == second[0] == 500 and first[1]["reason"] == "InternalError"
    assert third[0] == 200
    code, status = call(server, "/api/v1/namespaces")
    assert code == 429 and status["details"]["retryAfterSeconds"] == 1
    assert call(server, "/api/v1/namespaces")[0] == 200


def test_a_conflict_on_the_lease_update_only(api):
    server, rules = api
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "gpuops-nvidia-rollout", "namespace": "kube-system"},
             "spec": {"holderIdentity": "me"}}
    assert call(server, "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases", "POST", lease)[0] == 201
    rules.write_text(json.dumps([{"path": "/leases/", "methods": ["PUT"], "code": 409}]))
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/gpuops-nvidia-rollout"
    assert call(server, path)[0] == 200
    current = call(server, path)[1]
    code, status = call(server, path, "PUT", current)
    assert code == 409 and status["reason"] == "Conflict"
    assert call(server, path, "PUT", current)[0] == 200


def test_a_hung_request_is_held_then_served_and_a_new_file_starts_the_counts_again(api):
    server, rules = api
    rules.write_text(json.dumps([{"path": "^/api/v1/nodes", "hang_s": 1.0}]))
    started = time.monotonic()
    assert call(server, "/api/v1/nodes")[0] == 200
    assert time.monotonic() - started >= 1.0
    started = time.monotonic()
    assert call(server, "/api/v1/nodes")[0] == 200
    assert time.monotonic() - started < 1.0
    rules.write_text(json.dumps([{"path": "^/api/v1/nodes", "code": 503, "count": 1}]))
    assert call(server, "/api/v1/nodes")[0] == 503
    rules.unlink()
    assert call(server, "/api/v1/nodes")[0] == 200


def test_a_rule_with_an_id_goes_on_from_its_spent_count_when_a_rule_is_added(api):
    server, rules = api
    burst = {"id": "api-500#1", "path": "^/api/v1/nodes", "code": 500, "count": 2}
    rules.write_text(json.dumps([burst]))
    assert call(server, "/api/v1/nodes")[0] == 500
    # a second fault of the round: its own count, and the first one's 1 left, not 2 again (chaos seed 2028)
    rules.write_text(json.dumps([burst, {"id": "api-429#2", "path": "^/api/v1/namespaces", "code": 429,
                                         "count": 1}]))
    assert call(server, "/api/v1/nodes")[0] == 500
    assert call(server, "/api/v1/nodes")[0] == 200
    assert call(server, "/api/v1/namespaces")[0] == 429
    assert call(server, "/api/v1/namespaces")[0] == 200


def watch_lasts(server, path):
    """Seconds until the server ends a watch stream (read to its end)."""
    context = ssl.create_default_context(cadata=server.ca_pem)
    request = urllib.request.Request(server.url + path, headers={"Authorization": "Bearer " + server.token})
    started = time.monotonic()
    with urllib.request.urlopen(request, context=context, timeout=30) as response:
        response.read()
    return time.monotonic() - started


def test_a_watch_closed_early_ends_its_stream_cleanly_and_only_watches_take_the_rule(api):
    server, rules = api
    rules.write_text(json.dumps([{"path": "^/api/v1/(watch/)?nodes", "close_watch_after_s": 1, "count": 1}]))
    assert call(server, "/api/v1/nodes")[0] == 200                # a list is served and leaves the rule alone
    assert watch_lasts(server, "/api/v1/nodes?watch=true&timeoutSeconds=6") < 4      # closed after ~1 s
    assert watch_lasts(server, "/api/v1/watch/nodes?timeoutSeconds=3") >= 2.5        # the count is spent


def test_a_reset_rule_drops_the_connection_unanswered_then_serves_again(api):
    """What a client sees while the API server restarts: no answer at all, then service as before."""
    server, rules = api
    rules.write_text(json.dumps([{"path": "^/api/v1/nodes", "reset": True, "count": 2}]))
    for _ in range(2):
        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException, ssl.SSLError)):
            call(server, "/api/v1/nodes")
    code, nodes = call(server, "/api/v1/nodes")
    assert code == 200 and [node["metadata"]["name"] for node in nodes["items"]] == ["gpu-node-01"]


def test_a_for_s_rule_drops_every_request_for_that_long_however_many_then_serves(api):
    """An API server down for 2 s: every request meanwhile dropped, not just a count of them."""
    server, rules = api
    rules.write_text(json.dumps([{"path": "^/api/v1/nodes", "reset": True, "for_s": 2}]))
    started = time.monotonic()
    dropped = 0
    while time.monotonic() - started < 1.5:
        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException, ssl.SSLError)):
            call(server, "/api/v1/nodes")
        dropped += 1
    assert dropped > 3
    time.sleep(max(0.0, 2.1 - (time.monotonic() - started)))
    assert call(server, "/api/v1/nodes")[0] == 200


def test_a_refuse_rule_closes_the_listener_for_its_for_s_then_serves_on_the_same_port(api):
    """A restart as clients see it: the request that meets it is dropped, new connections are refused while the
    server is down, then the same port answers with the objects kept."""
    server, rules = api
    port = server.port
    rules.write_text(json.dumps([{"path": "^/api/v1/nodes", "refuse": True, "for_s": 2}]))
    started = time.monotonic()
    with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException, ssl.SSLError)):
        call(server, "/api/v1/nodes")
    time.sleep(0.5)
    with pytest.raises(urllib.error.URLError) as caught:
        call(server, "/api/v1/nodes")
    assert isinstance(caught.value.reason, ConnectionRefusedError)
    while time.monotonic() - started < 2.3:
        time.sleep(0.1)
    code, nodes = call(server, "/api/v1/nodes")
    assert code == 200 and server.port == port
    assert [node["metadata"]["name"] for node in nodes["items"]] == ["gpu-node-01"]
