"""The cluster-side runbook steps and faults as an operator sees them: real `kubectl` against the twin's
HTTPS API (KubeCluster with FakeNodeViews, so no node twins are needed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest
import yaml

from gpulab.kube.sim.cluster import KubeCluster
from gpulab.kube.testing import FakeNodeView, make_gpus

KUBECTL = shutil.which("kubectl")
OLDEST_KUBECTL = "/usr/lib/google-cloud-sdk/bin/kubectl.1.27"
pytestmark = pytest.mark.skipif(KUBECTL is None or shutil.which("openssl") is None,
                                reason="needs kubectl and openssl on PATH")

WEB_WITH_PDB = [
    {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
     "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
              "template": {"metadata": {"labels": {"app": "web"}},
                           "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}},
    {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": "default"},
     "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}},
]


@pytest.fixture
def lab(tmp_path):
    views = [FakeNodeView("gpu-%d" % index, gpus=make_gpus(8)) for index in range(3)]
    cluster = KubeCluster(str(tmp_path), views, heartbeat_s=0.5, tick_s=0.05, crash_backoff_s=0.3,
                          container_start_s=0.5).start()
    cluster.views = views
    yield cluster
    cluster.stop()


def kubectl(lab, *args, stdin=None, check=True, binary=None, timeout=90):
    result = subprocess.run([binary or KUBECTL, "--kubeconfig", lab.kubeconfig_path] + list(args), input=stdin,
                            capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError("kubectl %s failed (%d):\n%s%s" % (" ".join(args), result.returncode, result.stdout,
                                                                result.stderr))
    return result


def jsonpath(lab, target, path, namespace=None):
    args = ["get"] + target.split() + ["-o", "jsonpath=" + path]
    if namespace:
        args[1:1] = ["-n", namespace]
    return kubectl(lab, *args).stdout


def eventually(check, timeout_s=20.0, what="condition"):
    deadline = time.time() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError("timed out waiting for %s (last: %r)" % (what, value))
        time.sleep(0.2)


def plugin_pod_name(lab, node):
    return jsonpath(lab, "pods", "{.items[?(@.spec.nodeName==\"%s\")].metadata.name}" % node, "kube-system").split()[0]


def put_three_web_pods_on_gpu_0(lab, binary=None):
    kubectl(lab, "cordon", "gpu-1", "gpu-2", binary=binary)
    kubectl(lab, "apply", "-f", "-", stdin=yaml.safe_dump_all(WEB_WITH_PDB))
    kubectl(lab, "rollout", "status", "deployment/web", "--timeout=30s", binary=binary)
    kubectl(lab, "uncordon", "gpu-1", "gpu-2", binary=binary)


@pytest.mark.parametrize("binary", [None, OLDEST_KUBECTL], ids=["kubectl-on-path", "kubectl-1.27"])
def test_kubectl_drain_waits_on_the_pdb_429_then_drains_once_replicas_run_elsewhere(lab, binary):
    if binary and not os.path.exists(binary):
        pytest.skip("%s not installed" % binary)
    put_three_web_pods_on_gpu_0(lab, binary)
    drain = kubectl(lab, "drain", "gpu-0", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s",
                    binary=binary)
    assert "Cannot evict pod as it would violate the pod's disruption budget." in drain.stderr
    assert "node/gpu-0 drained" in drain.stdout
    assert "ignoring DaemonSet-managed Pods: kube-system/nvidia-device-plugin-daemonset-" in drain.stderr
    nodes = jsonpath(lab, "pods -l app=web", "{.items[*].spec.nodeName}").split()
    assert len(nodes) == 3 and "gpu-0" not in nodes
    assert kubectl(lab, "get", "node", "gpu-0", binary=binary).stdout.split("\n")[1].split()[1] == \
        "Ready,SchedulingDisabled"
    kubectl(lab, "uncordon", "gpu-0", binary=binary)


def test_rollout_restart_of_the_device_plugin_daemonset_replaces_every_pod(lab):
    kubectl(lab, "rollout", "status", "daemonset/nvidia-device-plugin-daemonset", "-n", "kube-system",
            "--timeout=30s")
    before = set(jsonpath(lab, "pods", "{.items[*].metadata.name}", "kube-system").split())
    kubectl(lab, "rollout", "restart", "daemonset/nvidia-device-plugin-daemonset", "-n", "kube-system")
    kubectl(lab, "rollout", "status", "daemonset/nvidia-device-plugin-daemonset", "-n", "kube-system",
            "--timeout=60s")
    after = set(eventually(lambda: len(jsonpath(lab, "pods", "{.items[*].metadata.name}", "kube-system").split()) == 3
                           and jsonpath(lab, "pods", "{.items[*].metadata.name}", "kube-system").split(),
                           what="3 plugin pods"))
    assert not before & after


def test_gfd_labels_and_gpu_allocatable_as_kubectl_shows_them(lab):
    out = kubectl(lab, "get", "nodes", "-L", "nvidia.com/gpu.product,nvidia.com/cuda.driver-version.full").stdout
    assert "NVIDIA-H100-80GB-HBM3" in out and "550.54.15" in out
    kubectl(lab, "wait", "node/gpu-0", "--for=jsonpath={.status.allocatable.nvidia\\.com/gpu}=8", "--timeout=20s")
    kubectl(lab, "wait", "--for=condition=Ready", "node", "--all", "--timeout=20s")


def test_stale_device_plugin_seen_and_fixed_with_kubectl(lab):
    kubectl(lab, "wait", "node/gpu-1", "--for=jsonpath={.status.allocatable.nvidia\\.com/gpu}=8", "--timeout=20s")
    lab.apply_fault("gpu-1", "stale-device-plugin")
    eventually(lambda: jsonpath(lab, "node gpu-1", "{.status.allocatable.nvidia\\.com/gpu}") == "0",
               what="allocatable 0")
    assert jsonpath(lab, "node gpu-1", "{.status.capacity.nvidia\\.com/gpu}") == "8"
    kubectl(lab, "delete", "pod", "-n", "kube-system", plugin_pod_name(lab, "gpu-1"))
    kubectl(lab, "wait", "node/gpu-1", "--for=jsonpath={.status.allocatable.nvidia\\.com/gpu}=8", "--timeout=30s")


def test_device_plugin_crash_loop_and_its_log_seen_with_kubectl(lab):
    kubectl(lab, "wait", "node/gpu-2", "--for=jsonpath={.status.allocatable.nvidia\\.com/gpu}=8", "--timeout=20s")
    lab.apply_fault("gpu-2", "device-plugin-crash")
    name = plugin_pod_name(lab, "gpu-2")
    listing = eventually(lambda: (lambda out: "CrashLoopBackOff" in out and out)(
        kubectl(lab, "get", "pods", "-n", "kube-system", "-o", "wide").stdout), what="CrashLoopBackOff")
    row = next(line for line in listing.splitlines() if line.startswith(name))
    assert row.split()[1] == "0/1" and row.split()[2] == "CrashLoopBackOff"
    log = kubectl(lab, "logs", "-n", "kube-system", name).stdout
    assert "Failed to initialize NVML: could not load NVML library" in log
    assert jsonpath(lab, "node gpu-2", "{.status.allocatable.nvidia\\.com/gpu}") == "0"
    lab.clear_fault("gpu-2", "device-plugin-crash")
    kubectl(lab, "wait", "node/gpu-2", "--for=jsonpath={.status.allocatable.nvidia\\.com/gpu}=8", "--timeout=30s")


READY_STATUS = '{.status.conditions[?(@.type=="Ready")].status}'


def test_kubelet_down_leaves_ready_unknown_and_the_unreachable_taint_until_cleared(lab):
    lab.apply_fault("gpu-0", "kubelet-down")
    eventually(lambda: jsonpath(lab, "node gpu-0", READY_STATUS) == "Unknown", what="Ready Unknown")
    reason = jsonpath(lab, "node gpu-0", '{.status.conditions[?(@.type=="Ready")].message}')
    assert reason == "Kubelet stopped posting node status."
    eventually(lambda: "node.kubernetes.io/unreachable" in jsonpath(lab, "node gpu-0", "{.spec.taints[*].key}"),
               what="unreachable taint")
    lab.clear_fault("gpu-0", "kubelet-down")
    kubectl(lab, "wait", "--for=condition=Ready", "node/gpu-0", "--timeout=20s")


def test_kubectl_get_nodes_prints_not_ready_for_a_down_kubelet(lab):
    lab.apply_fault("gpu-0", "kubelet-down")
    eventually(lambda: jsonpath(lab, "node gpu-0", READY_STATUS) == "Unknown", what="Ready Unknown")
    assert kubectl(lab, "get", "node", "gpu-0", "--no-headers").stdout.split()[1] == "NotReady"


def test_pdb_block_fault_makes_kubectl_drain_time_out(lab):
    lab.apply_fault("gpu-1", "pdb-block")
    kubectl(lab, "rollout", "status", "deployment/pdb-block-gpu-1", "-n", "gpulab-faults", "--timeout=20s")
    drain = kubectl(lab, "drain", "gpu-1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=8s",
                    check=False)
    assert drain.returncode != 0
    assert "Cannot evict pod as it would violate the pod's disruption budget." in drain.stderr
    assert "global timeout reached: 8s" in drain.stderr


def test_nvidia_smi_pod_prints_the_nodes_gpus_in_kubectl_logs(lab):
    kubectl(lab, "run", "smi", "--image=nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", "--restart=Never",
            "--overrides", json.dumps({"spec": {"nodeName": "gpu-0"}}), "--command", "--", "nvidia-smi", "-L")
    kubectl(lab, "wait", "pod/smi", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=30s")
    assert kubectl(lab, "logs", "smi").stdout == lab.views[0].run(["nvidia-smi", "-L"])[1]


def test_kubelet_restart_seen_with_kubectl_plugin_re_registers_by_itself(lab):
    kubectl(lab, "wait", "node/gpu-0", "--for=jsonpath={.status.allocatable.nvidia\\.com/gpu}=8", "--timeout=20s")
    lab.apply_fault("gpu-0", "kubelet-restart")
    kubectl(lab, "wait", "node/gpu-0", "--for=jsonpath={.status.allocatable.nvidia\\.com/gpu}=8", "--timeout=20s")
    log = kubectl(lab, "logs", "-n", "kube-system", plugin_pod_name(lab, "gpu-0")).stdout
    assert "inotify: /var/lib/kubelet/device-plugins/kubelet.sock created, restarting." in log
    assert log.rstrip().endswith("Registered device plugin for 'nvidia.com/gpu' with Kubelet")


def test_checker_reads_the_records_of_a_kubectl_drain_and_cordons(lab):
    from gpulab.kube.sim import checker
    put_three_web_pods_on_gpu_0(lab)
    kubectl(lab, "drain", "gpu-0", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s")
    kubectl(lab, "cordon", "gpu-1")
    kubectl(lab, "uncordon", "gpu-0", "gpu-1")
    report = checker.check_state_dir(lab.state_dir, max_unavailable=2)
    assert report["evictions_admitted"] == 3, "each web pod evicted once through the API"
    assert report["pdb_violations"] == []
    # cordon gpu-1 and gpu-2 at setup, then gpu-0 drained while gpu-1 cordoned: 2 at once at most.
    assert report["max_unavailable_gpu_nodes"] == 2 and report["ok"] is True


def test_kubectl_lists_a_thousand_api_only_nodes(tmp_path, capsys):
    views = [FakeNodeView("gpu-%d" % index, gpus=make_gpus(8)) for index in range(2)]
    cluster = KubeCluster(str(tmp_path), views, api_only=1000, heartbeat_s=0.5, tick_s=0.05).start()
    try:
        started = time.time()
        rows = kubectl(cluster, "get", "nodes", "--no-headers").stdout.splitlines()
        table_s = time.time() - started
        started = time.time()
        names = kubectl(cluster, "get", "nodes", "-l", "gpulab.io/api-only=true", "-o", "name").stdout.split()
        selector_s = time.time() - started
        started = time.time()
        kubectl(cluster, "cordon", "api-gpu-0500")
        cordon_s = time.time() - started
    finally:
        cluster.stop()
    with capsys.disabled():
        print("\n[kubectl, 1002 nodes] get nodes %.2fs, label-selected -o name %.2fs, cordon %.2fs"
              % (table_s, selector_s, cordon_s))
    assert len(rows) == 1002 and all(row.split()[1] == "Ready" for row in rows)
    assert len(names) == 1000
