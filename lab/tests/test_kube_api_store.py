"""The Kubernetes API twin's store: metadata, optimistic concurrency, status subresources, patches, selectors,
watches (replay and 410), graceful deletion, garbage collection, and PodDisruptionBudget eviction arithmetic."""
from __future__ import annotations

import json

import pytest

from gpulab.kube.api.patch import (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, PatchError, json_patch, merge_patch,
                                   strategic_merge_patch)
from gpulab.kube.api.recorder import Recorder, read_records
from gpulab.kube.api.selectors import SelectorError, label_selector_from_object, parse_field_selector, parse_label_selector
from gpulab.kube.api.errors import ApiError
from gpulab.kube.api.store import Store

READY = [{"type": "Ready", "status": "True"}]
NOT_READY = [{"type": "Ready", "status": "False"}]


def _node(name, labels=None):
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {}}


def _pod(name, node=None, labels=None, conditions=READY, owner=None, phase="Running"):
    metadata = {"name": name, "labels": labels if labels is not None else {"app": "train"}}
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner["kind"],
                                        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                        "controller": True}]
    spec = {"containers": [{"name": "main", "image": "cuda:12"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": metadata, "spec": spec, "status": {"phase": phase, "conditions": conditions}}


def _pdb(name, **spec):
    spec.setdefault("selector", {"matchLabels": {"app": "train"}})
    return {"metadata": {"name": name}, "spec": spec}


@pytest.fixture
def store():
    return Store()


# ---------------------------------------------------------------- metadata and concurrency

def test_create_sets_uid_resource_version_timestamps_and_default_namespaces_exist(store):
    node = store.create("nodes", _node("gpu-1"))
    assert node["apiVersion"] == "v1" and node["kind"] == "Node"
    assert node["metadata"]["uid"] and node["metadata"]["creationTimestamp"].endswith("Z")
    assert int(node["metadata"]["resourceVersion"]) > 0
    names = [ns["metadata"]["name"] for ns in store.list("namespaces")[0]]
    assert names == ["default", "kube-node-lease", "kube-public", "kube-system"]


def test_create_in_a_missing_namespace_is_not_found_and_duplicate_is_already_exists(store):
    with pytest.raises(ApiError) as missing:
        store.create("pods", _pod("p"), "no-such-ns")
    assert (missing.value.code, missing.value.message) == (404, 'namespaces "no-such-ns" not found')
    store.create("pods", _pod("p"), "default")
    with pytest.raises(ApiError) as duplicate:
        store.create("pods", _pod("p"), "default")
    assert (duplicate.value.code, duplicate.value.reason) == (409, "AlreadyExists")
    assert duplicate.value.message == 'pods "p" already exists'


def test_invalid_name_is_rejected_with_422(store):
    with pytest.raises(ApiError) as invalid:
        store.create("nodes", _node("GPU_1"))
    assert invalid.value.code == 422 and invalid.value.reason == "Invalid"


def test_generate_name_gets_a_random_suffix(store):
    pod = store.create("pods", {"metadata": {"generateName": "nvidia-smi-"}, "spec": {"containers": []}}, "default")
    assert pod["metadata"]["name"].startswith("nvidia-smi-") and len(pod["metadata"]["name"]) == len("nvidia-smi-") + 5


def test_update_with_a_stale_resource_version_is_a_409_conflict(store):
    stale = store.create("nodes", _node("gpu-1"))
    store.patch("nodes", "gpu-1", {"metadata": {"labels": {"a": "1"}}}, MERGE_PATCH)
    stale["spec"]["unschedulable"] = True
    with pytest.raises(ApiError) as conflict:
        store.update("nodes", stale)
    assert conflict.value.code == 409 and conflict.value.reason == "Conflict"
    assert conflict.value.message == ('Operation cannot be fulfilled on nodes "gpu-1": the object has been modified;'
                                      ' please apply your changes to the latest version and try again')


def test_main_update_keeps_status_and_status_update_changes_only_status(store):
    store.create("nodes", _node("gpu-1"))
    store.update("nodes", {"metadata": {"name": "gpu-1"}, "status": {"conditions": READY}}, subresource="status")
    node = store.get("nodes", "gpu-1")
    node["status"] = {"conditions": NOT_READY}
    node["spec"] = {"unschedulable": True}
    updated = store.update("nodes", node)
    assert updated["status"]["conditions"] == READY and updated["spec"]["unschedulable"] is True
    status_only = store.update("nodes", {"metadata": {"name": "gpu-1"}, "spec": {}, "status": {"conditions": NOT_READY}},
                               subresource="status")
    assert status_only["spec"]["unschedulable"] is True and status_only["status"]["conditions"] == NOT_READY


def test_noop_update_keeps_the_resource_version(store):
    node = store.create("nodes", _node("gpu-1"))
    again = store.update("nodes", node)
    assert again["metadata"]["resourceVersion"] == node["metadata"]["resourceVersion"]


def test_generation_counts_spec_changes_only(store):
    deployment = store.create("deployments", {"metadata": {"name": "web"}, "spec": {
        "replicas": 1, "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}},
        "default")
    assert deployment["metadata"]["generation"] == 1
    labelled = store.patch("deployments", "web", {"metadata": {"labels": {"x": "y"}}}, MERGE_PATCH, "default")
    assert labelled["metadata"]["generation"] == 1
    scaled = store.patch("deployments", "web", {"spec": {"replicas": 3}}, MERGE_PATCH, "default")
    assert scaled["metadata"]["generation"] == 2
    status = store.patch("deployments", "web", {"status": {"replicas": 3}}, MERGE_PATCH, "default", "status")
    assert status["metadata"]["generation"] == 2 and status["status"]["replicas"] == 3


# ---------------------------------------------------------------- patches

def test_merge_patch_null_removes_a_key_and_nested_maps_merge():
    target = {"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": 1}}
    assert merge_patch(target, {"metadata": {"labels": {"a": None, "c": "3"}}}) == \
        {"metadata": {"labels": {"b": "2", "c": "3"}}, "spec": {"x": 1}}
    assert target["metadata"]["labels"] == {"a": "1", "b": "2"}, "the target is not modified"


def test_strategic_merge_merges_containers_by_name_and_conditions_by_type():
    target = {"spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]},
              "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "MemoryPressure",
                                                                              "status": "False"}]}}
    patch = {"spec": {"containers": [{"name": "b", "image": "b:2"}]},
             "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}}
    merged = strategic_merge_patch(target, patch)
    assert merged["spec"]["containers"] == [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"}]
    assert merged["status"]["conditions"][0] == {"type": "Ready", "status": "False", "reason": "KubeletNotReady"}
    assert merged["status"]["conditions"][1]["type"] == "MemoryPressure"


def test_strategic_merge_directives_delete_replace_order_and_primitive_deletions():
    target = {"spec": {"containers": [{"name": "a"}, {"name": "b"}], "tolerations": [{"key": "x"}]},
              "metadata": {"finalizers": ["f1", "f2"]}}
    merged = strategic_merge_patch(target, {
        "spec": {"containers": [{"name": "a", "$patch": "delete"}, {"name": "c"}],
                 "$setElementOrder/containers": [{"name": "c"}, {"name": "b"}],
                 "tolerations": [{"key": "y"}]},
        "metadata": {"$deleteFromPrimitiveList/finalizers": ["f1"], "finalizers": ["f3"]}})
    assert merged["spec"]["containers"] == [{"name": "c"}, {"name": "b"}]
    assert merged["spec"]["tolerations"] == [{"key": "y"}], "lists without a merge key are replaced"
    assert merged["metadata"]["finalizers"] == ["f2", "f3"]
    replaced = strategic_merge_patch(target, {"spec": {"$patch": "replace", "containers": [{"name": "z"}]}})
    assert replaced["spec"] == {"containers": [{"name": "z"}]}


def test_json_patch_add_remove_replace_and_failed_test():
    target = {"metadata": {"labels": {"a": "1"}}, "spec": {"taints": [{"key": "t1"}]}}
    patched = json_patch(target, [{"op": "add", "path": "/metadata/labels/nvidia.com~1gpu.present", "value": "true"},
                                  {"op": "remove", "path": "/metadata/labels/a"},
                                  {"op": "add", "path": "/spec/taints/-", "value": {"key": "t2"}},
                                  {"op": "replace", "path": "/spec/taints/0", "value": {"key": "t0"}}])
    assert patched == {"metadata": {"labels": {"nvidia.com/gpu.present": "true"}},
                       "spec": {"taints": [{"key": "t0"}, {"key": "t2"}]}}
    with pytest.raises(PatchError):
        json_patch(target, [{"op": "test", "path": "/metadata/labels/a", "value": "2"}])


def test_store_patch_accepts_all_three_patch_types_and_json_text(store):
    store.create("nodes", _node("gpu-1", {"a": "1"}))
    store.patch("nodes", "gpu-1", '{"spec": {"unschedulable": true}}', STRATEGIC_MERGE_PATCH)
    store.patch("nodes", "gpu-1", {"metadata": {"labels": {"b": "2"}}}, MERGE_PATCH)
    node = store.patch("nodes", "gpu-1", [{"op": "remove", "path": "/metadata/labels/a"}], JSON_PATCH)
    assert node["spec"]["unschedulable"] is True and node["metadata"]["labels"] == {"b": "2"}
    with pytest.raises(ApiError) as failed:
        store.patch("nodes", "gpu-1", [{"op": "remove", "path": "/metadata/labels/zzz"}], JSON_PATCH)
    assert failed.value.code == 422


# ---------------------------------------------------------------- selectors

@pytest.mark.parametrize("selector, expected", [
    ("app=train", ["a", "b"]), ("app==train", ["a", "b"]), ("app!=train", ["c", "d"]),
    ("tier in (gpu, cpu)", ["a", "c"]), ("tier notin (gpu)", ["b", "c", "d"]), ("tier", ["a", "c"]),
    ("!tier", ["b", "d"]), ("app=train,tier in (gpu)", ["a"]), ("", ["a", "b", "c", "d"]),
])
def test_label_selector_full_syntax(selector, expected):
    labels = {"a": {"app": "train", "tier": "gpu"}, "b": {"app": "train"}, "c": {"app": "web", "tier": "cpu"}, "d": {}}
    parsed = parse_label_selector(selector)
    assert [name for name, value in sorted(labels.items()) if parsed.matches(value)] == expected


def test_malformed_label_selector_is_rejected():
    with pytest.raises(SelectorError):
        parse_label_selector("a in b")


def test_label_selector_objects_null_matches_nothing_and_empty_matches_everything():
    assert not label_selector_from_object(None).matches({"a": "1"})
    assert label_selector_from_object({}).matches({"a": "1"})
    expressions = label_selector_from_object({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]})
    assert expressions.matches({"gpu": "h100"}) and not expressions.matches({})


def test_field_selectors_on_node_name_phase_unschedulable_and_not_equal(store):
    for name, node, phase in (("a", "gpu-1", "Running"), ("b", "gpu-2", "Running"), ("c", None, "Pending")):
        store.create("pods", _pod(name, node, phase=phase), "default")

    def names(selector):
        return [pod["metadata"]["name"] for pod in store.list("pods", field_selector=selector)[0]]

    assert names("spec.nodeName=gpu-1") == ["a"]
    assert names("spec.nodeName=") == ["c"]
    assert names("status.phase!=Running") == ["c"]
    assert names("metadata.name=b,metadata.namespace=default") == ["b"]
    store.create("nodes", _node("gpu-1"))
    store.create("nodes", _node("gpu-2"))
    store.patch("nodes", "gpu-2", {"spec": {"unschedulable": True}}, MERGE_PATCH)
    assert [n["metadata"]["name"] for n in store.list("nodes", field_selector="spec.unschedulable=true")[0]] == ["gpu-2"]
    assert parse_field_selector("spec.unschedulable!=true")({"spec": {}})


# ---------------------------------------------------------------- watch

def _drain_events(watch, timeout=0.2):
    events = []
    while True:
        event = watch.next_event(timeout=timeout)
        if event is None:
            return events
        events.append((event[0], event[1]["metadata"]["name"]))


def test_watch_from_a_resource_version_replays_the_changes_after_it(store):
    store.create("nodes", _node("gpu-1"))
    _, list_rv = store.list("nodes")
    store.create("nodes", _node("gpu-2"))
    store.patch("nodes", "gpu-1", {"spec": {"unschedulable": True}}, MERGE_PATCH)
    watch = store.watch("nodes", resource_version=list_rv)
    store.delete("nodes", "gpu-2")
    assert _drain_events(watch) == [("ADDED", "gpu-2"), ("MODIFIED", "gpu-1"), ("DELETED", "gpu-2")]
    watch.close()


def test_watch_without_resource_version_starts_with_added_for_current_objects(store):
    store.create("nodes", _node("gpu-1"))
    watch = store.watch("nodes")
    assert _drain_events(watch) == [("ADDED", "gpu-1")]


def test_watch_from_a_version_older_than_the_window_is_410_expired():
    store = Store(event_window=3)
    first = store.create("nodes", _node("gpu-1"))
    for index in range(5):
        store.patch("nodes", "gpu-1", {"metadata": {"labels": {"n": str(index)}}}, MERGE_PATCH)
    with pytest.raises(ApiError) as expired:
        store.watch("nodes", resource_version=first["metadata"]["resourceVersion"])
    assert expired.value.code == 410 and expired.value.reason == "Expired"
    assert expired.value.message.startswith("too old resource version: %s (" % first["metadata"]["resourceVersion"])


def test_watch_with_a_selector_sees_objects_leave_and_enter_the_selection(store):
    store.create("nodes", _node("gpu-1", {"pool": "a"}))
    watch = store.watch("nodes", label_selector="pool=a", resource_version=store.resource_version)
    store.patch("nodes", "gpu-1", {"metadata": {"labels": {"pool": "b"}}}, MERGE_PATCH)
    store.patch("nodes", "gpu-1", {"metadata": {"labels": {"pool": "a"}}}, MERGE_PATCH)
    store.create("nodes", _node("gpu-2", {"pool": "b"}))
    assert _drain_events(watch) == [("DELETED", "gpu-1"), ("ADDED", "gpu-1")]


def test_bookmark_carries_the_current_resource_version_once_the_queue_is_drained(store):
    watch = store.watch("nodes", resource_version=store.resource_version)
    store.create("nodes", _node("gpu-1"))
    assert watch.bookmark() is None, "a bookmark must not overtake a queued event"
    watch.next_event(timeout=1)
    kind, bookmark = watch.bookmark()
    assert kind == "BOOKMARK" and bookmark["metadata"]["resourceVersion"] == store.resource_version


def test_subscribers_see_each_change_and_may_write_to_the_store(store):
    seen = []

    def controller(event_type, resource, obj):
        seen.append((event_type, resource, obj["metadata"]["name"]))
        if resource == "nodes" and event_type == "ADDED":
            store.create("leases", {"metadata": {"name": obj["metadata"]["name"]}, "spec": {}}, "kube-node-lease")

    store.subscribe(controller)
    store.create("nodes", _node("gpu-1"))
    assert seen == [("ADDED", "nodes", "gpu-1"), ("ADDED", "leases", "gpu-1")]


# ---------------------------------------------------------------- deletion

@pytest.mark.parametrize("resources, init_resources, qos_class", [
    ({}, None, "BestEffort"),
    ({"limits": {"nvidia.com/gpu": "1"}}, None, "BestEffort"),
    ({"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}, None, "Burstable"),
    ({"limits": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"}}, None, "Guaranteed"),
    ({"requests": {"cpu": "1", "memory": "8Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}}, None, "Burstable"),
    ({"limits": {"cpu": "2", "memory": "8Gi"}}, {"requests": {"cpu": "1"}}, "Burstable"),
    ({}, {"limits": {"memory": "1Gi"}}, "Burstable"),
])
def test_pod_qos_class_counts_only_cpu_and_memory_of_every_container(store, resources, init_resources, qos_class):
    pod = {"metadata": {"name": "train"}, "spec": {"containers": [{"name": "main", "image": "cuda:12",
                                                                    "resources": resources}]}}
    if init_resources is not None:
        pod["spec"]["initContainers"] = [{"name": "init", "image": "busybox", "resources": init_resources}]
    assert store.create("pods", pod, "default")["status"]["qosClass"] == qos_class


def test_bound_pod_is_deleted_gracefully_until_the_kubelet_finalizes_it(store):
    store.create("pods", _pod("train-0", "gpu-1"), "default")
    terminating = store.delete("pods", "train-0", "default")
    assert terminating["metadata"]["deletionTimestamp"] and terminating["metadata"]["deletionGracePeriodSeconds"] == 30
    assert store.get("pods", "train-0", "default")["metadata"]["deletionTimestamp"]
    store.finalize_pod_deletion("default", "train-0")
    with pytest.raises(ApiError) as gone:
        store.get("pods", "train-0", "default")
    assert gone.value.code == 404


def test_unbound_pod_and_grace_zero_are_deleted_at_once(store):
    store.create("pods", _pod("pending"), "default")
    store.create("pods", _pod("bound", "gpu-1"), "default")
    store.delete("pods", "pending", "default")
    store.delete("pods", "bound", "default", grace_period_seconds=0)
    assert store.list("pods", "default")[0] == []


def test_delete_precondition_on_uid_is_a_conflict(store):
    store.create("nodes", _node("gpu-1"))
    with pytest.raises(ApiError) as conflict:
        store.delete("nodes", "gpu-1", preconditions={"uid": "not-the-uid"})
    assert conflict.value.code == 409


def test_deleting_an_owner_deletes_its_dependents_unless_orphaned(store):
    owner = store.create("replicasets", {"metadata": {"name": "rs"}, "spec": {"selector": {}}}, "default")
    owner["kind"] = "ReplicaSet"
    store.create("pods", _pod("rs-a", owner=owner), "default")
    store.delete("replicasets", "rs", "default")
    assert store.list("pods", "default")[0] == []
    owner = store.create("replicasets", {"metadata": {"name": "rs2"}, "spec": {"selector": {}}}, "default")
    owner["kind"] = "ReplicaSet"
    store.create("pods", _pod("rs2-a", owner=owner), "default")
    store.delete("replicasets", "rs2", "default", propagation_policy="Orphan")
    assert [p["metadata"]["name"] for p in store.list("pods", "default")[0]] == ["rs2-a"]


def test_default_namespaces_cannot_be_deleted_and_others_take_their_objects(store):
    with pytest.raises(ApiError) as forbidden:
        store.delete("namespaces", "default")
    assert forbidden.value.code == 403
    store.create("namespaces", {"metadata": {"name": "jobs"}})
    store.create("configmaps", {"metadata": {"name": "cfg"}, "data": {}}, "jobs")
    store.delete("namespaces", "jobs")
    assert store.list("configmaps")[0] == []


# ---------------------------------------------------------------- PodDisruptionBudget and eviction

def test_eviction_is_refused_with_429_until_a_replica_is_healthy_elsewhere(store):
    store.create("poddisruptionbudgets", _pdb("train", minAvailable=1), "default")
    store.create("pods", _pod("train-0", "gpu-1"), "default")
    with pytest.raises(ApiError) as refused:
        store.evict("default", "train-0", {"metadata": {"name": "train-0"}})
    status = refused.value.to_status()
    assert status["code"] == 429 and status["reason"] == "TooManyRequests"
    assert status["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert status["details"]["causes"] == [{"reason": "DisruptionBudget", "message":
                                            "The disruption budget train needs 1 healthy pods and has 1 currently"}]
    replacement = _pod("train-1", "gpu-2", conditions=NOT_READY)
    store.create("pods", replacement, "default")
    assert store.get("poddisruptionbudgets", "train", "default")["status"]["disruptionsAllowed"] == 0
    store.patch("pods", "train-1", {"status": {"conditions": READY}}, STRATEGIC_MERGE_PATCH, "default", "status")
    pdb_status = store.get("poddisruptionbudgets", "train", "default")["status"]
    assert (pdb_status["currentHealthy"], pdb_status["desiredHealthy"], pdb_status["disruptionsAllowed"]) == (2, 1, 1)
    assert store.evict("default", "train-0", {})["code"] == 201
    assert store.get("pods", "train-0", "default")["metadata"]["deletionTimestamp"]
    assert store.get("poddisruptionbudgets", "train", "default")["status"]["disruptionsAllowed"] == 0


def test_max_unavailable_percent_counts_the_controller_scale(store):
    deployment = store.create("deployments", {"metadata": {"name": "train"}, "spec": {
        "replicas": 4, "selector": {"matchLabels": {"app": "train"}},
        "template": {"metadata": {"labels": {"app": "train"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}},
        "default")
    deployment["kind"] = "Deployment"
    replica_set = store.create("replicasets", {"metadata": {"name": "train-1", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "train", "uid": deployment["metadata"]["uid"],
         "controller": True}]}, "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "train"}}}}, "default")
    replica_set["kind"] = "ReplicaSet"
    for index in range(3):   # one of the four replicas is still missing
        store.create("pods", _pod("train-%d" % index, "gpu-%d" % index, owner=replica_set), "default")
    store.create("poddisruptionbudgets", _pdb("train", maxUnavailable="25%"), "default")
    status = store.get("poddisruptionbudgets", "train", "default")["status"]
    assert (status["expectedPods"], status["desiredHealthy"], status["currentHealthy"],
            status["disruptionsAllowed"]) == (4, 3, 3, 0)


def test_unhealthy_pod_eviction_policy_if_healthy_budget_versus_always_allow(store):
    store.create("poddisruptionbudgets", _pdb("train", minAvailable=2), "default")
    store.create("pods", _pod("train-0", "gpu-1"), "default")
    store.create("pods", _pod("train-1", "gpu-2", conditions=NOT_READY), "default")
    with pytest.raises(ApiError) as refused:
        store.evict("default", "train-1", {})
    assert refused.value.code == 429, "IfHealthyBudget: the budget is not healthy (1 of 2), so no eviction"
    store.patch("poddisruptionbudgets", "train", {"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}},
                MERGE_PATCH, "default")
    assert store.evict("default", "train-1", {})["code"] == 201


def test_pod_under_two_budgets_cannot_be_evicted(store):
    store.create("poddisruptionbudgets", _pdb("one", minAvailable=0), "default")
    store.create("poddisruptionbudgets", _pdb("two", minAvailable=0), "default")
    store.create("pods", _pod("train-0", "gpu-1"), "default")
    with pytest.raises(ApiError) as error:
        store.evict("default", "train-0", {})
    assert error.value.code == 500 and "more than one PodDisruptionBudget" in error.value.message


def test_pod_without_budget_and_terminal_pod_are_evicted_directly(store):
    store.create("pods", _pod("free", "gpu-1", labels={"app": "free"}), "default")
    store.create("poddisruptionbudgets", _pdb("train", minAvailable=5), "default")
    store.create("pods", _pod("done", "gpu-1", phase="Succeeded"), "default")
    assert store.evict("default", "free", {})["code"] == 201
    assert store.evict("default", "done", {})["code"] == 201
    with pytest.raises(ApiError):
        store.get("pods", "done", "default")


# ---------------------------------------------------------------- records

def test_every_change_is_recorded_as_a_json_line(tmp_path):
    path = tmp_path / "kube-records.jsonl"
    store = Store(recorder=Recorder(str(path)))
    store.create("nodes", _node("gpu-1"))
    store.patch("nodes", "gpu-1", {"spec": {"unschedulable": True}}, MERGE_PATCH)
    store.delete("nodes", "gpu-1")
    changes = [record for record in read_records(str(path)) if record["record"] == "change"
               and record["resource"] == "nodes"]
    assert [change["event"] for change in changes] == ["ADDED", "MODIFIED", "DELETED"]
    assert changes[1]["object"]["spec"]["unschedulable"] is True
    assert [int(change["resourceVersion"]) for change in changes] == sorted(int(c["resourceVersion"]) for c in changes)
    json.dumps(changes)   # plain JSON all the way down


def test_strategic_merge_keys_service_ports_by_port():
    target = {"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}}
    merged = strategic_merge_patch(target, {"spec": {"ports": [{"port": 443, "targetPort": 8443}]}})
    assert merged["spec"]["ports"] == [{"port": 80, "name": "http"}, {"port": 443, "name": "https", "targetPort": 8443}]
