"""`gpulab up --gpu-operator`: the GPU Operator's objects and behaviour as a runbook meets them, through kubectl
and ssh on one 3-node twin whose Operator timers run at 1/100 (`--operator-time-scale 0.01`: upgrade requeue
1.2 s, validation timeout 6 s, crash back-off 0.1 s doubling to 3 s).

The tests run in order on the module's lab, each leaving the fleet in the state the next one starts from:
boot on V1 -> autoUpgrade off, V2: only a deleted driver pod (or a reboot) brings V2 -> autoUpgrade on, V3,
skip on all but node 1: only node 1 walks the states -> operator-driver-fail on node 2: upgrade-failed after the
restart rule, recovered when the fault goes -> a GPU pod the pod deletion does not take on node 3: "driver is in
use".
"""
from __future__ import annotations

import json
import os
import re
import time

import pytest

from conftest import start_lab, stop_lab
from gates_helpers import KUBECTL, apply, eventually, get_json, kubectl

pytestmark = pytest.mark.skipif(not os.path.exists(KUBECTL), reason="kubectl is not installed")

# V1's modules are prebuilt by --gpu-operator, V2's because every lab writes its runfile; V3's are built by
# the driver containers (as a real driver container compiles them)
V1, V2, V3 = "550.54.15", "615.71.09", "570.86.15"
NODES = ("gpu-node-01", "gpu-node-02", "gpu-node-03")
NS = "gpu-operator"
STATE = "nvidia.com/gpu-driver-upgrade-state"
SKIP = "nvidia.com/gpu-driver-upgrade.skip"
NVIDIA_SMI = "/run/nvidia/driver/usr/bin/nvidia-smi"     # the driver container's root, as on a real node
UPGRADE_PATH = ["upgrade-required", "cordon-required", "wait-for-jobs-required", "pod-deletion-required",
                "pod-restart-required", "validation-required", "uncordon-required", "upgrade-done"]


@pytest.fixture(scope="module")
def oplab(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("oplab") / "state")
    lab = start_lab(state_dir, "--nodes", "3", "--gpu-operator", "--driver", V1, "--operator-time-scale", "0.01",
                    "--boot-delay", "0.5")
    yield lab
    stop_lab(lab)


def node(lab, name):
    return get_json(lab, "node", name)


def labels(lab, name):
    return node(lab, name)["metadata"].get("labels") or {}


def driver_pod(lab, name):
    pods = get_json(lab, "pods", "-n", NS, "-l", "app=nvidia-driver-daemonset",
                    "--field-selector", "spec.nodeName=%s" % name)["items"]
    live = [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")]
    return live[0] if live else None


def ready(pod) -> bool:
    return bool(pod) and any(c["type"] == "Ready" and c["status"] == "True"
                             for c in (pod.get("status") or {}).get("conditions") or [])


def loaded_version(lab, name):
    """The version the node's kernel has loaded (/proc/driver/nvidia/version), None when none is."""
    done = lab.ssh(name, "cat /proc/driver/nvidia/version", check=False)
    if done.returncode != 0:
        return None
    return re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", done.stdout).group(1)


def patch_policy(lab, driver_spec):
    kubectl(lab, "patch", "clusterpolicy", "cluster-policy", "--type", "merge", "-p",
            json.dumps({"spec": {"driver": driver_spec}}))


def state_changes(lab, name):
    """The node's upgrade-state changes in the order the controller made them (its Node events)."""
    events = get_json(lab, "events", "-n", "default", "--field-selector",
                      "involvedObject.name=%s,reason=GPUDriverUpgrade" % name)["items"]
    # firstTimestamp has second resolution; within a second the resourceVersion orders them, compared as a number
    # (as strings "1000" sorts before "999", which reordered the states when the counter gained a digit)
    events.sort(key=lambda event: (event["firstTimestamp"], len(event["metadata"]["resourceVersion"]),
                                   event["metadata"]["resourceVersion"]))
    return [event["message"].rsplit(" ", 1)[1] for event in events if "state label to" in event["message"]]


def wait_driver_ready(lab, name, version, timeout_s=120):
    eventually(lambda: ready(driver_pod(lab, name)) and loaded_version(lab, name) == version, timeout_s,
               "%s: driver pod Ready with %s loaded" % (name, version))


def test_up_gpu_operator_labels_policy_daemonset_and_loaded_driver(oplab):
    for name in NODES:
        wait_driver_ready(oplab, name, V1)
    policy = get_json(oplab, "clusterpolicy", "cluster-policy")
    driver = policy["spec"]["driver"]
    assert driver["enabled"] is True and driver["version"] == V1
    upgrade = driver["upgradePolicy"]
    assert (upgrade["autoUpgrade"], upgrade["maxParallelUpgrades"], upgrade["maxUnavailable"]) == (True, 1, "25%")
    assert upgrade["drain"]["enable"] is False and upgrade["podDeletion"]["timeoutSeconds"] == 300
    eventually(lambda: get_json(oplab, "clusterpolicy", "cluster-policy").get("status", {}).get("state") == "ready",
               60, "ClusterPolicy ready")
    assert kubectl(oplab, "get", "crd", "nvidiadrivers.nvidia.com").returncode == 0

    daemonset = get_json(oplab, "daemonset", "-n", NS, "nvidia-driver-daemonset")
    assert daemonset["spec"]["updateStrategy"] == {"type": "OnDelete"}
    template = daemonset["spec"]["template"]
    assert template["spec"]["nodeSelector"] == {"nvidia.com/gpu.deploy.driver": "true"}
    assert template["metadata"]["labels"]["app"] == "nvidia-driver-daemonset"
    revisions = get_json(oplab, "controllerrevisions", "-n", NS, "-l", "app=nvidia-driver-daemonset")["items"]
    assert len(revisions) == 1
    for name in NODES:
        node_labels = labels(oplab, name)
        assert node_labels["nvidia.com/gpu.present"] == "true"
        assert node_labels["nvidia.com/gpu.deploy.driver"] == "true"
        assert node_labels["nvidia.com/gpu.deploy.operator-validator"] == "true"
        assert node_labels["nvidia.com/gpu.deploy.device-plugin"] == "true"
        assert node(oplab, name)["metadata"]["annotations"]["nvidia.com/gpu-driver-upgrade-enabled"] == "true"
        assert driver_pod(oplab, name)["metadata"]["labels"]["controller-revision-hash"] == \
            revisions[0]["metadata"]["labels"]["controller-revision-hash"]
        eventually(lambda: labels(oplab, name).get("nvidia.com/cuda.driver-version.full") == V1, 30, "GFD label")
        eventually(lambda: labels(oplab, name).get(STATE) == "upgrade-done", 30, "upgrade-done at start")
        assert oplab.ssh(name, "%s --query-gpu=driver_version --format=csv,noheader" % NVIDIA_SMI).stdout \
            .split() == [V1] * 8
        assert "nvidia " in oplab.ssh(name, "lsmod").stdout
    validators = get_json(oplab, "pods", "-n", NS, "-l", "app=nvidia-operator-validator")["items"]
    eventually(lambda: all(ready(pod) for pod in get_json(oplab, "pods", "-n", NS, "-l",
                                                           "app=nvidia-operator-validator")["items"]), 30,
               "validators Ready")
    assert sorted(pod["spec"]["nodeName"] for pod in validators) == list(NODES)
    # a node boots without a host driver: its driver pod loads it again (after a reboot, from the newest revision)
    assert oplab.ssh("gpu-node-01", "test -e /lib/modules/$(uname -r)/kernel/drivers/video/nvidia.ko",
                     check=False).returncode != 0


def finished_pod(lab, name):
    return eventually(lambda: (lambda pod: pod if pod["status"].get("phase") in ("Succeeded", "Failed") else None)(
        get_json(lab, "pod", name)), 60, "pod %s finished" % name)


def test_a_gpu_pod_gets_nvidia_smi_from_the_driver_root_and_a_pod_without_gpus_does_not(oplab):
    name = "gpu-node-02"
    assert oplab.ssh(name, "command -v nvidia-smi", check=False).returncode != 0    # no host driver on the node
    query = "nvidia-smi --query-gpu=driver_version --format=csv,noheader"
    pods = {"gpu-smi": (["nvidia-smi", "-L"], {"limits": {"nvidia.com/gpu": 1}}, None),
            "gpu-shell": (["sh", "-c", "%s; echo $LD_LIBRARY_PATH" % query], {"limits": {"nvidia.com/gpu": 1}}, None),
            "runtime-class": (["sh", "-c", "%s | head -1" % query], {}, "nvidia"),
            "no-gpu": (["sh", "-c", "command -v nvidia-smi || echo none"], {}, None),
            "no-gpu-smi": (["nvidia-smi", "-L"], {}, None)}
    apply(oplab, [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": "default"},
                   "spec": dict({"nodeName": name, "restartPolicy": "Never",
                                 "containers": [{"name": "c", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                                                 "command": command, "resources": resources}]},
                                **({"runtimeClassName": runtime_class} if runtime_class else {}))}
                  for pod, (command, resources, runtime_class) in pods.items()])
    logs = {}
    for pod in pods:
        logs[pod] = (finished_pod(oplab, pod)["status"]["phase"], kubectl(oplab, "logs", pod).stdout)
    assert logs["gpu-smi"][0] == "Succeeded" and len(re.findall(r"^GPU \d+: .*\(UUID: GPU-", logs["gpu-smi"][1],
                                                                  re.M)) == 8, logs["gpu-smi"]
    assert logs["gpu-shell"] == ("Succeeded", "%s\n/run/nvidia/driver/usr/lib/x86_64-linux-gnu\n" % "\n".join([V1] * 8))
    assert logs["runtime-class"] == ("Succeeded", V1 + "\n")
    assert logs["no-gpu"] == ("Succeeded", "none\n")
    assert logs["no-gpu-smi"][0] == "Failed" and "nvidia-smi" in logs["no-gpu-smi"][1]
    kubectl(oplab, "delete", "pod", *pods, "--wait=false")


def test_auto_upgrade_off_changes_nothing_until_a_driver_pod_is_deleted(oplab):
    old_pods = {name: driver_pod(oplab, name)["metadata"]["uid"] for name in NODES}
    patch_policy(oplab, {"version": V2, "upgradePolicy": {"autoUpgrade": False}})
    eventually(lambda: len(get_json(oplab, "controllerrevisions", "-n", NS, "-l",
                                    "app=nvidia-driver-daemonset")["items"]) == 2, 30, "a second revision")
    eventually(lambda: all(STATE not in labels(oplab, name) for name in NODES), 30, "state labels removed")
    assert all("nvidia.com/gpu-driver-upgrade-enabled" not in node(oplab, name)["metadata"].get("annotations", {})
               for name in NODES)
    time.sleep(3)     # > two requeues of the (scaled) controller: nothing may happen on its own
    for name in NODES:
        assert driver_pod(oplab, name)["metadata"]["uid"] == old_pods[name]
        assert loaded_version(oplab, name) == V1
    # a GPU pod on the node: the new driver pod's k8s-driver-manager evicts it first (the node is not annotated
    # nvidia.com/gpu-driver-upgrade-enabled=true any more), so the old module can be unloaded
    apply(oplab, [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpu-job", "namespace": "default"},
                   "spec": {"nodeName": "gpu-node-01", "containers": [{
                       "name": "cuda", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                       "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}])
    eventually(lambda: get_json(oplab, "pod", "gpu-job")["status"].get("phase") == "Running", 30, "GPU pod")
    kubectl(oplab, "delete", "pod", "-n", NS, driver_pod(oplab, "gpu-node-01")["metadata"]["name"], "--wait=false")
    wait_driver_ready(oplab, "gpu-node-01", V2)
    assert kubectl(oplab, "get", "pod", "gpu-job", check=False).returncode != 0
    eventually(lambda: labels(oplab, "gpu-node-01").get("nvidia.com/cuda.driver-version.full") == V2, 30,
               "GFD label follows the new driver")
    assert oplab.ssh("gpu-node-01", "%s --query-gpu=driver_version --format=csv,noheader" % NVIDIA_SMI).stdout \
        .split()[0] == V2
    for name in NODES[1:]:
        assert driver_pod(oplab, name)["metadata"]["uid"] == old_pods[name]
        assert loaded_version(oplab, name) == V1
        assert labels(oplab, name)["nvidia.com/cuda.driver-version.full"] == V1
    # a reboot brings the node up without a driver; its pod comes back from the newest revision (#2509)
    oplab.reboot_from_inside("gpu-node-02")
    wait_driver_ready(oplab, "gpu-node-02", V2)
    assert driver_pod(oplab, "gpu-node-02")["metadata"]["uid"] != old_pods["gpu-node-02"]
    assert loaded_version(oplab, "gpu-node-03") == V1


def test_auto_upgrade_with_skip_labels_upgrades_only_the_node_without(oplab):
    for name in NODES[1:]:
        kubectl(oplab, "label", "node", name, "%s=true" % SKIP)
    patch_policy(oplab, {"version": V3, "upgradePolicy": {"autoUpgrade": True}})
    eventually(lambda: labels(oplab, "gpu-node-01").get(STATE) == "upgrade-done"
               and loaded_version(oplab, "gpu-node-01") == V3, 120, "gpu-node-01 upgraded to %s" % V3)
    changes = state_changes(oplab, "gpu-node-01")
    assert changes[-len(UPGRADE_PATH):] == UPGRADE_PATH, changes
    assert not node(oplab, "gpu-node-01")["spec"].get("unschedulable")
    for name, version in (("gpu-node-02", V2), ("gpu-node-03", V1)):
        assert labels(oplab, name).get(STATE) == "upgrade-required"
        assert loaded_version(oplab, name) == version
        assert not node(oplab, name)["spec"].get("unschedulable")


def test_a_failing_driver_build_ends_in_upgrade_failed_after_the_restart_rule(oplab):
    name = "gpu-node-02"
    oplab.gpulab("fault", name, "operator-driver-fail")
    kubectl(oplab, "label", "node", name, "%s-" % SKIP)
    eventually(lambda: labels(oplab, name).get(STATE) == "upgrade-failed", 180, "upgrade-failed")
    pod = driver_pod(oplab, name)
    assert pod["status"]["containerStatuses"][0]["restartCount"] > 10
    container = pod["status"]["containerStatuses"][0]
    # crash-looping: between back-offs the container runs (not Ready) again, so look at the last exit
    assert not container["ready"] and container["lastState"]["terminated"]["exitCode"] == 1
    log = kubectl(oplab, "logs", "-n", NS, pod["metadata"]["name"]).stdout
    assert "Could not compile NVIDIA driver kernel modules" in log
    assert node(oplab, name)["spec"]["unschedulable"] is True     # a failed node stays cordoned
    assert loaded_version(oplab, name) is None                     # the old module went, the new one never came
    assert labels(oplab, "gpu-node-03").get(STATE) == "upgrade-required"    # the failed node holds the one slot
    # recoverable: once the driver pod is Ready (the fault gone, its next restart builds), the node finishes
    oplab.gpulab("clear", name, "operator-driver-fail")
    eventually(lambda: labels(oplab, name).get(STATE) == "upgrade-done", 120, "recovered to upgrade-done")
    assert loaded_version(oplab, name) == V3 and not node(oplab, name)["spec"].get("unschedulable")


def test_driver_in_use_while_a_gpu_pod_the_pod_deletion_does_not_take_runs(oplab):
    name = "gpu-node-03"
    # a GPU consumer through the nvidia runtime class with no nvidia.com/gpu request (gpu-operator #2570): the
    # GPU-pod deletion does not match it, drain is disabled, yet it holds the kernel module
    apply(oplab, [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cuda-runtime-only", "namespace": "default"},
                   "spec": {"nodeName": name, "runtimeClassName": "nvidia",
                            "containers": [{"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}]}}])
    eventually(lambda: get_json(oplab, "pod", "cuda-runtime-only")["status"].get("phase") == "Running", 30, "GPU pod")
    kubectl(oplab, "label", "node", name, "%s-" % SKIP)
    eventually(lambda: labels(oplab, name).get(STATE) == "upgrade-failed", 180, "upgrade-failed")
    pod = driver_pod(oplab, name)
    assert pod["status"]["containerStatuses"][0]["restartCount"] > 10
    log = kubectl(oplab, "logs", "-n", NS, pod["metadata"]["name"]).stdout
    assert "Could not unload NVIDIA driver kernel modules, driver is in use" in log
    assert loaded_version(oplab, name) == V1                       # the old module stays loaded
    assert get_json(oplab, "pod", "cuda-runtime-only")["status"]["phase"] == "Running"
    kubectl(oplab, "delete", "pod", "cuda-runtime-only", "--wait=false")
    eventually(lambda: labels(oplab, name).get(STATE) == "upgrade-done", 120, "upgrade-done once the GPU pod went")
    assert loaded_version(oplab, name) == V3 and not node(oplab, name)["spec"].get("unschedulable")
