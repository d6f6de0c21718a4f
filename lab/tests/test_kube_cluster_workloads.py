"""StatefulSets and Jobs as a real cluster runs them, seen through real `kubectl` and the official Python client
over HTTPS (KubeCluster with FakeNodeViews whose containers run as host processes: `sleep 2` sleeps)."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from gpulab.kube.sim.cluster import KubeCluster
from gpulab.kube.testing import FakeNodeView, make_gpus
from test_kube_cluster_kubectl import eventually, jsonpath, kubectl, pytestmark  # noqa: F401 (skip without kubectl)

kubernetes = pytest.importorskip("kubernetes")


@pytest.fixture
def twin(tmp_path):
    views = [FakeNodeView("gpu-%d" % index, gpus=make_gpus(8), host_processes=True) for index in range(3)]
    cluster = KubeCluster(str(tmp_path), views, heartbeat_s=0.5, tick_s=0.05, crash_backoff_s=0.3,
                          job_backoff_s=0.3, container_start_s=0.3).start()
    yield cluster
    cluster.stop()


def statefulset(name, replicas, policy="OrderedReady"):
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "serviceName": name, "podManagementPolicy": policy,
                     "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "server", "image": "vllm/vllm-openai:v0.6.3"}]}}}}


def pods_of(twin, app):
    return json.loads(kubectl(twin, "get", "pods", "-l", "app=" + app, "-o", "json").stdout)["items"]


def ready_at(pod):
    return next(c["lastTransitionTime"] for c in pod["status"]["conditions"] if c["type"] == "Ready")


def test_statefulset_scaled_to_three_has_ordered_ready_pods_and_an_evicted_one_returns_under_its_name(twin):
    kubectl(twin, "apply", "-f", "-", stdin=yaml.safe_dump(statefulset("infer", 1)))
    kubectl(twin, "rollout", "status", "statefulset/infer", "--timeout=30s")
    kubectl(twin, "scale", "statefulset/infer", "--replicas=3")
    kubectl(twin, "rollout", "status", "statefulset/infer", "--timeout=30s")
    pods = sorted(pods_of(twin, "infer"), key=lambda pod: pod["metadata"]["name"])
    assert [pod["metadata"]["name"] for pod in pods] == ["infer-0", "infer-1", "infer-2"]
    assert all(pod["status"]["phase"] == "Running" for pod in pods)
    # OrderedReady: each pod was created only once the one before it was Ready.
    for before, after in zip(pods, pods[1:]):
        assert after["metadata"]["creationTimestamp"] >= ready_at(before)
    assert pods[1]["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == "infer-1"
    assert pods[1]["spec"]["hostname"] == "infer-1" and pods[1]["spec"]["subdomain"] == "infer"
    status = json.loads(kubectl(twin, "get", "sts", "infer", "-o", "json").stdout)["status"]
    assert {key: status[key] for key in ("replicas", "readyReplicas", "currentReplicas", "updatedReplicas")} == \
        {"replicas": 3, "readyReplicas": 3, "currentReplicas": 3, "updatedReplicas": 3}
    assert status["currentRevision"] == status["updateRevision"] == pods[0]["metadata"]["labels"][
        "controller-revision-hash"]
    assert kubectl(twin, "get", "controllerrevision", status["updateRevision"]).returncode == 0
    assert kubectl(twin, "get", "sts", "infer").stdout.splitlines()[1].split()[:2] == ["infer", "3/3"]

    kubernetes.config.load_kube_config(config_file=twin.kubeconfig_path)
    core = kubernetes.client.CoreV1Api()
    old_uid = pods[1]["metadata"]["uid"]
    core.create_namespaced_pod_eviction("infer-1", "default", kubernetes.client.V1Eviction(
        metadata=kubernetes.client.V1ObjectMeta(name="infer-1", namespace="default")))
    eventually(lambda: kubectl(twin, "get", "pod", "infer-1", "-o", "jsonpath={.metadata.uid}", check=False)
               .stdout not in ("", old_uid), what="infer-1 back with a new uid")
    kubectl(twin, "wait", "pod/infer-1", "--for=condition=Ready", "--timeout=30s")
    kubectl(twin, "rollout", "status", "statefulset/infer", "--timeout=30s")


def test_statefulset_scale_down_removes_the_highest_ordinal_first_and_a_new_template_rolls_down(twin):
    kubectl(twin, "apply", "-f", "-", stdin=yaml.safe_dump(statefulset("db", 3, policy="Parallel")))
    kubectl(twin, "rollout", "status", "statefulset/db", "--timeout=30s")
    kubectl(twin, "patch", "statefulset/db", "-p", json.dumps({"spec": {"podManagementPolicy": "OrderedReady"}}))
    kubernetes.config.load_kube_config(config_file=twin.kubeconfig_path)
    core = kubernetes.client.CoreV1Api()
    resource_version = core.list_namespaced_pod("default").metadata.resource_version
    kubectl(twin, "scale", "statefulset/db", "--replicas=1")
    deleted = []
    for event in kubernetes.watch.Watch().stream(core.list_namespaced_pod, "default", label_selector="app=db",
                                                 resource_version=resource_version, timeout_seconds=30):
        if event["type"] == "DELETED":
            deleted.append(event["object"].metadata.name)
        if len(deleted) == 2:
            break
    assert deleted == ["db-2", "db-1"]
    kubectl(twin, "rollout", "status", "statefulset/db", "--timeout=30s")
    old = jsonpath(twin, "sts db", "{.status.currentRevision}")
    kubectl(twin, "set", "image", "statefulset/db", "server=vllm/vllm-openai:v0.6.4")
    kubectl(twin, "rollout", "status", "statefulset/db", "--timeout=30s")
    assert jsonpath(twin, "pod db-0", "{.spec.containers[0].image}") == "vllm/vllm-openai:v0.6.4"
    assert jsonpath(twin, "sts db", "{.status.currentRevision}") != old
    assert len(kubectl(twin, "get", "controllerrevisions", "-o", "name").stdout.split()) == 2


def test_kubectl_create_job_sleep_2_completes_and_kubectl_wait_returns(twin):
    started = time.time()
    kubectl(twin, "create", "job", "--image=busybox", "nap", "--", "sleep", "2")
    kubectl(twin, "wait", "--for=condition=complete", "job/nap", "--timeout=30s")
    elapsed = time.time() - started
    job = json.loads(kubectl(twin, "get", "job", "nap", "-o", "json").stdout)
    assert job["status"]["succeeded"] == 1 and job["status"].get("failed", 0) == 0
    assert [c["type"] for c in job["status"]["conditions"]] == ["SuccessCriteriaMet", "Complete"]
    assert job["status"]["startTime"] <= job["status"]["completionTime"]
    assert elapsed >= 2
    assert kubectl(twin, "get", "job", "nap").stdout.splitlines()[1].split()[:3] == ["nap", "Complete", "1/1"]
    pod = pods_of_job(twin, "nap")[0]
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    kubectl(twin, "create", "job", "--image=busybox", "hello", "--", "echo", "hello")
    kubectl(twin, "wait", "--for=condition=complete", "job/hello", "--timeout=30s")
    assert kubectl(twin, "logs", "job/hello").stdout == "hello\n"


def pods_of_job(twin, name):
    return json.loads(kubectl(twin, "get", "pods", "-l", "job-name=" + name, "-o", "json").stdout)["items"]


def job(name, command, **spec):
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
            "spec": dict({"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "work", "image": "busybox", "command": command}]}}}, **spec)}


def test_job_completions_parallelism_work_queue_backoff_limit_and_deadline(twin):
    kubectl(twin, "apply", "-f", "-", stdin=yaml.safe_dump_all([
        job("batch", ["sleep", "1"], completions=4, parallelism=2),
        job("broken", ["false"], backoffLimit=2),
        job("slow", ["sleep", "60"], activeDeadlineSeconds=2),
        job("queue", ["sleep", "1"], parallelism=2),
    ]))
    kubectl(twin, "wait", "--for=condition=complete", "job/queue", "--timeout=30s")
    queue = json.loads(kubectl(twin, "get", "job", "queue", "-o", "json").stdout)
    assert "completions" not in queue["spec"] and queue["status"]["succeeded"] == 2   # a work queue
    kubectl(twin, "wait", "--for=condition=complete", "job/batch", "--timeout=30s")
    batch = pods_of_job(twin, "batch")
    assert len(batch) == 4 and all(pod["status"]["phase"] == "Succeeded" for pod in batch)
    kubectl(twin, "wait", "--for=condition=failed", "job/broken", "--timeout=30s")
    broken = json.loads(kubectl(twin, "get", "job", "broken", "-o", "json").stdout)
    assert broken["status"]["failed"] == 3
    failed = next(c for c in broken["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert "FailureTarget" in [c["type"] for c in broken["status"]["conditions"]]
    assert len(pods_of_job(twin, "broken")) == 3
    kubectl(twin, "wait", "--for=condition=failed", "job/slow", "--timeout=30s")
    slow = json.loads(kubectl(twin, "get", "job", "slow", "-o", "json").stdout)
    assert next(c for c in slow["status"]["conditions"] if c["type"] == "Failed")["reason"] == "DeadlineExceeded"
    eventually(lambda: not pods_of_job(twin, "slow"), what="the deadline's pod deleted")


def test_job_ttl_after_finished_deletes_the_job_and_its_pods(twin):
    kubectl(twin, "apply", "-f", "-", stdin=yaml.safe_dump(job("once", ["true"], ttlSecondsAfterFinished=4)))
    kubectl(twin, "wait", "--for=condition=complete", "job/once", "--timeout=30s")
    eventually(lambda: kubectl(twin, "get", "job", "once", check=False).returncode != 0, what="job deleted")
    eventually(lambda: not pods_of_job(twin, "once"), what="its pods deleted")
