"""The official Python client (the library kubernetes.core uses) against the API twin over HTTPS: list + watch
with reconnects from the last resourceVersion, 410 Gone, bookmarks, the three patch types, 409 on stale updates,
pagination, dry-run, eviction answers, and list latency with 1,000 nodes."""
from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.request

import pytest

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, config, watch  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from gpulab.kube.api.kubeconfig import write_kubeconfig  # noqa: E402
from gpulab.kube.api.recorder import Recorder, read_records  # noqa: E402
from gpulab.kube.api.server import ApiServer  # noqa: E402
from gpulab.kube.api.store import Store  # noqa: E402

READY = [{"type": "Ready", "status": "True"}]


class Twin:
    def __init__(self, tmp_path, event_window=5000):
        self.records_path = str(tmp_path / "kube-records.jsonl")
        self.store = Store(recorder=Recorder(self.records_path), event_window=event_window)
        self.server = ApiServer(self.store, "127.0.0.1", 0, str(tmp_path / "ca"), bookmark_interval_s=0.3).start()
        self.kubeconfig = write_kubeconfig(str(tmp_path / "kubeconfig"), self.server.url, self.server.ca_pem,
                                           self.server.token)
        self.api_client = config.new_client_from_config(config_file=self.kubeconfig)
        self.core = client.CoreV1Api(self.api_client)
        self.policy = client.PolicyV1Api(self.api_client)

    def add_node(self, name, labels=None):
        self.store.create("nodes", {"metadata": {"name": name, "labels": labels or {}}, "spec": {}})

    def raw_get(self, path, accept="application/json"):
        context = ssl.create_default_context(cadata=self.server.ca_pem)
        request = urllib.request.Request(self.server.url + path, headers={
            "Authorization": "Bearer " + self.server.token, "Accept": accept})
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return json.loads(response.read())


@pytest.fixture
def twin(tmp_path):
    twin = Twin(tmp_path)
    yield twin
    twin.api_client.close()
    twin.server.stop()


def _names(items):
    return [item.metadata.name for item in items]


def test_list_carries_a_resource_version_and_selectors_filter(twin):
    twin.add_node("gpu-0", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    twin.add_node("gpu-1", {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})
    twin.add_node("cpu-0")
    nodes = twin.core.list_node()
    assert _names(nodes.items) == ["cpu-0", "gpu-0", "gpu-1"] and int(nodes.metadata.resource_version) > 0
    gpu = twin.core.list_node(label_selector="nvidia.com/gpu.product in (NVIDIA-H100-80GB-HBM3)")
    assert _names(gpu.items) == ["gpu-0"]
    assert _names(twin.core.list_node(field_selector="metadata.name=gpu-1").items) == ["gpu-1"]


def test_pagination_with_limit_and_continue(twin):
    for index in range(7):
        twin.add_node("gpu-%d" % index)
    first = twin.core.list_node(limit=3)
    assert _names(first.items) == ["gpu-0", "gpu-1", "gpu-2"] and first.metadata.remaining_item_count == 4
    second = twin.core.list_node(limit=3, _continue=first.metadata._continue)
    third = twin.core.list_node(limit=3, _continue=second.metadata._continue)
    assert _names(second.items) == ["gpu-3", "gpu-4", "gpu-5"] and _names(third.items) == ["gpu-6"]
    assert third.metadata._continue is None


def test_watch_reconnects_from_the_last_resource_version_without_missing_changes(twin):
    twin.add_node("gpu-0")
    listed = twin.core.list_node()
    seen, last_rv = [], listed.metadata.resource_version
    changer = threading.Timer(0.3, lambda: twin.store.patch("nodes", "gpu-0", {"spec": {"unschedulable": True}},
                                                            "application/merge-patch+json"))
    changer.start()
    for event in watch.Watch().stream(twin.core.list_node, resource_version=last_rv, timeout_seconds=1):
        seen.append((event["type"], event["object"].metadata.name))
        last_rv = event["object"].metadata.resource_version
    # changes made while no watch is open are delivered by the next watch from last_rv
    twin.add_node("gpu-1")
    twin.store.delete("nodes", "gpu-0")
    for event in watch.Watch().stream(twin.core.list_node, resource_version=last_rv, timeout_seconds=1):
        seen.append((event["type"], event["object"].metadata.name))
    assert seen == [("MODIFIED", "gpu-0"), ("ADDED", "gpu-1"), ("DELETED", "gpu-0")]


def test_watch_from_an_expired_resource_version_gets_410_gone(tmp_path):
    twin = Twin(tmp_path, event_window=5)
    try:
        twin.add_node("gpu-0")
        old_rv = twin.core.list_node().metadata.resource_version
        for index in range(10):
            twin.store.patch("nodes", "gpu-0", {"metadata": {"labels": {"n": str(index)}}},
                             "application/merge-patch+json")
        with pytest.raises(ApiException) as gone:
            list(watch.Watch().stream(twin.core.list_node, resource_version=old_rv, timeout_seconds=1))
        assert gone.value.status == 410 and "too old resource version" in gone.value.reason
        # the informer's answer to 410: list again, then watch from the fresh version
        fresh_rv = twin.core.list_node().metadata.resource_version
        twin.store.patch("nodes", "gpu-0", {"spec": {"unschedulable": True}}, "application/merge-patch+json")
        events = list(watch.Watch().stream(twin.core.list_node, resource_version=fresh_rv, timeout_seconds=1))
        assert [(event["type"], event["object"].spec.unschedulable) for event in events] == [("MODIFIED", True)]
    finally:
        twin.api_client.close()
        twin.server.stop()


def test_watch_sends_bookmarks_when_asked(twin):
    twin.add_node("gpu-0")
    rv = twin.core.list_node().metadata.resource_version
    stream = watch.Watch().stream(twin.core.list_node, resource_version=rv, timeout_seconds=1,
                                  allow_watch_bookmarks=True)
    types = [event["type"] for event in stream]
    assert "BOOKMARK" in types and set(types) == {"BOOKMARK"}


def test_patches_of_all_three_types_through_the_client(twin):
    twin.add_node("gpu-0", {"a": "1"})
    twin.core.patch_node("gpu-0", {"spec": {"unschedulable": True}})   # strategic merge (client default)
    twin.api_client.set_default_header("Content-Type", "application/merge-patch+json")
    twin.core.patch_node("gpu-0", {"metadata": {"labels": {"b": "2"}}})
    twin.api_client.set_default_header("Content-Type", "application/json-patch+json")
    node = twin.core.patch_node("gpu-0", [{"op": "remove", "path": "/metadata/labels/a"}])
    assert node.spec.unschedulable is True and node.metadata.labels == {"b": "2"}
    requests = [record for record in read_records(twin.records_path)
                if record["record"] == "request" and record["method"] == "PATCH"]
    assert [record["code"] for record in requests] == [200, 200, 200]


def test_scale_subresource_answers_a_bad_patch_as_the_main_resource_does(twin):
    twin.store.create("deployments", {"metadata": {"name": "web"}, "spec": {"replicas": 1}}, "default")
    apps = client.AppsV1Api(twin.api_client)
    twin.api_client.set_default_header("Content-Type", "application/json-patch+json")
    bad_patch = [{"op": "remove", "path": "/spec/paused"}]
    for patch_call in (apps.patch_namespaced_deployment, apps.patch_namespaced_deployment_scale):
        with pytest.raises(ApiException) as invalid:
            patch_call("web", "default", bad_patch)
        assert invalid.value.status == 422 and json.loads(invalid.value.body)["reason"] == "Invalid"
    assert twin.store.get("deployments", "web", "default")["spec"]["replicas"] == 1


def test_stale_replace_is_409_and_status_subresource_keeps_spec(twin):
    twin.add_node("gpu-0")
    stale = twin.core.read_node("gpu-0")
    twin.core.patch_node("gpu-0", {"metadata": {"labels": {"x": "y"}}})
    stale.spec.unschedulable = True
    with pytest.raises(ApiException) as conflict:
        twin.core.replace_node("gpu-0", stale)
    assert conflict.value.status == 409
    assert json.loads(conflict.value.body)["reason"] == "Conflict"
    fresh = twin.core.read_node("gpu-0")
    fresh.status = client.V1NodeStatus(conditions=[client.V1NodeCondition(type="Ready", status="True")])
    fresh.spec.unschedulable = True
    updated = twin.core.replace_node_status("gpu-0", fresh)
    assert updated.status.conditions[0].status == "True" and not updated.spec.unschedulable


def test_dry_run_create_stores_nothing(twin):
    twin.core.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c")),
                                           dry_run="All")
    assert twin.store.list("configmaps", "default")[0] == []


def test_eviction_over_http_is_429_then_201_once_a_replica_is_healthy_elsewhere(twin):
    for name, node in (("train-0", "gpu-0"),):
        twin.store.create("pods", {"metadata": {"name": name, "labels": {"app": "train"}},
                                   "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
                                   "status": {"phase": "Running", "conditions": READY}}, "default")
    twin.policy.create_namespaced_pod_disruption_budget("default", client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name="train"),
        spec=client.V1PodDisruptionBudgetSpec(min_available=1, selector=client.V1LabelSelector(
            match_labels={"app": "train"}))))
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="train-0", namespace="default"))
    with pytest.raises(ApiException) as refused:
        twin.core.create_namespaced_pod_eviction("train-0", "default", eviction)
    status = json.loads(refused.value.body)
    assert refused.value.status == 429
    assert status["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert status["details"]["causes"][0]["message"] == \
        "The disruption budget train needs 1 healthy pods and has 1 currently"
    twin.store.create("pods", {"metadata": {"name": "train-1", "labels": {"app": "train"}},
                               "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "image": "x"}]},
                               "status": {"phase": "Running", "conditions": READY}}, "default")
    assert twin.policy.read_namespaced_pod_disruption_budget("train", "default").status.disruptions_allowed == 1
    _, code, _ = twin.core.create_namespaced_pod_eviction_with_http_info("train-0", "default", eviction)
    assert code == 201
    assert twin.core.read_namespaced_pod("train-0", "default").metadata.deletion_timestamp is not None


def test_events_are_found_by_involved_object_fields(twin):
    twin.core.create_namespaced_event("default", client.CoreV1Event(
        metadata=client.V1ObjectMeta(name="gpu-0.xid"), involved_object=client.V1ObjectReference(
            kind="Node", name="gpu-0"), reason="XidError", message="Xid 79: GPU has fallen off the bus", type="Warning"))
    found = twin.core.list_namespaced_event("default", field_selector="involvedObject.kind=Node,involvedObject.name=gpu-0")
    assert [event.reason for event in found.items] == ["XidError"]


def test_discovery_lists_policy_eviction_and_resource_slices(twin):
    core = twin.raw_get("/api/v1")
    eviction = [entry for entry in core["resources"] if entry["name"] == "pods/eviction"][0]
    assert (eviction["group"], eviction["version"], eviction["kind"]) == ("policy", "v1", "Eviction")
    groups = {group["name"]: group["preferredVersion"]["version"] for group in twin.raw_get("/apis")["groups"]}
    assert groups["resource.k8s.io"] == "v1" and groups["coordination.k8s.io"] == "v1"
    resource_versions = [entry["version"] for entry in twin.raw_get("/apis/resource.k8s.io")["versions"]]
    assert resource_versions == ["v1", "v1beta1"]
    assert [entry["name"] for entry in twin.raw_get("/apis/resource.k8s.io/v1")["resources"]] == ["resourceslices"]
    assert twin.raw_get("/version")["gitVersion"].startswith("v1.34")


def test_listing_1000_nodes_is_fast(twin, capsys):
    for index in range(1000):
        twin.store.create("nodes", {"metadata": {"name": "node-%04d" % index, "labels": {
            "nvidia.com/gpu.present": "true" if index % 2 else "false"}}, "spec": {},
            "status": {"conditions": READY, "capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"},
                       "nodeInfo": {"kubeletVersion": "v1.32.0"}}})
    timings = {}
    for label, call in (("json list", lambda: twin.raw_get("/api/v1/nodes")),
                        ("json list limit=500", lambda: twin.raw_get("/api/v1/nodes?limit=500")),
                        ("label-selected list", lambda: twin.raw_get(
                            "/api/v1/nodes?labelSelector=nvidia.com%2Fgpu.present%3Dtrue")),
                        ("table list (kubectl get)", lambda: twin.raw_get(
                            "/api/v1/nodes", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"))):
        started = time.monotonic()
        answer = call()
        timings[label] = time.monotonic() - started
        assert len(answer.get("items") or answer.get("rows")) in (500, 1000)
    with capsys.disabled():
        print("\n[1000 nodes] " + ", ".join("%s %.3fs" % item for item in timings.items()))
    assert max(timings.values()) < 2.0


def test_watch_list_streams_initial_events_then_the_end_bookmark(twin):
    twin.add_node("gpu-0")
    twin.add_node("gpu-1")
    context = ssl.create_default_context(cadata=twin.server.ca_pem)
    request = urllib.request.Request(
        twin.server.url + "/api/v1/nodes?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
        "&allowWatchBookmarks=true&timeoutSeconds=1", headers={"Authorization": "Bearer " + twin.server.token})
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        events = [json.loads(line) for line in response.read().splitlines() if line.strip()]
    assert [(event["type"], event["object"]["metadata"].get("name")) for event in events[:3]] == [
        ("ADDED", "gpu-0"), ("ADDED", "gpu-1"), ("BOOKMARK", None)]
    assert events[2]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_a_failing_subscriber_does_not_fail_the_api_call(twin, capsys):
    def broken_controller(event_type, resource, obj):
        raise RuntimeError("controller bug")

    twin.store.subscribe(broken_controller)
    created = twin.core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="gpu-9")))
    assert created.metadata.name == "gpu-9"
    assert "controller bug" in capsys.readouterr().err


def test_namespace_status_subresource_path_is_the_namespace_itself(twin):
    twin.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="jobs")))
    status = twin.core.read_namespace_status("jobs")
    assert status.metadata.name == "jobs" and status.status.phase == "Active"
    assert twin.raw_get("/api/v1/namespaces/jobs/configmaps")["kind"] == "ConfigMapList"


def test_resource_slices_are_served_in_v1_and_v1beta1_from_one_store(twin):
    """resource.k8s.io/v1 (GA in 1.34) puts a device's fields on the device, v1beta1 under `basic`: an object
    written in either version reads back in both, and a v1 watch sees v1 objects."""
    v1 = client.ResourceV1Api(twin.api_client)
    v1beta1 = client.ResourceV1beta1Api(twin.api_client)
    device = {"attributes": {"type": {"string": "gpu"}, "index": {"int": 0}}, "capacity": {"memory": {"value": "80Gi"}}}
    v1.create_resource_slice({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                              "metadata": {"name": "gpu-0-slice"},
                              "spec": {"driver": "gpu.nvidia.com", "nodeName": "gpu-0",
                                       "pool": {"name": "gpu-0", "generation": 1, "resourceSliceCount": 1},
                                       "devices": [dict(device, name="gpu-0")]}}, _preload_content=False)
    as_v1 = json.loads(v1.read_resource_slice("gpu-0-slice", _preload_content=False).data)
    as_beta = json.loads(v1beta1.read_resource_slice("gpu-0-slice", _preload_content=False).data)
    assert as_v1["apiVersion"] == "resource.k8s.io/v1" and as_v1["spec"]["devices"] == [dict(device, name="gpu-0")]
    assert as_beta["apiVersion"] == "resource.k8s.io/v1beta1"
    assert as_beta["spec"]["devices"] == [{"name": "gpu-0", "basic": device}]
    listed = json.loads(v1.list_resource_slice(_preload_content=False).data)
    assert listed["apiVersion"] == "resource.k8s.io/v1" and listed["items"][0]["spec"]["devices"][0]["attributes"]
    watch = v1.list_resource_slice(watch=True, resource_version="0", timeout_seconds=1, _preload_content=False)
    first = json.loads(watch.data.split(b"\n", 1)[0])
    assert first["type"] == "ADDED" and first["object"]["spec"]["devices"][0]["capacity"] == device["capacity"]
