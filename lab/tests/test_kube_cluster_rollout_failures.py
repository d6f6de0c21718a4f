"""Pods that cannot start, as a real cluster shows them, so a client's wait on them fails:

- an image no registry holds fails to pull: the container waits with ``ErrImagePull`` (containerd's CRI error as
  the kubelet copies it) and then ``ImagePullBackOff``; the pod stays Pending and never Ready;
- a Deployment updated after its ServiceAccount was deleted: the new ReplicaSet's pods are refused by the
  ServiceAccount admission (``FailedCreate`` event, ``ReplicaFailure`` condition) and the Deployment keeps a
  replica unavailable, so ``kubectl rollout status`` and kubernetes.core's ``wait`` fail.
"""

from __future__ import annotations

import json

import pytest

from gpulab.kube.sim import images
from gpulab.kube.sim.cluster import KubeCluster
from gpulab.kube.testing import FakeNodeView, make_gpus
from test_kube_cluster_kubectl import eventually, kubectl, pytestmark  # noqa: F401 (skip without kubectl)

# every image the collection's playbooks, the twin and the lab tests run on a kubelet (grep `image`)
IMAGES_IN_USE = ["busybox", "registry.k8s.io/pause:3.10", "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                 "nvcr.io/nvidia/cuda:12.4.1-base", "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
                 "nvcr.io/nvidia/k8s-device-plugin:v0.17.1", "nvcr.io/nvidia/driver:550.54.15-debian12",
                 "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.8.0",
                 "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v24.9.0", "nvcr.io/nvidia/pytorch:24.05-py3",
                 "nvcr.io/nvidia/tritonserver:24.08-py3", "nginx:1.27", "vllm/vllm-openai:v0.6.3",
                 "triton:24.08", "cuda:12", "cuda", "x", "a:1", "b:2",
                 # and those kubernetes.core's integration targets expect to run
                 "python:3.7-alpine", "alpine:3.14.0", "busybox:1.33.0", "nginx:1.17", "redis", "docker.io/nginx",
                 "gcr.io/kuar-demo/kuard-amd64:v0.10.0-green", "quay.io/fluentd_elasticsearch/fluentd:v2.5.2",
                 "prom/node-exporter", "ubuntu:jammy-20240111"]


@pytest.mark.parametrize("image", IMAGES_IN_USE)
def test_images_the_twin_runs_are_pulled(image):
    assert images.pull_error(image) is None


def test_made_up_images_fail_as_containerd_reports_them():
    assert images.pull_error("i_made_this_up:and_this_too") == (
        'rpc error: code = Unknown desc = failed to pull and unpack image "docker.io/library/i_made_this_up:'
        'and_this_too": failed to resolve reference "docker.io/library/i_made_this_up:and_this_too": pull access '
        'denied, repository does not exist or may require authorization: server message: insufficient_scope: '
        'authorization failed')
    assert images.pull_error("nginx:1.0.23449928384992872784").startswith(
        'rpc error: code = NotFound desc = failed to pull and unpack image "docker.io/library/nginx:'
        '1.0.23449928384992872784"')
    assert images.pull_error("quay.io/fluentd_elasticsearch/fluentd:v2734894949").endswith(
        '"quay.io/fluentd_elasticsearch/fluentd:v2734894949": quay.io/fluentd_elasticsearch/fluentd:v2734894949: '
        'not found')
    assert images.normalize("adslfkjadslfkjadslkfjsadf") == "docker.io/library/adslfkjadslfkjadslkfjsadf:latest"
    assert "pull access denied" in images.pull_error("adslfkjadslfkjadslkfjsadf")


@pytest.fixture
def twin(tmp_path):
    views = [FakeNodeView("gpu-%d" % index, gpus=make_gpus(8)) for index in range(2)]
    cluster = KubeCluster(str(tmp_path), views, heartbeat_s=0.5, tick_s=0.05, crash_backoff_s=2.0,
                          container_start_s=0.3).start()
    yield cluster
    cluster.stop()


def get(twin, *what, namespace="default"):
    return json.loads(kubectl(twin, "get", "-n", namespace, *what, "-o", "json").stdout)


def waiting(twin, pod):
    statuses = get(twin, "pod", pod).get("status", {}).get("containerStatuses") or [{}]
    return statuses[0].get("state", {}).get("waiting") or {}


def test_a_pod_whose_image_does_not_exist_fails_to_pull_and_never_gets_ready(twin):
    kubectl(twin, "run", "nope", "--image=i_made_this_up:and_this_too")
    seen = {}

    def reached(reason):
        state = waiting(twin, "nope")      # one read: the state moves on under the test's feet
        seen.setdefault(state.get("reason"), state.get("message"))
        return reason in seen
    eventually(lambda: reached("ErrImagePull"), what="ErrImagePull")
    eventually(lambda: reached("ImagePullBackOff"), what="ImagePullBackOff")
    assert seen["ErrImagePull"] == images.pull_error("i_made_this_up:and_this_too")
    assert seen["ImagePullBackOff"] == 'Back-off pulling image "i_made_this_up:and_this_too"'
    pod = get(twin, "pod", "nope")
    assert pod["status"]["phase"] == "Pending"
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "False"
    assert kubectl(twin, "wait", "pod/nope", "--for=condition=Ready", "--timeout=2s", check=False).returncode != 0
    reasons = [(e["reason"], e["message"]) for e in get(twin, "events")["items"]
               if e["involvedObject"]["name"] == "nope"]
    assert ("Failed", "Error: ErrImagePull") in reasons
    assert ("BackOff", 'Back-off pulling image "i_made_this_up:and_this_too"') in reasons
    # the pod still goes when deleted, and a pod of a real image next to it runs
    kubectl(twin, "run", "fine", "--image=busybox")
    kubectl(twin, "wait", "pod/fine", "--for=condition=Ready", "--timeout=20s")
    kubectl(twin, "delete", "pod", "nope", "--timeout=20s")


def test_a_rollout_to_a_missing_tag_stays_unavailable(twin):
    kubectl(twin, "create", "deployment", "web", "--image=nginx:1.17", "--replicas=2")
    kubectl(twin, "rollout", "status", "deployment/web", "--timeout=30s")
    kubectl(twin, "set", "image", "deployment/web", "nginx=nginx:1.0.23449928384992872784")
    done = kubectl(twin, "rollout", "status", "deployment/web", "--timeout=4s", check=False)
    assert done.returncode != 0
    status = get(twin, "deployment", "web")["status"]
    assert status["availableReplicas"] == 2          # the old pods keep serving
    assert status.get("unavailableReplicas", 0) >= 1


def test_updating_a_deployment_whose_service_account_was_deleted_is_refused(twin):
    kubectl(twin, "create", "serviceaccount", "app")
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app", "namespace": "default"},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "app"}},
                           "template": {"metadata": {"labels": {"app": "app"}},
                                        "spec": {"serviceAccountName": "app",
                                                 "containers": [{"name": "main", "image": "busybox:1.33.0"}]}}}}
    kubectl(twin, "apply", "-f", "-", stdin=json.dumps(deployment))
    kubectl(twin, "rollout", "status", "deployment/app", "--timeout=30s")
    kubectl(twin, "delete", "serviceaccount", "app")
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:1.32.0"
    kubectl(twin, "apply", "-f", "-", stdin=json.dumps(deployment))
    assert kubectl(twin, "rollout", "status", "deployment/app", "--timeout=4s", check=False).returncode != 0

    new_rs = next(rs for rs in get(twin, "replicasets")["items"]
                  if rs["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox:1.32.0")
    expected = ('pods "%s-" is forbidden: error looking up service account default/app: serviceaccount "app" not '
                'found' % new_rs["metadata"]["name"])
    failure = next(c for c in new_rs["status"]["conditions"] if c["type"] == "ReplicaFailure")
    assert (failure["status"], failure["reason"], failure["message"]) == ("True", "FailedCreate", expected)
    events = [e for e in get(twin, "events")["items"] if e["reason"] == "FailedCreate"]
    assert any(e["message"] == "Error creating: " + expected for e in events)
    status = get(twin, "deployment", "app")["status"]
    # the old pod serves; the replica the new ReplicaSet is asked for is unavailable (what `wait` reads)
    assert (status["replicas"], status["availableReplicas"], status.get("updatedReplicas", 0)) == (1, 1, 0)
    assert status["unavailableReplicas"] == 1


def test_a_null_request_left_by_an_apply_counts_as_zero_and_the_pod_is_scheduled(twin):
    # kubernetes.core's apply of a template whose `requests.memory` went from 100Mi to null (k8s_apply target)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nullmem", "namespace": "default"},
           "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {
               "limits": {"cpu": "50m", "memory": "50Mi"}, "requests": {"cpu": "50m", "memory": None}}}]}}
    twin.store.create("pods", pod, "default")
    kubectl(twin, "wait", "pod/nullmem", "--for=condition=Ready", "--timeout=30s")
