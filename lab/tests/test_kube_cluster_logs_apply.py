"""What kubernetes.core's k8s_log and hide_fields read, as a real cluster answers it:

- logs by owner: ``kubectl logs deploy/x`` (the client resolves the Deployment's selector to one of its pods);
- a pod of several containers that each give a command runs each as its own process with its own log
  (``kubectl logs POD -c NAME``), and a Job of such pods completes once all its containers exited 0;
- a no-op apply changes nothing: same resourceVersion, so a client comparing before and after sees no change.
"""

from __future__ import annotations

import json

import pytest

from gpulab.kube.sim.cluster import KubeCluster
from gpulab.kube.testing import FakeNodeView, make_gpus
from test_kube_cluster_kubectl import eventually, kubectl, pytestmark  # noqa: F401 (skip without kubectl)


@pytest.fixture
def twin(tmp_path):
    views = [FakeNodeView("gpu-%d" % index, gpus=make_gpus(8), host_processes=True) for index in range(2)]
    cluster = KubeCluster(str(tmp_path), views, heartbeat_s=0.5, tick_s=0.05, crash_backoff_s=0.4,
                          job_backoff_s=0.4, container_start_s=0.3).start()
    yield cluster
    cluster.stop()


def apply(twin, obj, *extra):
    return kubectl(twin, "apply", *extra, "-f", "-", stdin=json.dumps(obj))


def test_logs_of_a_deployment_come_from_one_of_its_pods(twin):
    apply(twin, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "hello", "namespace": "default"},
                 "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "hello"}},
                          "template": {"metadata": {"labels": {"app": "hello"}}, "spec": {"containers": [
                              {"name": "hello", "image": "busybox", "command": ["sh"],
                               "args": ["-c", "echo hello world; sleep 60"]}]}}}})
    kubectl(twin, "rollout", "status", "deployment/hello", "--timeout=30s")
    assert eventually(lambda: kubectl(twin, "logs", "deploy/hello").stdout, what="a log") == "hello world\n"


def test_each_container_of_a_job_pod_runs_with_its_own_log_and_the_job_completes(twin):
    containers = [{"name": "p01", "image": "busybox", "command": ["sh"],
                   "args": ["-c", "for i in $(seq 0 2); do echo $i; done"]},
                  {"name": "p02", "image": "busybox", "command": ["sh"],
                   "args": ["-c", "for i in $(seq 10 12); do echo $i; done"]}]
    apply(twin, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "multi", "namespace": "default"},
                 "spec": {"backoffLimit": 1, "template": {"spec": {"restartPolicy": "Never",
                                                                   "containers": containers}}}})
    kubectl(twin, "wait", "job/multi", "--for=condition=Complete", "--timeout=30s")
    assert kubectl(twin, "logs", "job/multi", "-c", "p01").stdout == "0\n1\n2\n"
    assert kubectl(twin, "logs", "job/multi", "-c", "p02").stdout == "10\n11\n12\n"
    # kubectl keeps its log requests in a Go map: the containers come in either order, each log whole
    assert kubectl(twin, "logs", "job/multi", "--all-containers").stdout in ("0\n1\n2\n10\n11\n12\n",
                                                                           "10\n11\n12\n0\n1\n2\n")
    pod = json.loads(kubectl(twin, "get", "pods", "-l", "job-name=multi", "-o", "json").stdout)["items"][0]
    assert pod["status"]["phase"] == "Succeeded"
    assert [(s["name"], s["state"]["terminated"]["exitCode"]) for s in pod["status"]["containerStatuses"]] == [
        ("p01", 0), ("p02", 0)]
    # without -c kubectl takes the first container and says so
    defaulted = kubectl(twin, "logs", pod["metadata"]["name"])
    assert (defaulted.stdout, defaulted.stderr) == ("0\n1\n2\n", 'Defaulted container "p01" out of: p01, p02\n')


def test_a_failing_container_fails_the_pod_and_a_deleted_pod_ends_its_processes(twin):
    apply(twin, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mixed", "namespace": "default"},
                 "spec": {"restartPolicy": "Never", "containers": [
                     {"name": "ok", "image": "busybox", "command": ["true"]},
                     {"name": "bad", "image": "busybox", "command": ["sh", "-c", "exit 4"]}]}})
    kubectl(twin, "wait", "pod/mixed", "--for=jsonpath={.status.phase}=Failed", "--timeout=30s")
    apply(twin, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleepers", "namespace": "default"},
                 "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                     {"name": "a", "image": "busybox", "command": ["sleep", "3600"]},
                     {"name": "b", "image": "busybox", "command": ["sleep", "3601"]}]}})
    kubectl(twin, "wait", "pod/sleepers", "--for=condition=Ready", "--timeout=30s")
    kubectl(twin, "delete", "pod", "sleepers", "--timeout=30s")
    keys = [key for kubelet in twin.kubelets.values() for key in kubelet.processes.uids()]
    assert not [key for key in keys if "/" in key]


@pytest.mark.parametrize("server_side", [False, True])
def test_a_no_op_apply_leaves_the_object_as_it_was(twin, server_side):
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"},
                  "data": {"hello": "world"}}
    extra = ["--server-side"] if server_side else []
    apply(twin, config_map, *extra)
    before = json.loads(kubectl(twin, "get", "cm", "cm", "-o", "json", "--show-managed-fields").stdout)
    apply(twin, config_map, *extra)
    after = json.loads(kubectl(twin, "get", "cm", "cm", "-o", "json", "--show-managed-fields").stdout)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after == before
