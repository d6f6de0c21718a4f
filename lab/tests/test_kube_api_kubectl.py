"""Real, unchanged kubectl against the Kubernetes API twin: each command an operator runs on GPU nodes.

Controllers and kubelets are not part of these tests (they belong to the cluster tests); objects are
created in the store directly, and a stand-in for the kubelet finalizes terminating pods after 0.2 s, which is
the one kubelet behaviour `delete pod` and `drain` wait for.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import threading
import time

import pytest

from gpulab.kube.api.kubeconfig import write_kubeconfig
from gpulab.kube.api.server import ApiServer
from gpulab.kube.api.store import Store

KUBECTL = shutil.which("kubectl")
OTHER_KUBECTLS = sorted(glob.glob("/usr/lib/google-cloud-sdk/bin/kubectl.1.*"))
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

READY = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
         "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}


def _node_status(index):
    return {"conditions": [READY],
            "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
            "addresses": [{"type": "InternalIP", "address": "127.0.1.%d" % (index + 1)},
                          {"type": "Hostname", "address": "gpu-%d" % index}],
            "nodeInfo": {"kubeletVersion": "v1.32.0", "bootID": "boot-%d" % index, "machineID": "m%d" % index,
                         "systemUUID": "u%d" % index, "kernelVersion": "6.1.0-18-amd64", "osImage": "Debian GNU/Linux 12",
                         "containerRuntimeVersion": "containerd://1.7.24", "kubeProxyVersion": "",
                         "operatingSystem": "linux", "architecture": "amd64"}}


def _running_pod(name, node, labels, owner=None):
    metadata = {"name": name, "labels": labels}
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner["kind"], "name": owner["metadata"]["name"],
                                        "uid": owner["metadata"]["uid"], "controller": True}]
    return {"metadata": metadata,
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.1-base"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0, "image": "cuda",
                                              "imageID": "", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}}


class _KubeletStandIn:
    """Finalizes pods that got a deletionTimestamp, as a kubelet does once containers have stopped."""

    def __init__(self, store):
        self.store = store
        store.subscribe(self._on_change)

    def _on_change(self, event_type, resource, obj):
        if resource == "pods" and event_type == "MODIFIED" and obj["metadata"].get("deletionTimestamp"):
            metadata = obj["metadata"]
            timer = threading.Timer(0.2, self._finalize, (metadata["namespace"], metadata["name"], metadata["uid"]))
            timer.daemon = True
            timer.start()

    def _finalize(self, namespace, name, uid):
        try:
            self.store.delete("pods", name, namespace, grace_period_seconds=0, preconditions={"uid": uid})
        except Exception:
            pass   # already gone


class Twin:
    def __init__(self, tmp_path):
        self.store = Store()
        self.server = ApiServer(self.store, "127.0.0.1", 0, str(tmp_path / "ca"), bookmark_interval_s=0.5).start()
        self.kubeconfig = write_kubeconfig(str(tmp_path / "kubeconfig"), self.server.url, self.server.ca_pem,
                                           self.server.token)
        self.env = dict(os.environ, KUBECONFIG=self.kubeconfig, HOME=str(tmp_path / "home"))
        _KubeletStandIn(self.store)
        self.store.pod_log_provider = lambda namespace, pod, container, params: "GPU 0: NVIDIA H100 80GB HBM3\n"
        for index in range(3):
            self.store.create("nodes", {"metadata": {"name": "gpu-%d" % index, "labels": {
                "kubernetes.io/hostname": "gpu-%d" % index, "nvidia.com/gpu.present": "true"}}, "spec": {}})
            self.store.update("nodes", {"metadata": {"name": "gpu-%d" % index}, "status": _node_status(index)},
                              subresource="status")

    def kubectl(self, *args, binary=None, timeout=60, check=True):
        result = subprocess.run([binary or KUBECTL] + list(args), env=self.env, capture_output=True, text=True,
                                timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError("kubectl %s failed (%d): %s%s" % (" ".join(args), result.returncode, result.stdout,
                                                                   result.stderr))
        return result

    def replica_set_with_pods(self, name, nodes, namespace="default"):
        labels = {"app": name}
        replica_set = self.store.create("replicasets", {"metadata": {"name": name, "labels": labels}, "spec": {
            "replicas": len(nodes), "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "main", "image": "x"}]}}}},
            namespace)
        for index, node in enumerate(nodes):
            self.store.create("pods", _running_pod("%s-%d" % (name, index), node, labels, replica_set), namespace)
        return replica_set


@pytest.fixture
def twin(tmp_path):
    twin = Twin(tmp_path)
    yield twin
    twin.server.stop()


def _rows(output):
    return [line.split() for line in output.strip().splitlines()[1:]]


@pytest.mark.parametrize("binary", [KUBECTL] + OTHER_KUBECTLS, ids=lambda path: os.path.basename(path or "none"))
def test_every_installed_kubectl_gets_nodes_with_status_and_version_columns(twin, binary):
    twin.store.patch("nodes", "gpu-1", {"spec": {"unschedulable": True}}, "application/merge-patch+json")
    output = twin.kubectl("get", "nodes", binary=binary).stdout
    assert output.splitlines()[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert [(row[0], row[1], row[4]) for row in _rows(output)] == [
        ("gpu-0", "Ready", "v1.32.0"), ("gpu-1", "Ready,SchedulingDisabled", "v1.32.0"), ("gpu-2", "Ready", "v1.32.0")]


@pytest.mark.parametrize("binary", [KUBECTL] + OTHER_KUBECTLS, ids=lambda path: os.path.basename(path or "none"))
def test_every_installed_kubectl_creates_a_deployment_and_a_pdb(twin, binary):
    twin.kubectl("create", "deployment", "train", "--image=nvcr.io/nvidia/cuda:12.4.1-base", "--replicas=2",
                 binary=binary)
    twin.kubectl("create", "pdb", "train", "--selector=app=train", "--min-available=1", binary=binary)
    deployment = twin.store.get("deployments", "train", "default")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "nvcr.io/nvidia/cuda:12.4.1-base"
    assert deployment["spec"]["selector"] == {"matchLabels": {"app": "train"}}
    pdb = twin.store.get("poddisruptionbudgets", "train", "default")
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}}


def test_wide_output_shows_addresses_and_runtime(twin):
    row = _rows(twin.kubectl("get", "node", "gpu-0", "-o", "wide").stdout)[0]
    assert row[5] == "127.0.1.1" and row[-1] == "containerd://1.7.24"


def test_describe_node_shows_conditions_capacity_and_its_pods(twin):
    twin.replica_set_with_pods("train", ["gpu-0"])
    output = twin.kubectl("describe", "node", "gpu-0").stdout
    assert "KubeletReady" in output and "nvidia.com/gpu:  8" in output
    assert "Boot ID:                    boot-0" in output
    assert "Non-terminated Pods:          (1 in total)" in output and "train-0" in output


def test_get_and_describe_pods_with_selectors(twin):
    twin.replica_set_with_pods("train", ["gpu-0", "gpu-1"])
    twin.replica_set_with_pods("web", ["gpu-1"])
    rows = _rows(twin.kubectl("get", "pods", "-o", "wide", "--field-selector=spec.nodeName=gpu-1").stdout)
    assert [(row[0], row[1], row[2], row[6]) for row in rows] == [("train-1", "1/1", "Running", "gpu-1"),
                                                                  ("web-0", "1/1", "Running", "gpu-1")]
    rows = _rows(twin.kubectl("get", "pods", "-l", "app in (web),app!=train").stdout)
    assert [row[0] for row in rows] == ["web-0"]
    described = twin.kubectl("describe", "pod", "train-0").stdout
    fields = dict(line.split(":", 1) for line in described.splitlines() if ":" in line and not line.startswith(" "))
    assert fields["Node"].strip() == "gpu-0/" and fields["Controlled By"].strip() == "ReplicaSet/train"


def test_cordon_and_uncordon_toggle_unschedulable(twin):
    assert "node/gpu-2 cordoned" in twin.kubectl("cordon", "gpu-2").stdout
    assert twin.store.get("nodes", "gpu-2")["spec"]["unschedulable"] is True
    assert "node/gpu-2 uncordoned" in twin.kubectl("uncordon", "gpu-2").stdout
    assert not twin.store.get("nodes", "gpu-2")["spec"].get("unschedulable")


def test_label_and_annotate_set_and_remove_keys(twin):
    twin.kubectl("label", "node", "gpu-0", "nvidia.com/gpu.deploy.driver=false")
    twin.kubectl("annotate", "node", "gpu-0", "gpuops.nvidia/maintenance=driver-upgrade")
    node = twin.store.get("nodes", "gpu-0")
    assert node["metadata"]["labels"]["nvidia.com/gpu.deploy.driver"] == "false"
    assert node["metadata"]["annotations"]["gpuops.nvidia/maintenance"] == "driver-upgrade"
    twin.kubectl("label", "node", "gpu-0", "nvidia.com/gpu.deploy.driver-")
    assert "nvidia.com/gpu.deploy.driver" not in twin.store.get("nodes", "gpu-0")["metadata"]["labels"]
    refused = twin.kubectl("label", "node", "gpu-0", "nvidia.com/gpu.present=false", check=False)
    assert refused.returncode != 0 and "already has a value (true)" in refused.stderr


MANIFESTS = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: device-plugin-config, namespace: kube-system}
data: {config.yaml: "version: v1"}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: nvidia-device-plugin-daemonset, namespace: kube-system}
spec:
  selector: {matchLabels: {name: nvidia-device-plugin-ds}}
  template:
    metadata: {labels: {name: nvidia-device-plugin-ds}}
    spec:
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
      nodeSelector: {nvidia.com/gpu.present: "true"}
      containers:
      - name: nvidia-device-plugin-ctr
        image: nvcr.io/nvidia/k8s-device-plugin:v0.17.0
        env: [{name: FAIL_ON_INIT_ERROR, value: "false"}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: train, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: train}}
  template:
    metadata: {labels: {app: train}}
    spec:
      containers:
      - {name: main, image: "nvcr.io/nvidia/cuda:12.4.1-base", resources: {limits: {nvidia.com/gpu: 1}}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: train, namespace: default}
spec: {maxUnavailable: 1, selector: {matchLabels: {app: train}}}
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: nvidia}
handler: nvidia
"""


def test_apply_creates_then_configures_and_server_side_apply_works(twin, tmp_path):
    manifest = tmp_path / "gpu-stack.yaml"
    manifest.write_text(MANIFESTS)
    created = twin.kubectl("apply", "-f", str(manifest)).stdout
    assert created.count(" created") == 5
    manifest.write_text(MANIFESTS.replace('value: "false"', 'value: "true"').replace("replicas: 2", "replicas: 3"))
    second = twin.kubectl("apply", "-f", str(manifest)).stdout
    assert "daemonset.apps/nvidia-device-plugin-daemonset configured" in second
    assert "runtimeclass.node.k8s.io/nvidia unchanged" in second
    daemon_set = twin.store.get("daemonsets", "nvidia-device-plugin-daemonset", "kube-system")
    assert daemon_set["spec"]["template"]["spec"]["containers"][0]["env"] == [{"name": "FAIL_ON_INIT_ERROR",
                                                                               "value": "true"}]
    assert daemon_set["metadata"]["generation"] == 2
    assert "kubectl.kubernetes.io/last-applied-configuration" in daemon_set["metadata"]["annotations"]
    assert twin.store.get("deployments", "train", "default")["spec"]["replicas"] == 3
    assert twin.kubectl("diff", "-f", str(manifest), check=False).returncode == 0, "no drift after apply"
    server_side = twin.kubectl("apply", "--server-side", "-f", str(manifest)).stdout
    assert server_side.count("serverside-applied") == 5


def test_delete_pod_returns_once_the_kubelet_has_finalized_it(twin):
    twin.replica_set_with_pods("train", ["gpu-0"])
    started = time.monotonic()
    assert 'pod "train-0" deleted' in twin.kubectl("delete", "pod", "train-0", "--timeout=20s").stdout
    assert time.monotonic() - started >= 0.2, "kubectl waited for the graceful deletion to finish"
    assert twin.store.list("pods", "default")[0] == []


def test_wait_for_condition_ready_and_for_jsonpath(twin):
    assert "condition met" in twin.kubectl("wait", "--for=condition=Ready", "node/gpu-1", "--timeout=10s").stdout

    def cordon_later():
        time.sleep(0.5)
        twin.store.patch("nodes", "gpu-1", {"spec": {"unschedulable": True}}, "application/merge-patch+json")

    threading.Thread(target=cordon_later, daemon=True).start()
    waited = twin.kubectl("wait", "--for=jsonpath={.spec.unschedulable}=true", "node/gpu-1", "--timeout=10s")
    assert "node/gpu-1 condition met" in waited.stdout
    timed_out = twin.kubectl("wait", "--for=condition=Ready=False", "node/gpu-0", "--timeout=1s", check=False)
    assert timed_out.returncode != 0 and "timed out" in timed_out.stderr


def test_rollout_restart_patches_the_template_annotation(twin):
    twin.kubectl("create", "deployment", "train", "--image=cuda:12")
    assert "deployment.apps/train restarted" in twin.kubectl("rollout", "restart", "deployment/train").stdout
    deployment = twin.store.get("deployments", "train", "default")
    assert "kubectl.kubernetes.io/restartedAt" in deployment["spec"]["template"]["metadata"]["annotations"]
    assert deployment["metadata"]["generation"] == 2


def test_drain_evicts_when_the_budget_allows_and_reports_the_429_when_it_does_not(twin):
    twin.replica_set_with_pods("train", ["gpu-0", "gpu-1"])
    twin.store.create("poddisruptionbudgets", {"metadata": {"name": "train"}, "spec": {
        "minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}}}, "default")
    drained = twin.kubectl("drain", "gpu-0", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=20s")
    assert "pod/train-0 evicted" in drained.stdout and "node/gpu-0 drained" in drained.stdout
    blocked = twin.kubectl("drain", "gpu-1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=2s",
                           check=False)
    assert blocked.returncode != 0
    assert "Cannot evict pod as it would violate the pod's disruption budget." in blocked.stderr
    assert twin.store.get("pods", "train-1", "default")["status"]["phase"] == "Running"
    assert twin.store.get("nodes", "gpu-1")["spec"]["unschedulable"] is True


def test_server_dry_run_drain_delete_and_scale_change_nothing(twin):
    twin.replica_set_with_pods("train", ["gpu-0", "gpu-1"])
    drained = twin.kubectl("drain", "gpu-0", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=20s",
                           "--dry-run=server")
    assert "evicting pod default/train-0 (server dry run)" in drained.stdout
    twin.kubectl("delete", "pod", "train-1", "--dry-run=server")
    twin.kubectl("scale", "replicaset/train", "--replicas=0", "--dry-run=server")
    assert twin.store.get("replicasets", "train", "default")["spec"]["replicas"] == 2
    for name in ("train-0", "train-1"):
        pod = twin.store.get("pods", name, "default")
        assert pod["status"]["phase"] == "Running" and "deletionTimestamp" not in pod["metadata"]
    assert not twin.store.get("nodes", "gpu-0")["spec"].get("unschedulable")


def test_get_watch_streams_a_cordon(twin):
    watcher = subprocess.Popen([KUBECTL, "get", "nodes", "--watch", "--request-timeout=4s"], env=twin.env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    twin.store.patch("nodes", "gpu-2", {"spec": {"unschedulable": True}}, "application/merge-patch+json")
    time.sleep(0.8)
    watcher.terminate()
    output, _ = watcher.communicate(timeout=10)
    assert [line.split()[:2] for line in output.strip().splitlines()[-1:]] == [["gpu-2", "Ready,SchedulingDisabled"]]


def test_logs_come_from_the_pod_log_provider(twin):
    twin.replica_set_with_pods("smi", ["gpu-0"])
    assert twin.kubectl("logs", "smi-0").stdout == "GPU 0: NVIDIA H100 80GB HBM3\n"


def test_wrong_token_is_unauthorized(twin, tmp_path):
    bad = write_kubeconfig(str(tmp_path / "bad"), twin.server.url, twin.server.ca_pem, "not-the-token")
    result = twin.kubectl("--kubeconfig", bad, "get", "nodes", check=False)
    assert result.returncode != 0 and "You must be logged in to the server" in result.stderr


def test_protobuf_bodies_of_namespace_configmap_secret_and_pod_are_decoded(twin):
    """kubectl >= 1.32 sends built-in kinds as protobuf: maps, bytes, lists and nested messages must survive."""
    twin.kubectl("create", "namespace", "jobs")
    twin.kubectl("create", "configmap", "cfg", "-n", "jobs", "--from-literal=a=1", "--from-literal=b=two")
    twin.kubectl("create", "secret", "generic", "token", "-n", "jobs", "--from-literal=k=v")
    twin.kubectl("run", "smi", "-n", "jobs", "--image=nvcr.io/nvidia/cuda:12.4.1-base", "--restart=Never",
                 "--command", "--", "nvidia-smi", "-L")
    assert twin.store.get("configmaps", "cfg", "jobs")["data"] == {"a": "1", "b": "two"}
    assert twin.store.get("secrets", "token", "jobs")["data"] == {"k": "dg=="}
    pod = twin.store.get("pods", "smi", "jobs")
    assert pod["spec"]["containers"][0]["command"] == ["nvidia-smi", "-L"]
    assert pod["spec"]["restartPolicy"] == "Never" and "creationTimestamp" in pod["metadata"]


def test_wait_for_delete_returns_when_the_pod_is_gone(twin):
    twin.replica_set_with_pods("train", ["gpu-0"])
    threading.Timer(0.5, lambda: twin.store.delete("pods", "train-0", "default")).start()
    assert "pod/train-0 condition met" in twin.kubectl("wait", "--for=delete", "pod/train-0", "--timeout=10s").stdout
    assert twin.store.list("pods", "default")[0] == [], "kubectl returned only once the pod was gone"


def test_describe_node_lists_its_events(twin):
    node = twin.store.get("nodes", "gpu-0")
    twin.store.create("events", {"metadata": {"name": "gpu-0.xid79"}, "type": "Warning", "reason": "XidError",
                                 "message": "Xid 79: GPU has fallen off the bus", "count": 1,
                                 "involvedObject": {"kind": "Node", "name": "gpu-0", "uid": node["metadata"]["uid"]},
                                 "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z",
                                 "source": {"component": "gpulab"}}, "default")
    described = twin.kubectl("describe", "node", "gpu-0").stdout
    assert "XidError" in described and "GPU has fallen off the bus" in described
    events = _rows(twin.kubectl("get", "events").stdout)
    assert events[0][1:4] == ["Warning", "XidError", "node/gpu-0"]


def test_get_pdb_shows_allowed_disruptions(twin):
    twin.replica_set_with_pods("train", ["gpu-0", "gpu-1"])
    twin.kubectl("create", "pdb", "train", "--selector=app=train", "--max-unavailable=1")
    assert [row[:4] for row in _rows(twin.kubectl("get", "pdb").stdout)] == [["train", "N/A", "1", "1"]]


@pytest.mark.parametrize("binary", [KUBECTL] + OTHER_KUBECTLS, ids=lambda path: os.path.basename(path or "none"))
def test_the_runbook_commands_work_with_every_installed_kubectl(twin, binary, tmp_path):
    """One pass over every command of the issue with each kubectl version found on this machine."""
    twin.replica_set_with_pods("train", ["gpu-0", "gpu-1"])
    manifest = tmp_path / "gpu-stack.yaml"
    manifest.write_text(MANIFESTS)

    def run(*args):
        return twin.kubectl(*args, binary=binary).stdout

    assert "gpu-0" in run("get", "nodes") and "train-0" in run("get", "pods", "-A")
    assert "KubeletReady" in run("describe", "nodes", "gpu-0") and "ReplicaSet/train" in run("describe", "pod",
                                                                                             "train-0")
    run("label", "node", "gpu-2", "nvidia.com/gpu.deploy.driver=false")
    run("annotate", "node", "gpu-2", "gpuops.nvidia/phase=upgrade")
    run("cordon", "gpu-2")
    run("wait", "--for=jsonpath={.spec.unschedulable}=true", "node/gpu-2", "--timeout=10s")
    run("uncordon", "gpu-2")
    run("wait", "--for=condition=Ready", "node/gpu-2", "--timeout=10s")
    run("create", "deployment", "smi", "--image=nvcr.io/nvidia/cuda:12.4.1-base")
    run("create", "pdb", "train", "--selector=app=train", "--max-unavailable=1")
    run("apply", "-f", str(manifest))
    run("rollout", "restart", "deployment/smi")
    run("drain", "gpu-0", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=20s")
    run("delete", "pod", "train-1", "--timeout=20s")
    assert twin.store.get("nodes", "gpu-2")["metadata"]["labels"]["nvidia.com/gpu.deploy.driver"] == "false"
    assert twin.store.get("nodes", "gpu-0")["spec"]["unschedulable"] is True
    assert twin.store.list("pods", "default")[0] == []
    assert "kubectl.kubernetes.io/restartedAt" in twin.store.get("deployments", "smi", "default")[
        "spec"]["template"]["metadata"]["annotations"]


def test_node_whose_ready_condition_is_unknown_prints_not_ready_and_roles_come_from_labels(twin):
    node = twin.store.get("nodes", "gpu-1")
    node["status"]["conditions"] = [dict(READY, status="Unknown", reason="NodeStatusUnknown")]
    twin.store.update("nodes", node, subresource="status")
    twin.store.patch("nodes", "gpu-0", {"metadata": {"labels": {"node-role.kubernetes.io/gpu-worker": ""}}},
                     "application/merge-patch+json")
    rows = {row[0]: row for row in _rows(twin.kubectl("get", "nodes").stdout)}
    assert rows["gpu-1"][1] == "NotReady" and rows["gpu-0"][2] == "gpu-worker"


def test_logs_follow_streams_new_lines_until_the_pod_ends(twin):
    twin.replica_set_with_pods("plugin", ["gpu-0"])
    log = ["Loading NVML\n"]
    twin.store.pod_log_provider = lambda namespace, pod, container, params: "".join(log)

    def crash_later():
        time.sleep(0.6)
        log.append("Failed to initialize NVML: could not load NVML library\n")
        time.sleep(0.6)
        twin.store.patch("pods", "plugin-0", {"status": {"phase": "Failed"}}, "application/merge-patch+json",
                         "default", "status")

    threading.Thread(target=crash_later, daemon=True).start()
    followed = twin.kubectl("logs", "-f", "plugin-0", timeout=20).stdout
    assert followed == "Loading NVML\nFailed to initialize NVML: could not load NVML library\n"
