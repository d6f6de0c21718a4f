"""`gpulab fault NODE KIND --at-next-boot`: nothing changes now; the fault takes effect when the node next boots
(the stale device-plugin ledger appears after the reboot, as after a real driver upgrade), with events for the
arming and the effect; `clear` disarms; kinds that already act at boot, or that a boot cannot bring, are
refused."""
from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from conftest import start_lab, stop_lab

ALLOCATABLE = "{.status.allocatable.nvidia\\.com/gpu}"
CAPACITY = "{.status.capacity.nvidia\\.com/gpu}"


@pytest.fixture(scope="module")
def armed_lab(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("armlab") / "state")
    lab = start_lab(state_dir, "--nodes", "2", "--driver", "595.91.07", "--boot-delay", "0.5")
    yield lab
    stop_lab(lab)


def kubectl(lab, *args, check=True):
    return subprocess.run(["kubectl", "--kubeconfig", os.path.join(lab.state_dir, "kubeconfig")] + list(args),
                          capture_output=True, text=True, timeout=60, check=check)


def jsonpath(lab, node: str, path: str) -> str:
    return kubectl(lab, "get", "node", node, "-o", "jsonpath=" + path).stdout


def wait_allocatable(lab, node: str, value: str, timeout_s: int = 40) -> None:
    kubectl(lab, "wait", "node/" + node, "--for=jsonpath=%s=%s" % (ALLOCATABLE, value), "--timeout=%ds" % timeout_s)


def plugin_pod(lab, node: str) -> str:
    pods = json.loads(kubectl(lab, "get", "pods", "-n", "kube-system", "-l", "name=nvidia-device-plugin-ds",
                              "--field-selector", "spec.nodeName=" + node, "-o", "json").stdout)["items"]
    return pods[0]["metadata"]["name"]


def armed(lab, node: str) -> list:
    return lab.node_status(node)["armed_faults"]


def test_stale_device_plugin_armed_appears_only_after_the_reboot(armed_lab):
    lab = armed_lab
    wait_allocatable(lab, "gpu-node-01", "8")
    since = time.time()
    out = lab.gpulab("fault", "gpu-node-01", "stale-device-plugin", "--at-next-boot").stdout
    assert "takes effect when the node next boots" in out
    assert armed(lab, "gpu-node-01") == ["stale-device-plugin"]
    assert "stale-device-plugin@next-boot" in lab.gpulab("status").stdout
    assert lab.events(node="gpu-node-01", kind="fault-armed", since=since)[0]["fault"] == "stale-device-plugin"
    time.sleep(2)
    assert jsonpath(lab, "gpu-node-01", ALLOCATABLE) == "8"   # nothing happens before the boot
    lab.reboot_from_inside("gpu-node-01")
    effect = lab.wait_event("gpu-node-01", "fault", since, timeout_s=40)
    assert effect["fault"] == "stale-device-plugin" and effect["at"] == "boot" and effect["scope"] == "cluster"
    assert effect["ts"] > lab.events(node="gpu-node-01", kind="up", since=since)[0]["ts"]
    wait_allocatable(lab, "gpu-node-01", "0")
    assert jsonpath(lab, "gpu-node-01", CAPACITY) == "8"
    time.sleep(3)   # the ledger stays stale: the running plugin does not register again by itself
    assert jsonpath(lab, "gpu-node-01", ALLOCATABLE) == "0"
    assert armed(lab, "gpu-node-01") == [] and "stale-device-plugin" in lab.node_status("gpu-node-01")["faults"]
    # the remedy (what device_plugin_restart does): the plugin pod is recreated and registers
    kubectl(lab, "delete", "pod", "-n", "kube-system", plugin_pod(lab, "gpu-node-01"))
    wait_allocatable(lab, "gpu-node-01", "8")
    lab.gpulab("clear", "gpu-node-01", "stale-device-plugin")


def test_node_fault_armed_acts_as_the_node_comes_up(armed_lab):
    lab = armed_lab
    since = time.time()
    lab.gpulab("fault", "gpu-node-02", "xid:79:1", "--at-next-boot")
    assert lab.ssh("gpu-node-02", "nvidia-smi -L | wc -l").stdout.strip() == "8"
    lab.reboot_from_inside("gpu-node-02")
    effect = lab.events(node="gpu-node-02", kind="fault", since=since)[0]
    assert effect["fault"] == "xid:79:1" and effect["at"] == "boot"
    assert lab.ssh("gpu-node-02", "dmesg | grep -c 'NVRM: Xid.*: 79,'").stdout.strip() == "1"
    assert lab.ssh("gpu-node-02", "nvidia-smi -L | grep -c '^GPU'", check=False).stdout.strip() == "7"
    lab.gpulab("clear", "gpu-node-02", "xid:79:1")


def test_clear_disarms_and_a_reboot_then_changes_nothing(armed_lab):
    lab = armed_lab
    since = time.time()
    lab.gpulab("fault", "gpu-node-02", "ssh-drop", "--at-next-boot")
    lab.gpulab("fault", "gpu-node-02", "device-plugin-crash", "--at-next-boot")
    assert sorted(armed(lab, "gpu-node-02")) == ["device-plugin-crash", "ssh-drop"]
    out = lab.gpulab("clear", "gpu-node-02").stdout
    assert "ssh-drop (armed)" in out and "device-plugin-crash (armed)" in out
    assert armed(lab, "gpu-node-02") == []
    assert {event["fault"] for event in lab.events(node="gpu-node-02", kind="fault-disarmed", since=since)} == \
        {"ssh-drop", "device-plugin-crash"}
    lab.reboot_from_inside("gpu-node-02")   # sshd answers: ssh-drop was disarmed
    wait_allocatable(lab, "gpu-node-02", "8")
    assert lab.node_status("gpu-node-02")["faults"] == []


@pytest.mark.parametrize("kind,message", [
    ("dkms-fail", "already takes effect at the next boot"),
    ("pdb-block", "cannot be armed for the next boot"),
    ("kubelet-restart", "cannot be armed for the next boot"),
    ("xid:abc", "expected xid:CODE"),
])
def test_refused_kinds(armed_lab, kind, message):
    done = armed_lab.gpulab("fault", "gpu-node-01", kind, "--at-next-boot", check=False)
    assert done.returncode == 1 and message in done.stderr, done.stderr
    assert armed(armed_lab, "gpu-node-01") == []
