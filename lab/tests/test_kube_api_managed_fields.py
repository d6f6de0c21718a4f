"""`metadata.managedFields` as kube-apiserver keeps it (what kubernetes.core's `hidden_fields` change detection
and `kubectl --show-managed-fields` read):

- one entry per manager + operation (+ subresource): the manager is the request's `fieldManager`, else its
  User-Agent up to the first `/`; `Update` for create/update/patch, `Apply` for server-side apply;
- `fieldsV1` is the set of fields that manager set (a changed field moves to its writer, a removed one leaves
  every entry, an entry owning nothing goes);
- a write that changes nothing leaves resourceVersion and managedFields as they were;
- the twin's own controllers (no manager) leave the entries as they are.
"""
from __future__ import annotations

import json

import pytest

from gpulab.kube.api.managedfields import from_fields_v1, manager_for, to_fields_v1
from gpulab.kube.api.store import Store

SMP = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"


@pytest.fixture
def store():
    store = Store()
    store.create("namespaces", {"metadata": {"name": "apps"}})
    return store


def _config_map(data, **metadata):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": dict({"name": "cm", "namespace": "apps"}, **metadata),
            "data": data}


def _entries(obj):
    return {(entry["manager"], entry["operation"], entry.get("subresource", "")): entry
            for entry in obj["metadata"].get("managedFields", [])}


def _owned(obj, manager, operation="Update", subresource=""):
    return from_fields_v1(_entries(obj)[(manager, operation, subresource)]["fieldsV1"])


def test_the_manager_is_the_field_manager_else_the_user_agent_up_to_its_first_slash():
    assert manager_for("kubectl-client-side-apply", "kubectl/v1.33.0 (linux/amd64)") == "kubectl-client-side-apply"
    assert manager_for(None, "OpenAPI-Generator/33.1.0/python") == "OpenAPI-Generator"
    assert manager_for("", "kubectl/v1.33.0 (linux/amd64) kubernetes/abc") == "kubectl"
    assert manager_for(None, "a\x00b" + "x" * 300) == "ab" + "x" * 126       # printable only, 128 bytes at most
    assert manager_for(None, None) == ""


def test_create_records_the_creator_owning_every_field_it_stored(store):
    created = store.create("configmaps", _config_map({"hello": "world", "another": "value"}, labels={"app": "a"}),
                           "apps", field_manager="OpenAPI-Generator")
    [entry] = created["metadata"]["managedFields"]
    assert {key: value for key, value in entry.items() if key != "time"} == {
        "manager": "OpenAPI-Generator", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:data": {".": {}, "f:another": {}, "f:hello": {}},
                     "f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}
    assert entry["time"].endswith("Z")
    assert store.get("configmaps", "cm", "apps") == created


def test_a_no_op_write_keeps_resource_version_and_managed_fields(store):
    created = store.create("configmaps", _config_map({"hello": "world"}), "apps", field_manager="OpenAPI-Generator")
    for patch, patch_type in (({"data": {"hello": "world"}}, SMP),
                              ([{"op": "add", "path": "/data/hello", "value": "world"}], JSON_PATCH)):
        assert store.patch("configmaps", "cm", patch, patch_type, "apps", field_manager="OpenAPI-Generator") == created
    assert store.update("configmaps", created, "apps", field_manager="another-client") == created


def test_a_changed_field_moves_to_its_writer_and_a_removed_one_leaves_every_entry(store):
    store.create("configmaps", _config_map({"hello": "world", "another": "value"}), "apps", field_manager="creator")
    patched = store.patch("configmaps", "cm", {"data": {"hello": "there", "anew": "value"},
                                               "metadata": {"annotations": {"note": "x"}}}, SMP, "apps",
                          field_manager="kubectl-client-side-apply")
    assert _owned(patched, "creator") == {("f:data",), ("f:data", "f:another")}
    assert _owned(patched, "kubectl-client-side-apply") == {
        ("f:data", "f:hello"), ("f:data", "f:anew"), ("f:metadata", "f:annotations"),
        ("f:metadata", "f:annotations", "f:note")}
    removed = store.patch("configmaps", "cm", {"data": {"another": None}}, SMP, "apps", field_manager="third")
    assert _owned(removed, "creator") == {("f:data",)}
    assert ("third", "Update", "") not in _entries(removed)          # it set nothing: no entry
    gone = store.patch("configmaps", "cm", {"data": {"hello": "again", "anew": "again"},
                                            "metadata": {"annotations": {"note": "y"}}}, SMP, "apps",
                       field_manager="fourth")
    # what it set went to "fourth"; it keeps the annotations map it created
    assert _owned(gone, "kubectl-client-side-apply") == {("f:metadata", "f:annotations")}
    assert _owned(gone, "creator") == {("f:data",)}
    assert store.patch("configmaps", "cm", {"metadata": {"annotations": None}}, SMP, "apps",
                       field_manager="fourth")["metadata"]["managedFields"][-1]["manager"] == "fourth"
    assert ("kubectl-client-side-apply", "Update", "") not in _entries(store.get("configmaps", "cm", "apps"))
    assert int(gone["metadata"]["resourceVersion"]) > int(removed["metadata"]["resourceVersion"])


def test_an_apply_entry_owns_exactly_what_was_applied_and_repeating_it_changes_nothing(store):
    applied = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "apps"},
               "data": {"hello": "world"}}
    created = store.patch("configmaps", "cm", json.dumps(applied), APPLY, "apps", field_manager="kubectl")
    # an Apply entry owns the leaves it sent, not the map above them (the Server-Side Apply docs' example)
    assert _entries(created)[("kubectl", "Apply", "")]["fieldsV1"] == {"f:data": {"f:hello": {}}}
    store.patch("configmaps", "cm", {"data": {"other": "1"}}, SMP, "apps", field_manager="kubectl-edit")
    again = store.patch("configmaps", "cm", json.dumps(applied), APPLY, "apps", field_manager="kubectl")
    assert store.patch("configmaps", "cm", json.dumps(applied), APPLY, "apps", field_manager="kubectl") == again
    assert _owned(again, "kubectl", "Apply") == {("f:data", "f:hello")}
    assert _owned(again, "kubectl-edit") == {("f:data", "f:other")}


def test_status_writes_have_their_own_entry_and_main_resource_entries_leave_status_alone(store):
    pod = store.create("pods", {"metadata": {"name": "p", "namespace": "apps"},
                                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}, "apps",
                       field_manager="kubectl-create")
    spec = _owned(pod, "kubectl-create")
    assert ("f:spec", "f:containers", 'k:{"name":"c"}', "f:image") in spec
    assert not any(path[0] == "f:status" for path in spec)
    running = store.update("pods", dict(pod, status={"phase": "Running"}), "apps", subresource="status",
                           field_manager="kubelet")
    assert _owned(running, "kubelet", "Update", "status") == {("f:status", "f:phase")}
    assert _owned(running, "kubectl-create") == spec


def test_untracked_writes_of_the_twins_controllers_keep_the_entries(store):
    created = store.create("configmaps", _config_map({"hello": "world"}), "apps", field_manager="creator")
    fresh = _config_map({"hello": "changed"})                           # no managedFields sent
    updated = store.update("configmaps", fresh, "apps")
    assert updated["metadata"]["managedFields"] == created["metadata"]["managedFields"]


def test_fields_v1_round_trips_through_path_sets():
    trie = {"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {'k:{"name":"c"}': {".": {}, "f:image": {}, "f:name": {}}},
                       "f:finalizers": {".": {}, 'v:"x"': {}}}}
    assert to_fields_v1(from_fields_v1(trie)) == trie


def test_over_https_the_python_client_and_kubectl_are_named_and_a_no_op_apply_changes_nothing(tmp_path):
    kubernetes = pytest.importorskip("kubernetes")
    from test_kube_api_client import Twin
    twin = Twin(tmp_path)
    try:
        twin.store.create("namespaces", {"metadata": {"name": "apps"}})
        body = kubernetes.client.V1ConfigMap(metadata=kubernetes.client.V1ObjectMeta(name="cm"),
                                             data={"hello": "world"})
        created = twin.core.create_namespaced_config_map("apps", body)
        [entry] = created.metadata.managed_fields
        assert (entry.manager, entry.operation, entry.api_version) == ("OpenAPI-Generator", "Update", "v1")
        assert entry.fields_v1 == {"f:data": {".": {}, "f:hello": {}}}
        named = twin.core.patch_namespaced_config_map("cm", "apps", {"data": {"a": "b"}}, field_manager="mine")
        assert [one.manager for one in named.metadata.managed_fields] == ["OpenAPI-Generator", "mine"]
        same = twin.core.patch_namespaced_config_map("cm", "apps", {"data": {"a": "b"}}, field_manager="mine")
        assert same.metadata.resource_version == named.metadata.resource_version
        assert same.metadata.managed_fields == named.metadata.managed_fields
    finally:
        twin.api_client.close()
        twin.server.stop()
