"""Server-side apply's field conflicts, as kube-apiserver answers them (the Kubernetes docs, "Server-Side Apply",
"Conflicts"):

- an apply by manager M that sets a field to a value other than the live one, where another manager owns that
  field (another applier, or an updater, M's own `Update` entry included), is refused: 409, a `Status` of reason
  `Conflict` whose `details.causes` are one `FieldManagerConflict` per field (`conflict with "OTHER" ...`,
  `field: .data.key`); nothing is written (dry-run included);
- `force=true` takes the field: it leaves the other managers' entries (an entry left owning nothing goes);
- the same value is shared ownership, no conflict; a field nobody else owns is no conflict;
- updates and non-apply patches never conflict (ownership moves to the writer, as before).
"""
from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from gpulab.kube.api.errors import ApiError
from gpulab.kube.api.managedfields import from_fields_v1, path_string
from gpulab.kube.api.store import Store

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"


@pytest.fixture
def store():
    store = Store()
    store.create("namespaces", {"metadata": {"name": "apps"}})
    return store


def _cm(data, labels=None):
    metadata = {"name": "cm", "namespace": "apps"}
    if labels:
        metadata["labels"] = labels
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data})


def _apply(store, manager, data, labels=None, **options):
    return store.patch("configmaps", "cm", _cm(data, labels), APPLY, "apps", field_manager=manager, **options)


def _managers(obj):
    return {(entry["manager"], entry["operation"]): from_fields_v1(entry["fieldsV1"])
            for entry in obj["metadata"].get("managedFields", [])}


def test_kubernetes_cores_own_sequence_shared_then_conflict_then_forced(store):
    """kubernetes.core's k8s_apply target: two appliers share a value; a third changing it gets 409 Conflict
    naming both; forced, it is the only manager left."""
    _apply(store, "manager-00", {"key": "value-0"})
    shared = _apply(store, "manager-01", {"key": "value-0"})
    assert set(_managers(shared)) == {("manager-00", "Apply"), ("manager-01", "Apply")}
    with pytest.raises(ApiError) as raised:
        _apply(store, "manager-02", {"key": "value-1"})
    status = raised.value.to_status()
    assert (status["code"], status["reason"], status["status"]) == (409, "Conflict", "Failure")
    assert status["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "manager-00"', "field": ".data.key"},
        {"reason": "FieldManagerConflict", "message": 'conflict with "manager-01"', "field": ".data.key"}]
    assert status["message"].startswith("Apply failed with 2 conflicts: conflicts with \"manager-00\"\n- .data.key")
    assert store.get("configmaps", "cm", "apps")["data"] == {"key": "value-0"}, "a refused apply writes nothing"
    forced = _apply(store, "manager-02", {"key": "value-1"}, force=True)
    assert forced["data"] == {"key": "value-1"}
    assert _managers(forced) == {("manager-02", "Apply"): {("f:data", "f:key")}}


def test_an_updater_owns_what_it_wrote_and_only_changed_fields_conflict(store):
    store.create("configmaps", json.loads(_cm({"a": "1", "b": "2"}, {"app": "x"})), "apps", field_manager="helm")
    with pytest.raises(ApiError) as raised:
        _apply(store, "kubectl", {"a": "1", "b": "3", "c": "new"}, labels={"app": "y"})
    status = raised.value.to_status()
    assert status["message"] == ('Apply failed with 2 conflicts: conflicts with "helm" using v1\n'
                                 '- .data.b\n- .metadata.labels.app')
    assert [cause["field"] for cause in status["details"]["causes"]] == [".data.b", ".metadata.labels.app"]
    with pytest.raises(ApiError):   # a dry run is refused the same way
        _apply(store, "kubectl", {"b": "3"}, dry_run=True)
    one = pytest.raises(ApiError, _apply, store, "kubectl", {"b": "3"}).value.to_status()
    assert one["message"] == 'Apply failed with 1 conflict: conflict with "helm" using v1: .data.b'
    same = _apply(store, "kubectl", {"a": "1", "c": "new"})   # same value (shared) and a field nobody owns
    assert same["data"] == {"a": "1", "b": "2", "c": "new"}
    assert _managers(same)[("kubectl", "Apply")] == {("f:data", "f:a"), ("f:data", "f:c")}
    assert ("f:data", "f:a") in _managers(same)[("helm", "Update")], "shared"


def test_the_appliers_own_update_entry_conflicts_too_and_updates_never_conflict(store):
    store.create("configmaps", json.loads(_cm({"a": "1"})), "apps", field_manager="tool")
    with pytest.raises(ApiError):
        _apply(store, "tool", {"a": "2"})
    _apply(store, "applier", {"a": "1"})
    patched = store.patch("configmaps", "cm", {"data": {"a": "9"}}, MERGE, "apps", field_manager="editor")
    assert patched["data"]["a"] == "9"
    assert ("f:data", "f:a") in _managers(patched)[("editor", "Update")]
    assert ("applier", "Apply") not in _managers(patched), "the update took the applier's only field"
    again = _apply(store, "applier", {"a": "1"}, force=True)
    assert again["data"]["a"] == "1" and ("f:data", "f:a") not in _managers(again).get(("editor", "Update"), set())


def test_keyed_list_items_and_set_values_print_as_the_api_server_prints_them():
    assert path_string(("f:spec", "f:containers", 'k:{"name":"c"}', "f:image")) == '.spec.containers[name="c"].image'
    assert path_string(("f:spec", "f:ports", 'k:{"port":80,"protocol":"TCP"}')) == \
        '.spec.ports[port=80,protocol="TCP"]'
    assert path_string(("f:metadata", "f:finalizers", 'v:"x"')) == '.metadata.finalizers[="x"]'


# ---------------------------------------------------------------- through real kubectl over HTTPS

def test_kubectl_server_side_apply_conflicts_then_force_conflicts_takes_the_field(tmp_path):
    from test_kube_api_kubectl import KUBECTL, Twin
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    twin = Twin(tmp_path)
    try:
        manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"},
                    "data": {"mode": "a"}}

        def apply(value, *extra):
            manifest["data"]["mode"] = value
            return subprocess.run([KUBECTL, "apply", "--server-side", "-f", "-"] + list(extra),
                                  input=yaml.safe_dump(manifest), env=twin.env, capture_output=True, text=True,
                                  timeout=60)

        assert apply("a", "--field-manager=first").returncode == 0
        refused = apply("b", "--field-manager=second")
        assert refused.returncode != 0
        assert 'Apply failed with 1 conflict: conflict with "first": .data.mode' in refused.stderr
        assert "--force-conflicts" in refused.stderr, "kubectl recognised the conflict and says how to force it"
        assert twin.store.get("configmaps", "cm", "default")["data"] == {"mode": "a"}
        forced = apply("b", "--field-manager=second", "--force-conflicts")
        assert forced.returncode == 0 and "serverside-applied" in forced.stdout
        live = twin.store.get("configmaps", "cm", "default")
        assert live["data"] == {"mode": "b"}
        assert [entry["manager"] for entry in live["metadata"]["managedFields"]] == ["second"]
    finally:
        twin.server.stop()
