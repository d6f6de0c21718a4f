"""kube-controller-manager's root-CA publisher in the twin: every namespace has a `kube-root-ca.crt` ConfigMap
holding the CA that verifies the API server, there before the namespace's create is answered, back when deleted
and put back when edited (what kubernetes.core's k8s_full target counts on: a fresh namespace lists it first)."""
from __future__ import annotations

import json

import pytest

from gpulab.kube.api.errors import ApiError
from gpulab.kube.sim.cluster import KubeCluster
from gpulab.kube.sim.rootca import NAME
from gpulab.kube.testing import FakeNodeView, make_gpus
from test_kube_cluster_kubectl import kubectl, pytestmark  # noqa: F401 (skip without kubectl)


@pytest.fixture
def twin(tmp_path):
    cluster = KubeCluster(str(tmp_path), [FakeNodeView("gpu-0", gpus=make_gpus(1))], heartbeat_s=0.5,
                          tick_s=0.05).start()
    yield cluster
    cluster.stop()


def _config_maps(twin, namespace):
    return json.loads(kubectl(twin, "get", "configmaps", "-n", namespace, "-o", "json").stdout)["items"]


def test_every_namespace_has_the_root_ca_and_a_new_one_lists_it_at_once(twin):
    for namespace in ("default", "kube-system", "kube-public", "kube-node-lease"):
        config_map = twin.store.get("configmaps", NAME, namespace)
        assert config_map["data"] == {"ca.crt": twin.server.ca_pem}
        assert "kubernetes.io/description" in config_map["metadata"]["annotations"]
        assert config_map["metadata"]["managedFields"][0]["manager"] == "kube-controller-manager"
    kubectl(twin, "create", "namespace", "fresh")
    kubectl(twin, "create", "configmap", "test-configmap-1", "-n", "fresh", "--from-literal=key1=value1")
    assert [item["metadata"]["name"] for item in _config_maps(twin, "fresh")] == [NAME, "test-configmap-1"]
    with open(twin.kubeconfig_path) as stream:
        assert "certificate-authority-data" in stream.read()     # the same CA the clients are given


def test_a_deleted_root_ca_comes_back_and_an_edited_one_is_put_back(twin):
    kubectl(twin, "create", "namespace", "apps")
    first_uid = twin.store.get("configmaps", NAME, "apps")["metadata"]["uid"]
    kubectl(twin, "delete", "configmap", NAME, "-n", "apps")
    again = twin.store.get("configmaps", NAME, "apps")
    assert again["metadata"]["uid"] != first_uid and again["data"] == {"ca.crt": twin.server.ca_pem}
    kubectl(twin, "patch", "configmap", NAME, "-n", "apps", "--type=merge", "-p", '{"data":{"ca.crt":"nope"}}')
    assert twin.store.get("configmaps", NAME, "apps")["data"] == {"ca.crt": twin.server.ca_pem}


def test_deleting_a_namespace_takes_its_root_ca_with_it(twin):
    kubectl(twin, "create", "namespace", "short-lived")
    kubectl(twin, "delete", "namespace", "short-lived", "--timeout=30s")
    with pytest.raises(ApiError) as error:
        twin.store.get("configmaps", NAME, "short-lived")
    assert error.value.code == 404
