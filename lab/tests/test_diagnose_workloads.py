"""The diagnose runbook over a one-node twin (real ansible-playbook, SSH, HTTPS to the API twin) names a pod that
runs a CUDA image without a GPU limit in its workload findings, with the fix.
Case 2 of diagnose's workloads step against the API twin over HTTPS: a pod running the NGC PyTorch image with
no GPU limit and a pod setting NVIDIA_VISIBLE_DEVICES=all are named by gpuops.nvidia.gpu_workload_report, the pod
with a limit and the device plugin's own pod are not, and a node served by the device plugin and a
gpu.nvidia.com ResourceSlice both is named.
Case 5 through real `ansible` against a real `prometheus` on loopback: a pod whose
DCGM_FI_DEV_FB_USED climbs at every scrape is named by gpuops.nvidia.gpu_memory_leak_report, with the MPS limit as
its fix on an MPS node; a pod whose memory goes up and down (an allocator cache) and an idle pod are not.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import collections_path
from gpulab.testkit.lab import module_command
from prometheus_harness import PROMETHEUS, MetricsEndpoint, PrometheusServer, dcgm_labels

NO_PROMETHEUS = pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (Debian package prometheus)")

NODE = "gpu-node-01"


def pod_labels(gpu, pod):
    labels = dcgm_labels(NODE, gpu)
    labels.update({"namespace": "ml", "pod": pod, "container": "main"})
    return labels


def pod(name, image, limits=None, env=None, namespace="ml", node="gpu-node-1"):
    container = {"name": "main", "image": image, "resources": {"limits": limits or {}}, "env": env or []}
    return {"metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": node, "containers": [container]}, "status": {"phase": "Running"}}


def test_cuda_pods_without_a_gpu_limit_and_a_node_served_twice_are_named(tmp_path):
    pytest.importorskip("kubernetes")
    from gpulab.kube.api.kubeconfig import write_kubeconfig
    from gpulab.kube.api.server import ApiServer
    from gpulab.kube.api.store import Store

    store = Store()
    store.create("namespaces", {"metadata": {"name": "ml"}})
    for name in ("gpu-node-1", "gpu-node-2"):
        store.create("nodes", {"metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}}, "spec": {},
                               "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}})
    store.create("resourceslices", {"metadata": {"name": "gpu-node-2-gpu.nvidia.com-abcde"},
                                    "spec": {"driver": "gpu.nvidia.com", "nodeName": "gpu-node-2",
                                             "pool": {"name": "gpu-node-2", "generation": 1, "resourceSliceCount": 1},
                                             "devices": [{"name": "gpu-%d" % i} for i in range(8)]}})
    store.create("pods", pod("trainer-0", "nvcr.io/nvidia/pytorch:24.05-py3"))
    store.create("pods", pod("notebook", "quay.io/jupyter/scipy-notebook:2024-05-27",
                             env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]))
    store.create("pods", pod("vectoradd", "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                             limits={"nvidia.com/gpu": "1"}))
    store.create("pods", pod("nvidia-device-plugin-daemonset-x7k2p", "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
                             env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}], namespace="kube-system"))
    server = ApiServer(store, "127.0.0.1", 0, str(tmp_path / "ca")).start()
    try:
        kubeconfig = write_kubeconfig(str(tmp_path / "kubeconfig"), server.url, server.ca_pem, server.token)
        result = run_module("gpuops.nvidia.gpu_workload_report", kubeconfig=kubeconfig)
    finally:
        server.stop()
    assert result["rc"] == 0, result
    assert sorted((found["namespace"], found["pod"]) for found in result["pods"]) == [
        ("ml", "notebook"), ("ml", "trainer-0")]
    assert all(found["severity"] == "error" and "nvidia.com/gpu" in found["remedy"] for found in result["pods"])
    assert [(found["node"], found["dra_devices"]) for found in result["nodes"]] == [("gpu-node-2", 8)]
    assert result["api"]["lists"] == ["pods", "nodes", "resourceslices"]


WORKLOADS_TASK = "Show the workload findings (cases 2 and 5) with their fix"


def test_diagnose_names_a_cuda_pod_without_a_gpu_limit(tmp_path):
    ansible_runner = pytest.importorskip("ansible_runner")
    kubernetes = pytest.importorskip("kubernetes")
    from conftest import REPO_DIR, start_lab, stop_lab
    from gpulab.testkit.modules import kube_client

    lab = start_lab(str(tmp_path / "state"), "--nodes", "1", "--driver", "550.54.15", "--boot-delay", "0.3")
    try:
        core = kubernetes.client.CoreV1Api(kube_client(lab))
        core.create_namespaced_pod("default", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer-0"},
            "spec": {"nodeName": lab.node_names[0], "restartPolicy": "Never",
                     "containers": [{"name": "pytorch", "image": "nvcr.io/nvidia/pytorch:24.05-py3"}]}})
        (tmp_path / "run").mkdir()
        result = ansible_runner.run(
            private_data_dir=str(tmp_path / "run"), playbook=os.path.join(REPO_DIR, "playbooks", "diagnose.yml"),
            inventory=os.path.join(lab.state_dir, "inventory.yml"), quiet=True,
            envvars={"ANSIBLE_COLLECTIONS_PATH": collections_path() or "",
                     "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")})
        shown = [event["event_data"]["res"]["msg"] for event in result.events
                 if event.get("event") == "runner_on_ok" and event["event_data"].get("task") == WORKLOADS_TASK]
    finally:
        stop_lab(lab)
    assert result.rc == 0
    (msg,) = shown
    assert [line for line in msg["pods_without_gpu_limit"] if "default/trainer-0" in line], msg
    assert any("nvidia.com/gpu" in fix for fix in msg["fixes"])
    assert msg["vram_leaks"] == []


def run_module(name, timeout=120, **args) -> dict:
    argv, env = module_command(name, args)
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    assert "=> " in done.stdout, done.stdout + done.stderr
    result = json.loads(done.stdout[done.stdout.index("=> ") + 3:])
    result["rc"] = done.returncode
    return result


@NO_PROMETHEUS
def test_a_leaking_pod_is_named_and_the_others_are_not(tmp_path):
    endpoint = MetricsEndpoint()
    prometheus = None
    try:
        prometheus = PrometheusServer(str(tmp_path), [endpoint.address])
        leaker, cache, idle = pod_labels(0, "trainer-0"), pod_labels(1, "cache-0"), pod_labels(2, "idle-0")
        for step in range(16):  # one value a second, scraped every second
            endpoint.set("DCGM_FI_DEV_FB_USED", leaker, 20000 + 256 * step, "Framebuffer memory used (in MiB).")
            endpoint.set("DCGM_FI_DEV_FB_USED", cache, 20000 + 1024 * (step % 3), "Framebuffer memory used (in MiB).")
            endpoint.set("DCGM_FI_DEV_FB_USED", idle, 30000, "Framebuffer memory used (in MiB).")
            time.sleep(1)
        result = run_module("gpuops.nvidia.gpu_memory_leak_report", url=prometheus.url, window=60, step=1,
                            min_growth_mib=1024, sharing={NODE: "mps"})
    finally:
        if prometheus is not None:
            prometheus.stop()
        endpoint.close()
    assert result["rc"] == 0, result
    assert result["series"] == 3
    assert [(leak["pod"], leak["gpu"]) for leak in result["leaks"]] == [("trainer-0", "0")]
    (leak,) = result["leaks"]
    assert leak["growth_mib"] >= 2048 and leak["monotonic_share"] >= 0.8 and leak["sharing"] == "mps"
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" in leak["remedy"]
