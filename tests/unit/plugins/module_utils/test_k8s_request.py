# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The raw request helpers of _k8s_client against a real HTTP server on 127.0.0.1 that records each request and
answers what a kube-apiserver would (objects, Status errors, a watch stream)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    JSON_PATCH, K8S_AUTH_ARG_SPEC, MERGE_PATCH, STRATEGIC_MERGE_PATCH, ApiError, api_error_message, build_api_client,
    list_call, request, request_json, resource_path, served_versions, set_connection_pool_size, status_of,
    typed_patch_content_type)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.watch import ListWatch, iter_lines, list_json

pytest.importorskip("kubernetes")


def status_body(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


ERRORS = {
    "/api/v1/nodes/missing": status_body(404, "NotFound", 'nodes "missing" not found'),
    "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/busy": status_body(
        409, "Conflict", 'Operation cannot be fulfilled on leases.coordination.k8s.io "busy": the object has been '
                         'modified; please apply your changes to the latest version and try again'),
    "/api/v1/namespaces/jobs/pods/trainer/eviction": status_body(
        429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."),
}


class Recorder(BaseHTTPRequestHandler):
    """Records method, path, query, headers and body; answers the path's Status error or echoes the request."""

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        seen = {"method": self.command, "path": url.path, "query": parse_qsl(url.query),
                "headers": {name.lower(): value for name, value in self.headers.items()},
                "body": json.loads(body) if body else None}
        self.server.seen.append(seen)
        if url.path in ERRORS:
            status = ERRORS[url.path]
            self._send(status["code"], json.dumps(status).encode())
        elif dict(seen["query"]).get("watch") == "true":
            events = [{"type": "ADDED", "object": {"metadata": {"name": "gpu-1", "resourceVersion": "11"}}},
                      {"type": "MODIFIED", "object": {"metadata": {"name": "gpu-1", "resourceVersion": "12"}}}]
            self._send(200, b"".join(json.dumps(event).encode() + b"\n" for event in events))
        elif url.path == "/apis/":
            self._send(200, json.dumps({"kind": "APIGroupList", "groups": [
                {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}]},
                {"name": "resource.k8s.io", "versions": [{"groupVersion": "resource.k8s.io/v1", "version": "v1"},
                                                         {"groupVersion": "resource.k8s.io/v1beta2",
                                                          "version": "v1beta2"}]}]}).encode())
        elif url.path.endswith("/log"):
            self._send(200, b"GPU 0: NVIDIA H100 (UUID: GPU-1)\n", "text/plain")
        else:
            self._send(200, json.dumps({"items": [{"metadata": {"name": "gpu-1"}}],
                                        "metadata": {"resourceVersion": "10"}, "echo": seen["body"]}).encode())

    def _send(self, code, data, content_type="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, *args):
        pass


@pytest.fixture(name="server")
def fixture_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    httpd.seen = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def api_for(server, **given):
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config", "current-context": "twin",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:%d" % server.server_address[1]}}],
        "users": [{"name": "u", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "twin", "context": {"cluster": "c", "user": "u"}}]}
    values = dict.fromkeys(K8S_AUTH_ARG_SPEC)
    values.update(kubeconfig=kubeconfig, **given)
    return build_api_client(values)


def test_get_sends_path_query_auth_and_identity_headers(server):
    api = api_for(server, impersonate_user="sre@example.com", impersonate_groups=["gpu-admins"])
    body = request_json(api, "GET", resource_path("v1", "pods"),
                        query=dict(field_selector="spec.nodeName=gpu-1", label_selector=None, watch=False, limit=5))
    assert body["items"] == [{"metadata": {"name": "gpu-1"}}]
    seen = server.seen[-1]
    assert (seen["method"], seen["path"]) == ("GET", "/api/v1/pods")
    assert seen["query"] == [("fieldSelector", "spec.nodeName=gpu-1"), ("watch", "false"), ("limit", "5")]
    headers = seen["headers"]
    assert headers["authorization"] == "Bearer t0ken"
    assert headers["accept"] == "application/json"
    assert headers["user-agent"].startswith("gpuops.nvidia ")
    assert (headers["impersonate-user"], headers["impersonate-group"]) == ("sre@example.com", "gpu-admins")
    assert "content-type" not in headers


def test_api_key_option_replaces_the_kubeconfig_token(server):
    api = api_for(server, api_key="0ther")
    request_json(api, "GET", resource_path("v1", "nodes", "gpu-1"))
    assert server.seen[-1]["headers"]["authorization"] == "Bearer 0ther"
    assert server.seen[-1]["path"] == "/api/v1/nodes/gpu-1"


def test_create_and_replace_send_json(server):
    api = api_for(server)
    lease = {"metadata": {"name": "lock", "namespace": "kube-system"}, "spec": {"holderIdentity": "me"}}
    answer = request_json(api, "POST", resource_path("coordination.k8s.io/v1", "leases", namespace="kube-system"),
                          body=lease)
    assert answer["echo"] == lease
    seen = server.seen[-1]
    assert (seen["method"], seen["path"]) == ("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases")
    assert seen["headers"]["content-type"] == "application/json"
    assert seen["body"] == lease
    request_json(api, "PUT", resource_path("coordination.k8s.io/v1", "leases", "lock", "kube-system"), body=lease)
    assert (server.seen[-1]["method"], server.seen[-1]["headers"]["content-type"]) == ("PUT", "application/json")


def test_patches_carry_the_patch_type_and_a_patch_without_one_is_refused_before_sending(server):
    api = api_for(server)
    path = resource_path("v1", "nodes", "gpu-1")
    for patch, content_type in (({"spec": {"unschedulable": True}}, MERGE_PATCH),
                                ({"spec": {"unschedulable": True}}, STRATEGIC_MERGE_PATCH),
                                ([{"op": "remove", "path": "/spec/unschedulable"}], JSON_PATCH)):
        request_json(api, "PATCH", path, body=patch, content_type=content_type)
        assert server.seen[-1]["headers"]["content-type"] == content_type
        assert (server.seen[-1]["method"], server.seen[-1]["body"]) == ("PATCH", patch)
    count = len(server.seen)
    with pytest.raises(ValueError, match="patch type"):
        request_json(api, "PATCH", path, body={"spec": {}})
    assert len(server.seen) == count


def test_typed_patch_content_type_is_what_the_typed_patch_node_sends(server):
    """The typed client's patch_node (loaded here only, to compare) and the helper agree on both body shapes."""
    from kubernetes import client as k8s_client
    api = api_for(server)
    core = k8s_client.CoreV1Api(api)
    for patch in ({"metadata": {"annotations": {"a": "b"}}}, [{"op": "add", "path": "/metadata/labels/a", "value": "b"}]):
        core.patch_node("gpu-1", patch, _preload_content=False)
        assert server.seen[-1]["headers"]["content-type"] == typed_patch_content_type(patch)
    assert typed_patch_content_type({}) == STRATEGIC_MERGE_PATCH
    # custom resources know no strategic merge: the typed client sends a JSON merge patch, as operator_* modules do
    k8s_client.CustomObjectsApi(api).patch_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cp",
                                                                 {"spec": {}}, _preload_content=False)
    assert server.seen[-1]["headers"]["content-type"] == MERGE_PATCH


@pytest.mark.parametrize("method, path, code, reason", [
    ("GET", "/api/v1/nodes/missing", 404, "NotFound"),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/busy", 409, "Conflict"),
    ("POST", "/api/v1/namespaces/jobs/pods/trainer/eviction", 429, "TooManyRequests"),
])
def test_error_answers_raise_what_status_of_reads(server, method, path, code, reason):
    api = api_for(server)
    with pytest.raises(ApiError) as caught:
        request_json(api, method, path, body={} if method != "GET" else None)
    assert status_of(caught.value) == (code, reason, ERRORS[path]["message"])
    assert json.loads(caught.value.body)["code"] == code
    assert api_error_message(caught.value, "act") == "act: %s (reason %s, HTTP %d)" % (
        ERRORS[path]["message"], reason, code)


def test_delete_with_query_and_text_answer(server):
    api = api_for(server)
    request(api, "DELETE", resource_path("v1", "pods", "smoke", "default"), query=dict(grace_period_seconds=0))
    assert server.seen[-1]["query"] == [("gracePeriodSeconds", "0")]
    assert server.seen[-1]["method"] == "DELETE" and server.seen[-1]["body"] is None
    log = request(api, "GET", resource_path("v1", "pods", "smoke", "default", "log")).data.decode()
    assert log == "GPU 0: NVIDIA H100 (UUID: GPU-1)\n"


def test_connection_errors_come_through_unwrapped():
    unused = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    port = unused.server_address[1]
    unused.server_close()
    api = build_api_client(dict(dict.fromkeys(K8S_AUTH_ARG_SPEC), host="http://127.0.0.1:%d" % port, api_key="x"))
    api.configuration.retries = False
    set_connection_pool_size(api, 2)
    with pytest.raises(Exception) as caught:
        request_json(api, "GET", "/api/v1/nodes", timeout_s=5)
    assert not isinstance(caught.value, ApiError)
    assert status_of(caught.value)[0] is None


def test_list_call_lists_and_streams_a_watch_for_listwatch(server):
    api = api_for(server)
    call = list_call(api, resource_path("v1", "nodes"), field_selector="metadata.name=gpu-1")
    items, version = list_json(call)
    assert (items, version) == ([{"metadata": {"name": "gpu-1"}}], "10")
    assert server.seen[-1]["query"] == [("fieldSelector", "metadata.name=gpu-1")]
    response = call(watch=True, resource_version="10", allow_watch_bookmarks=True, timeout_seconds=3,
                    _preload_content=False)
    lines = [json.loads(line)["type"] for line in iter_lines(response)]
    assert lines == ["ADDED", "MODIFIED"]
    assert dict(server.seen[-1]["query"]) == {"fieldSelector": "metadata.name=gpu-1", "watch": "true",
                                              "resourceVersion": "10", "allowWatchBookmarks": "true",
                                              "timeoutSeconds": "3"}


def test_listwatch_over_a_list_call_delivers_sync_and_events(server):
    import queue
    import time
    events = queue.Queue()
    watcher = ListWatch("nodes", list_call(api_for(server), resource_path("v1", "nodes")), events)
    watcher.start(time.time() + 2)
    got = [events.get(timeout=5) for dummy in range(3)]
    watcher.stop()
    assert [(kind, payload["metadata"]["resourceVersion"] if kind != "SYNC" else len(payload))
            for dummy, kind, payload in got] == [("SYNC", 1), ("ADDED", "11"), ("MODIFIED", "12")]


def test_served_versions_reads_discovery(server):
    api = api_for(server)
    assert served_versions(api, "resource.k8s.io") == ["v1", "v1beta2"]
    assert served_versions(api, "nvidia.com") == []
    assert server.seen[-1]["path"] == "/apis/"
