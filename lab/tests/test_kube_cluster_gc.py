"""Garbage collection by ownerReferences as kubernetes.core's k8s_gc target asserts it, in process: a Job
deleted with `propagationPolicy: Foreground` stays (terminating, finalizer `foregroundDeletion`) until its
pods are gone; `Background` removes the Job at once while its pod lives out its grace period; a container's
process gets SIGTERM as a container's PID 1 does (dropped unless it has a handler: `sleep` lives until the
SIGKILL at the end of the grace period, a shell with a TERM trap ends at once)."""
from __future__ import annotations

import time

import pytest

from gpulab.kube.api.errors import ApiError
from gpulab.kube.api.store import Store
from gpulab.kube.sim.cluster import KubeCluster
from gpulab.kube.testing import FakeNodeView, make_gpus, wait_for

GRACE_S = 3


@pytest.fixture
def cluster(tmp_path):
    views = [FakeNodeView("gpu-0", gpus=make_gpus(1), host_processes=True)]
    twin = KubeCluster(str(tmp_path / "lab"), views, heartbeat_s=0.5, tick_s=0.05, crash_backoff_s=0.2,
                       container_start_s=0.1, container_pid1_signals=True).start(serve=False)
    yield twin
    twin.stop()


def job(name, command):
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"template": {"metadata": {"labels": {"job": name}},
                                  "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": GRACE_S,
                                           "containers": [{"name": "main", "image": "busybox", "command": command}]}}}}


def pods(store, name):
    return store.list("pods", "default", "job=" + name)[0]


def running_pod(store, name):
    return wait_for(lambda: next((pod for pod in pods(store, name) if pod["status"].get("phase") == "Running"), None),
                    timeout_s=15.0, what="the Job's pod running")


def exists(store, resource, name):
    try:
        return store.get(resource, name, "default")
    except ApiError:
        return None


def test_foreground_deletion_keeps_the_job_until_its_pod_is_gone(cluster):
    store = cluster.store
    store.create("jobs", job("fg", ["sleep", "600"]))
    running_pod(store, "fg")
    started = time.time()
    marked = store.delete("jobs", "fg", "default", propagation_policy="Foreground")
    assert marked["metadata"]["finalizers"] == ["foregroundDeletion"] and marked["metadata"]["deletionTimestamp"]
    time.sleep(0.5)
    assert exists(store, "jobs", "fg") is not None
    [pod] = pods(store, "fg")
    assert pod["metadata"]["deletionTimestamp"] and pod["status"]["phase"] == "Running"
    wait_for(lambda: exists(store, "jobs", "fg") is None, timeout_s=15.0, what="the Job gone after its pod")
    assert not pods(store, "fg")
    assert time.time() - started >= GRACE_S - 0.5     # sleep ignored SIGTERM: it went at the SIGKILL


def test_background_deletion_removes_the_job_and_its_pod_lives_out_its_grace_period(cluster):
    store = cluster.store
    store.create("jobs", job("bg", ["sleep", "600"]))
    running_pod(store, "bg")
    store.delete("jobs", "bg", "default", propagation_policy="Background")
    assert exists(store, "jobs", "bg") is None
    time.sleep(1.0)
    [pod] = pods(store, "bg")
    assert pod["metadata"]["deletionTimestamp"] and pod["status"]["phase"] == "Running"
    wait_for(lambda: not pods(store, "bg"), timeout_s=15.0, what="the pod gone after its grace period")


def test_a_process_with_a_term_handler_ends_at_sigterm(cluster):
    store = cluster.store
    store.create("jobs", job("trap", ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"]))
    running_pod(store, "trap")
    time.sleep(0.3)     # the shell has set its trap
    started = time.time()
    store.delete("jobs", "trap", "default", propagation_policy="Background")
    wait_for(lambda: not pods(store, "trap"), timeout_s=15.0, what="the pod gone")
    assert time.time() - started < GRACE_S - 0.5


def test_foreground_deletion_goes_down_the_owner_chain_in_the_store():
    store = Store()
    owner = store.create("deployments", {"metadata": {"name": "web", "namespace": "default"},
                                         "spec": {"selector": {"matchLabels": {"app": "web"}},
                                                  "template": {"metadata": {"labels": {"app": "web"}},
                                                               "spec": {"containers": [{"name": "c", "image": "x"}]}}}})

    def reference(obj, kind, api_version="apps/v1"):
        return [{"apiVersion": api_version, "kind": kind, "name": obj["metadata"]["name"],
                 "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]

    replicaset = store.create("replicasets", {"metadata": {"name": "web-1", "namespace": "default",
                                                           "ownerReferences": reference(owner, "Deployment")},
                                              "spec": {"selector": {"matchLabels": {"app": "web"}},
                                                       "template": owner["spec"]["template"]}})
    store.create("pods", {"metadata": {"name": "web-1-a", "namespace": "default",
                                       "ownerReferences": reference(replicaset, "ReplicaSet")},
                          "spec": {"nodeName": "gpu-0", "containers": [{"name": "c", "image": "x"}]},
                          "status": {"phase": "Running"}})
    store.create("configmaps", {"metadata": {"name": "loose", "namespace": "default"}})
    store.delete("deployments", "web", "default", propagation_policy="Foreground")
    # the pod is terminating (graceful): the ReplicaSet and the Deployment wait for it
    assert store.get("pods", "web-1-a", "default")["metadata"]["deletionTimestamp"]
    assert store.get("replicasets", "web-1", "default")["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert store.get("deployments", "web", "default")["metadata"]["finalizers"] == ["foregroundDeletion"]
    store.finalize_pod_deletion("default", "web-1-a")     # what the kubelet does when the container has stopped
    assert exists(store, "replicasets", "web-1") is None
    assert exists(store, "deployments", "web") is None
    assert exists(store, "configmaps", "loose") is not None
