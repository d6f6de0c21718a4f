"""A client that finds a kind through discovery (kubernetes.core's ``k8s`` with ``kind: SelfSubjectAccessReview``)
finds ``selfsubjectaccessreviews`` in ``authorization.k8s.io/v1`` (create only), and creating one answers it."""

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
