"""Kinds a client finds through discovery (kubernetes.core's ``k8s`` with ``kind:``): ``selfsubjectaccessreviews``
in ``authorization.k8s.io/v1`` (create only, answered, nothing stored) and ``persistentvolumeclaims`` (stored)."""

from __future__ import annotations

import json

import pytest

from gpulab.kube.sim.cluster import KubeCluster
from gpulab.kube.testing import FakeNodeView, make_gpus
from test_kube_cluster_kubectl import kubectl, pytestmark  # noqa: F401 (skip without kubectl)


@pytest.fixture
def twin(tmp_path):
    cluster = KubeCluster(str(tmp_path), [FakeNodeView("gpu-0", gpus=make_gpus(8))], tick_s=0.1).start()
    yield cluster
    cluster.stop()


def test_self_subject_access_review_is_discovered_and_answered(twin):
    listing = json.loads(kubectl(twin, "get", "--raw", "/apis/authorization.k8s.io/v1").stdout)
    assert [(r["name"], r["kind"], r["namespaced"], r["verbs"]) for r in listing["resources"]] == [
        ("selfsubjectaccessreviews", "SelfSubjectAccessReview", False, ["create"])]
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {"resource": "namespaces", "verb": "create"}}}
    answer = json.loads(kubectl(twin, "create", "-o", "json", "-f", "-", stdin=json.dumps(review)).stdout)
    assert answer["status"]["allowed"] is True
    # nothing is stored: it is no resource one lists
    assert "selfsubjectaccessreviews" not in kubectl(twin, "api-resources", "--verbs=list", "-o", "name").stdout


def test_persistent_volume_claims_are_stored(twin):
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "default"},
             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}}}
    kubectl(twin, "apply", "-f", "-", stdin=json.dumps(claim))
    stored = json.loads(kubectl(twin, "get", "pvc", "data", "-o", "json").stdout)
    assert stored["spec"]["resources"]["requests"]["storage"] == "5Gi"
    kubectl(twin, "delete", "pvc", "data")
