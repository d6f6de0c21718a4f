"""Deleting a Job with ``propagationPolicy: Orphan`` (``kubectl delete job --cascade=orphan``) leaves its pods
running with the Job removed from their ownerReferences, as the garbage collector of a real cluster does; the
store alone keeps a dependent's other owners."""

from __future__ import annotations

import json

import pytest

from gpulab.kube.api.store import Store
from gpulab.kube.sim.cluster import KubeCluster
from gpulab.kube.testing import FakeNodeView, make_gpus
from test_kube_cluster_kubectl import eventually, kubectl, pytestmark  # noqa: F401 (skip without kubectl)


@pytest.fixture
def twin(tmp_path):
    views = [FakeNodeView("gpu-%d" % index, gpus=make_gpus(8), host_processes=True) for index in range(2)]
    cluster = KubeCluster(str(tmp_path), views, heartbeat_s=0.5, tick_s=0.05, crash_backoff_s=0.3,
                          job_backoff_s=0.3, container_start_s=0.3).start()
    yield cluster
    cluster.stop()


def pods_of_job(twin, name):
    return json.loads(kubectl(twin, "get", "pods", "-l", "job-name=" + name, "-o", "json").stdout)["items"]


def test_kubectl_delete_job_cascade_orphan_leaves_its_pod_running_without_the_owner(twin):
    kubectl(twin, "create", "job", "--image=busybox", "long", "--", "sleep", "600")
    eventually(lambda: [p for p in pods_of_job(twin, "long") if p["status"].get("phase") == "Running"])
    kubectl(twin, "delete", "job", "long", "--cascade=orphan")
    assert kubectl(twin, "get", "job", "long", check=False).returncode != 0
    pods = pods_of_job(twin, "long")
    assert len(pods) == 1
    assert pods[0]["status"]["phase"] == "Running"
    assert "ownerReferences" not in pods[0]["metadata"]
    assert "deletionTimestamp" not in pods[0]["metadata"]


def test_orphaning_removes_only_the_deleted_owner_from_a_dependent():
    store = Store()
    first = store.create("replicasets", {"metadata": {"name": "a"}, "spec": {"selector": {}}}, "default")
    second = store.create("replicasets", {"metadata": {"name": "b"}, "spec": {"selector": {}}}, "default")
    references = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner["metadata"]["name"],
                   "uid": owner["metadata"]["uid"]} for owner in (first, second)]
    store.create("pods", {"metadata": {"name": "shared", "ownerReferences": references},
                          "spec": {"containers": [{"name": "main", "image": "busybox"}]}}, "default")
    store.delete("replicasets", "a", "default", propagation_policy="Orphan")
    kept = store.get("pods", "shared", "default")["metadata"]["ownerReferences"]
    assert [reference["name"] for reference in kept] == ["b"]
