"""Each host-side fault is observed the way an operator would notice it on a real host."""
from __future__ import annotations

import json
import re
import time

import pytest

XID_LINE = re.compile(r"^\[ *\d+\.\d{6}\] NVRM: Xid \(PCI:0000:[0-9a-f]{2}:[0-9a-f]{2}\): (\d+), ")


def active_faults_inside(lab, node: str) -> list:
    return json.loads(lab.ssh(node, "cat /run/gpulab/faults.json").stdout)


def test_unknown_fault_is_refused_with_the_known_kinds(lab):
    done = lab.gpulab("fault", "gpu-node-01", "melt-down", check=False)
    assert done.returncode == 1
    assert "unknown fault 'melt-down'" in done.stderr and "reboot-hang" in done.stderr
    assert lab.gpulab("fault", "gpu-node-09", "ssh-drop", check=False).stderr.count("no node 'gpu-node-09'") == 1


def test_ssh_drop_refuses_connections_until_cleared_while_the_node_stays_up(lab):
    node = "gpu-node-01"
    boot_id = lab.node_status(node)["boot_id"]
    lab.gpulab("fault", node, "ssh-drop")
    try:
        done = lab.ssh(node, "true", check=False)
        assert done.returncode == 255 and "refused" in done.stderr
        status = lab.node_status(node)
        assert status["status"] == "up" and not status["ssh"] and status["boot_id"] == boot_id
    finally:
        lab.gpulab("clear", node, "ssh-drop")
    assert lab.ssh(node, "cat /proc/sys/kernel/random/boot_id").stdout.strip() == boot_id


def test_disk_full_makes_writes_to_the_node_disk_fail_with_enospc(lab):
    node = "gpu-node-01"
    lab.gpulab("fault", node, "disk-full")
    try:
        done = lab.ssh(node, "echo data > /var/tmp/disk-full-probe", check=False)
        assert done.returncode != 0 and "No space left on device" in done.stderr
        assert "100%" in lab.ssh(node, "df --output=pcent /").stdout
    finally:
        lab.gpulab("clear", node, "disk-full")
    lab.ssh(node, "echo data > /var/tmp/disk-full-probe && rm /var/tmp/disk-full-probe")


def test_xid_fault_appends_a_real_format_nvrm_line_to_the_kernel_log(lab):
    node = "gpu-node-01"
    lab.gpulab("fault", node, "xid:48:1")
    try:
        last = [line for line in lab.ssh(node, "dmesg").stdout.splitlines() if "Xid" in line][-1]
        match = XID_LINE.match(last)
        assert match and match.group(1) == "48", last
        assert "double bit error" in last
        hw = json.loads(lab.ssh(node, "cat /run/gpulab/hw.json").stdout)
        if hw["gpus"]:
            assert "PCI:%s" % hw["gpus"][1]["pci_address"].rsplit(".", 1)[0] in last
    finally:
        lab.gpulab("clear", node, "xid:48:1")


def test_xid_79_takes_the_gpu_off_the_bus_until_cleared(lab):
    node = "gpu-node-01"
    lab.gpulab("fault", node, "xid:79")
    try:
        xid_lines = [line for line in lab.ssh(node, "dmesg").stdout.splitlines() if "Xid" in line]
        assert XID_LINE.match(xid_lines[-1]).group(1) == "79" and "fallen off the bus" in xid_lines[-1]
        hw = json.loads(lab.ssh(node, "cat /run/gpulab/hw.json").stdout)
        if hw["gpus"]:
            assert hw["gpus"][0]["on_bus"] is False
            assert all(gpu["on_bus"] for gpu in hw["gpus"][1:])
            pci = lab.ssh(node, "ls /sys/bus/pci/devices").stdout.split()
            assert hw["gpus"][0]["pci_address"] not in pci and hw["gpus"][1]["pci_address"] in pci
    finally:
        lab.gpulab("clear", node, "xid:79")
    hw = json.loads(lab.ssh(node, "cat /run/gpulab/hw.json").stdout)
    assert all(gpu["on_bus"] for gpu in hw["gpus"])
    pci = lab.ssh(node, "ls /sys/bus/pci/devices").stdout.split()
    assert all(gpu["pci_address"] in pci for gpu in hw["gpus"])


def test_xid_on_a_gpu_the_node_does_not_have_is_refused(lab):
    hw = json.loads(lab.ssh("gpu-node-01", "cat /run/gpulab/hw.json").stdout)
    if not hw["gpus"]:
        pytest.skip("profile without GPUs until the NVIDIA layer provides profiles.make_hw")
    done = lab.gpulab("fault", "gpu-node-01", "xid:79:%d" % len(hw["gpus"]), check=False)
    assert done.returncode == 1 and "no GPU index" in done.stderr


@pytest.mark.parametrize("kind", ["dkms-fail", "driver-mismatch"])
def test_nvidia_side_faults_are_published_inside_the_node_for_its_tools(lab, kind):
    node = "gpu-node-02"
    lab.gpulab("fault", node, kind)
    assert kind in active_faults_inside(lab, node)
    assert kind in lab.node_status(node)["faults"]
    lab.gpulab("clear", node, kind)
    assert kind not in active_faults_inside(lab, node)


def test_reboot_hang_keeps_the_node_down_until_cleared(lab):
    node = "gpu-node-02"
    lab.gpulab("fault", node, "reboot-hang")
    since = time.time()
    lab.ssh(node, "reboot")
    lab.wait_status(node, "hung")
    time.sleep(1.5)  # three boot delays: still not back
    assert lab.node_status(node)["status"] == "hung"
    assert lab.ssh(node, "true", check=False).returncode == 255
    lab.gpulab("clear", node, "reboot-hang")
    lab.wait_status(node, "up")
    lab.wait_event(node, "up", since)   # the node's status is saved a moment before its event is written
    kinds = [event["kind"] for event in lab.events(node=node, since=since)]
    assert kinds.index("hung") < kinds.index("clear") < kinds.index("up")


def test_slow_boot_multiplies_the_boot_delay_by_ten(lab):
    node = "gpu-node-02"
    lab.gpulab("fault", node, "slow-boot")
    try:
        since = time.time()
        lab.ssh(node, "reboot")
        down = lab.wait_event(node, "down", since)
        booting = lab.wait_event(node, "booting", since, timeout_s=30)
        lab.wait_status(node, "up")
    finally:
        lab.gpulab("clear", node, "slow-boot")
    assert booting["ts"] - down["ts"] >= 10 * 0.5 - 0.1


def test_secure_boot_no_key_turns_secure_boot_on_and_empties_the_mok_list_at_next_boot(lab):
    node = "gpu-node-03"
    lab.gpulab("fault", node, "secure-boot-no-key")
    try:
        before = json.loads(lab.ssh(node, "cat /run/gpulab-firmware/efi.json").stdout)
        assert before["secure_boot"] is False  # takes effect at the next boot, as a firmware reset does
        lab.reboot_from_inside(node)
        after = json.loads(lab.ssh(node, "cat /run/gpulab-firmware/efi.json").stdout)
        assert after["secure_boot"] is True and after["enrolled"] == []
        boot = json.loads(lab.ssh(node, "cat /run/gpulab/boot.json").stdout)
        assert "secure-boot-no-key" in boot["faults"]
        assert "Secure boot enabled" in lab.ssh(node, "dmesg").stdout
        assert lab.ssh(node, "mokutil --sb-state").stdout.strip() == "SecureBoot enabled"
    finally:
        lab.gpulab("clear", node, "secure-boot-no-key")
    restored = json.loads(lab.ssh(node, "cat /run/gpulab-firmware/efi.json").stdout)
    assert restored["secure_boot"] is False


def test_every_fault_and_clear_is_in_the_event_log(lab):
    since = time.time()
    lab.gpulab("fault", "gpu-node-01", "dkms-fail")
    lab.gpulab("clear", "gpu-node-01")
    events = lab.events(node="gpu-node-01", since=since)
    assert [(e["kind"], e["fault"]) for e in events] == [("fault", "dkms-fail"), ("clear", "dkms-fail")]


def test_staged_mok_key_nobody_confirms_is_dropped_when_mokmanager_times_out(lab):
    node = "gpu-node-01"
    lab.ssh(node, "openssl req -new -x509 -newkey rsa:2048 -nodes -days 30 -subj '/CN=unconfirmed key/' "
                  "-keyout /root/unconfirmed.priv -outform DER -out /root/unconfirmed.der 2>/dev/null && "
                  "mokutil --import /root/unconfirmed.der --root-pw")
    assert "unconfirmed key" in lab.ssh(node, "mokutil --list-new").stdout
    since = time.time()
    lab.reboot_from_inside(node)
    kinds = [event["kind"] for event in lab.events(node=node, since=since)]
    assert kinds.index("mok-manager-waiting") < kinds.index("mok-timeout") < kinds.index("up")
    assert "mok-enrolled" not in kinds
    assert "unconfirmed key" not in lab.ssh(node, "mokutil --list-new", check=False).stdout
    assert "unconfirmed key" not in lab.ssh(node, "mokutil --list-enrolled", check=False).stdout


def test_mok_confirm_without_a_staged_key_is_refused(lab):
    done = lab.gpulab("mok-confirm", "gpu-node-02", check=False)
    assert done.returncode == 1 and "no MOK key staged" in done.stderr


def test_cluster_faults_are_forwarded_to_the_kubernetes_twin_and_listed_with_the_node(lab):
    import os
    import subprocess
    kubeconfig = os.path.join(lab.state_dir, "kubeconfig")
    if not (lab.info.get("kube") or {}).get("api_url"):
        pytest.skip("no Kubernetes twin in this lab")

    def ready() -> str:
        return subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "get", "node", "gpu-node-02", "-o",
                               "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"],
                              capture_output=True, text=True, timeout=30).stdout

    def wait_ready(value: str) -> None:
        deadline = time.monotonic() + 30
        while ready() != value and time.monotonic() < deadline:
            time.sleep(0.5)
        assert ready() == value

    lab.gpulab("fault", "gpu-node-02", "kubelet-down")
    try:
        assert "kubelet-down" in lab.node_status("gpu-node-02")["faults"]
        wait_ready("Unknown")
    finally:
        cleared = lab.gpulab("clear", "gpu-node-02").stdout
    assert "kubelet-down" in cleared and "kubelet-down" not in lab.node_status("gpu-node-02")["faults"]
    wait_ready("True")
