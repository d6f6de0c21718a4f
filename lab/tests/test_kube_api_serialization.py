"""The twin serializes objects as kube-apiserver does: fields whose Go types are tagged ``omitempty`` are gone
when false, zero or empty (clients that test for absence must see what a real cluster shows), while pointers and
fields without ``omitempty`` keep their zero. Real kubectl over HTTPS, against the API twin alone."""
from __future__ import annotations

import json

import pytest

from test_kube_api_kubectl import KUBECTL, Twin

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


@pytest.fixture
def twin(tmp_path):
    twin = Twin(tmp_path)
    yield twin
    twin.server.stop()


def _get(twin, *args):
    return json.loads(twin.kubectl("get", *args, "-o", "json").stdout)


def test_uncordon_by_merge_patch_leaves_no_unschedulable_field(twin):
    twin.kubectl("cordon", "gpu-0")
    assert _get(twin, "node", "gpu-0")["spec"]["unschedulable"] is True
    twin.kubectl("patch", "node", "gpu-0", "--type", "merge", "-p", '{"spec":{"unschedulable":false}}')
    assert "unschedulable" not in _get(twin, "node", "gpu-0")["spec"]
    twin.kubectl("cordon", "gpu-1")
    twin.kubectl("uncordon", "gpu-1")
    assert "unschedulable" not in _get(twin, "node", "gpu-1")["spec"]


def test_removing_the_last_taint_leaves_no_taints_field_by_patch_or_update(twin, tmp_path):
    twin.kubectl("taint", "node", "gpu-0", "nvidia.com/gpu=upgrade:NoSchedule")
    assert _get(twin, "node", "gpu-0")["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "upgrade", "effect": "NoSchedule"}]
    twin.kubectl("taint", "node", "gpu-0", "nvidia.com/gpu=upgrade:NoSchedule-")
    assert "taints" not in _get(twin, "node", "gpu-0")["spec"]

    twin.kubectl("taint", "node", "gpu-1", "maintenance=true:NoExecute")
    node = _get(twin, "node", "gpu-1")
    node["spec"]["taints"] = []
    manifest = tmp_path / "node.json"
    manifest.write_text(json.dumps(node))
    twin.kubectl("replace", "-f", str(manifest))
    assert "taints" not in _get(twin, "node", "gpu-1")["spec"]


def test_removing_the_last_label_and_annotation_drops_the_maps(twin):
    twin.kubectl("create", "configmap", "gates", "--from-literal=empty=")
    twin.kubectl("label", "configmap", "gates", "stage=canary")
    twin.kubectl("annotate", "configmap", "gates", "why=test")
    twin.kubectl("label", "configmap", "gates", "stage-")
    twin.kubectl("annotate", "configmap", "gates", "why-")
    config_map = _get(twin, "configmap", "gates")
    assert "labels" not in config_map["metadata"] and "annotations" not in config_map["metadata"]
    assert config_map["data"] == {"empty": ""}, "map entries are never pruned"


def test_pointers_and_fields_without_omitempty_keep_their_zero(twin):
    twin.kubectl("create", "deployment", "idle", "--image=nvcr.io/nvidia/cuda:12.4.1-base", "--replicas=0")
    deployment = _get(twin, "deployment", "idle")
    assert deployment["spec"]["replicas"] == 0, "spec.replicas is a *int32"
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": "25%", "maxSurge": "25%"}
    pod_spec = deployment["spec"]["template"]["spec"]
    assert pod_spec["securityContext"] == {} and pod_spec["containers"][0]["resources"] == {}, \
        "structs are never omitted"
    assert deployment["status"] == {}

    replica_set = twin.store.create("replicasets", {"metadata": {"name": "idle-rs"}, "spec": {
        "replicas": 0, "minReadySeconds": 0, "selector": {"matchLabels": {"app": "idle"}},
        "template": {"metadata": {"labels": {"app": "idle"}}, "spec": {"containers": [{"name": "main", "image": "x"}]}}}})
    twin.store.update("replicasets", dict(replica_set, status={"replicas": 0, "readyReplicas": 0,
                                                               "availableReplicas": 0, "observedGeneration": 1}),
                      subresource="status")
    replica_set = _get(twin, "replicaset", "idle-rs")
    assert replica_set["status"] == {"replicas": 0, "observedGeneration": 1}
    assert replica_set["spec"]["replicas"] == 0 and "minReadySeconds" not in replica_set["spec"]


def test_pod_status_keeps_container_fields_without_omitempty(twin):
    twin.store.create("pods", {"metadata": {"name": "p", "labels": {}, "finalizers": []}, "spec": {
        "nodeName": "gpu-0", "tolerations": [], "containers": [{"name": "main", "image": "x", "args": [],
                                                                "env": [{"name": "EMPTY", "value": ""}]}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False", "lastProbeTime": None,
                                                       "message": ""}],
                   "containerStatuses": [{"name": "main", "ready": False, "restartCount": 0, "image": "x",
                                          "imageID": "", "started": False, "lastState": {},
                                          "state": {"terminated": {"exitCode": 0, "signal": 0,
                                                                   "reason": "Completed"}}}]}})
    pod = _get(twin, "pod", "p")
    assert "labels" not in pod["metadata"] and "finalizers" not in pod["metadata"]
    assert "tolerations" not in pod["spec"]
    assert pod["spec"]["containers"][0]["env"] == [{"name": "EMPTY"}]
    assert "args" not in pod["spec"]["containers"][0]
    assert pod["status"]["conditions"] == [{"type": "Ready", "status": "False", "lastProbeTime": None}]
    assert pod["status"]["containerStatuses"] == [{
        "name": "main", "ready": False, "restartCount": 0, "image": "x", "imageID": "", "started": False,
        "lastState": {}, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]


def test_python_dynamic_client_sees_no_unschedulable_after_uncordon_by_patch(twin):
    """What kubernetes.core's k8s_drain does (``state: uncordon``) and what a client that tests for absence reads."""
    kubernetes = pytest.importorskip("kubernetes")
    from kubernetes.dynamic import DynamicClient

    api_client = kubernetes.config.new_client_from_config(config_file=twin.kubeconfig)
    nodes = DynamicClient(api_client).resources.get(api_version="v1", kind="Node")
    nodes.patch(name="gpu-2", body={"spec": {"unschedulable": True}}, content_type="application/merge-patch+json")
    nodes.patch(name="gpu-2", body={"spec": {"unschedulable": False}}, content_type="application/merge-patch+json")
    node = nodes.get(name="gpu-2").to_dict()
    assert "unschedulable" not in node["spec"] and "taints" not in node["spec"]
    api_client.close()
