"""An operator's driver install on a Secure Boot node, end to end through reboots, MokManager and the facts module.

One fresh 1-node lab with Secure Boot on: blacklist nouveau and reboot; install the runfile driver signed with
a new MOK key and reboot (the kernel rejects the module: key not enrolled); stage the key with
``mokutil --import``, reboot, confirm at the console while MokManager waits (``gpulab mok-confirm``): the
module loads. What the operator sees at each step is recorded once and asserted by the tests below;
``nvidia_driver_facts`` runs on the node at the rejected and at the loaded step.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import time

import pytest

from conftest import collections_path, start_lab, stop_lab

NODE = "gpu-node-01"
DRIVER = "615.71.09"
RUNFILE = "/root/NVIDIA-Linux-x86_64-%s.run" % DRIVER
MOK_SUBJECT = "gpulab operator signing key"


def observe(lab) -> dict:
    """What an operator checks on the node, plus the module's facts."""
    return {
        "smi": lab.ssh(NODE, "nvidia-smi", check=False),
        "dmesg": lab.ssh(NODE, "dmesg").stdout,
        "lsmod": lab.ssh(NODE, "lsmod").stdout,
        "proc_version": lab.ssh(NODE, "cat /proc/driver/nvidia/version", check=False),
        "modinfo": lab.ssh(NODE, "modinfo nvidia", check=False).stdout,
        "sb_state": lab.ssh(NODE, "mokutil --sb-state", check=False).stdout.strip(),
        "enrolled": lab.ssh(NODE, "mokutil --list-enrolled", check=False).stdout,
        "facts": driver_facts(lab),
        "status": lab.node_status(NODE),
    }


def driver_facts(lab):
    path = collections_path()
    if path is None:
        return None
    done = lab.ansible(NODE, "gpuops.nvidia.nvidia_driver_facts", env={"ANSIBLE_COLLECTIONS_PATH": path})
    # ad-hoc output: "gpu-node-01 | SUCCESS => {json}"
    result = json.loads(done.stdout.split("=>", 1)[1])
    return result["ansible_facts"]["nvidia_driver"]


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("sb") / "state")
    lab = start_lab(state_dir, "--nodes", "1", "--secure-boot", "--boot-delay", "0.3", "--mok-timeout", "30")
    steps = {}
    try:
        steps["fresh"] = {"lsmod": lab.ssh(NODE, "lsmod").stdout, "sb_state": lab.ssh(NODE, "mokutil --sb-state").stdout}
        lab.ssh(NODE, "printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' > /etc/modprobe.d/blacklist-nouveau.conf")
        lab.reboot_from_inside(NODE)
        lab.ssh(NODE, "openssl req -new -x509 -newkey rsa:2048 -nodes -days 3650 -subj '/CN=%s/' "
                      "-keyout /root/MOK.priv -outform DER -out /root/MOK.der 2>/dev/null" % MOK_SUBJECT)
        subprocess_copy(lab, os.path.join(state_dir, "runfiles", os.path.basename(RUNFILE)), RUNFILE)
        steps["install"] = lab.ssh(NODE, "sh %s --silent --module-signing-secret-key=/root/MOK.priv "
                                         "--module-signing-public-key=/root/MOK.der" % RUNFILE, check=False)
        lab.reboot_from_inside(NODE)
        steps["rejected"] = observe(lab)
        lab.ssh(NODE, "mokutil --import /root/MOK.der --root-pw")
        steps["staged"] = lab.ssh(NODE, "mokutil --list-new").stdout
        since = time.time()
        lab.ssh(NODE, "reboot")
        lab.wait_status(NODE, "mok-manager")
        steps["confirm"] = lab.gpulab("mok-confirm", NODE).stdout
        lab.wait_event(NODE, "up", since)
        lab.wait_status(NODE, "up")
        steps["loaded"] = observe(lab)
        steps["events"] = lab.events(node=NODE, since=since)
        steps["mok_der"] = lab.ssh(NODE, "base64 -w0 /root/MOK.der").stdout.strip()
        yield steps
    finally:
        stop_lab(lab)


def subprocess_copy(lab, source: str, target: str, node: str = NODE) -> None:
    import subprocess
    subprocess.run(["scp", "-q", "-F", os.path.join(lab.state_dir, "ssh_config"), source, "%s:%s" % (node, target)],
                   check=True, timeout=60)


def test_fresh_secure_boot_node_runs_nouveau_and_reports_secure_boot(flow):
    assert "nouveau" in flow["fresh"]["lsmod"]
    assert flow["fresh"]["sb_state"].strip() == "SecureBoot enabled"


def test_runfile_installs_on_a_node_without_nouveau(flow):
    assert flow["install"].returncode == 0, flow["install"].stdout + flow["install"].stderr


def test_module_signed_by_a_key_not_enrolled_is_rejected_and_the_kernel_log_says_why(flow):
    seen = flow["rejected"]
    assert "Loading of module with unavailable key is rejected" in seen["dmesg"]
    assert "nvidia " not in seen["lsmod"]
    assert seen["smi"].returncode != 0 and "couldn't communicate with the NVIDIA driver" in seen["smi"].stdout
    assert seen["proc_version"].returncode != 0
    assert "signer:" in seen["modinfo"] and MOK_SUBJECT in seen["modinfo"]
    assert seen["status"]["module_loaded"] is False


def test_staged_key_is_listed_until_the_console_confirms_it(flow):
    assert MOK_SUBJECT in flow["staged"]
    assert "confirmed in MokManager" in flow["confirm"]
    kinds = [event["kind"] for event in flow["events"]]
    assert kinds.index("mok-manager-waiting") < kinds.index("mok-confirm") < kinds.index("mok-enrolled") \
        < kinds.index("up")


def test_after_enrolment_the_module_loads_and_nvidia_smi_talks_to_it(flow):
    seen = flow["loaded"]
    assert seen["smi"].returncode == 0 and "Driver Version: %s" % DRIVER in seen["smi"].stdout
    assert DRIVER in seen["proc_version"].stdout
    assert seen["lsmod"].splitlines()[1:] and any(line.split()[0] == "nvidia" for line in seen["lsmod"].splitlines()[1:])
    assert MOK_SUBJECT in seen["enrolled"]
    assert seen["status"]["module_loaded"] is True and seen["status"]["kernel_driver_version"] == DRIVER


def test_facts_module_reads_the_rejected_module_as_on_a_real_host(flow):
    facts = flow["rejected"]["facts"]
    if facts is None:
        pytest.skip("no ansible_collections/gpuops/nvidia with nvidia_driver_facts found")
    assert facts["secure_boot"]["enabled"] is True
    assert facts["kernel_module"]["loaded"] is False
    assert facts["mok"]["enrolled"] == []
    assert len(facts["pci_devices"]) == 8 and all(dev["vendor_id"] == "0x10de" for dev in facts["pci_devices"])
    assert facts["userspace"]["nvml_ok"] is False and facts["gpu_count"] == 0
    assert any(entry["layer"] == 1 for entry in facts["diagnosis"])


def test_facts_module_reads_the_loaded_driver_as_on_a_real_host(flow):
    facts = flow["loaded"]["facts"]
    if facts is None:
        pytest.skip("no ansible_collections/gpuops/nvidia with nvidia_driver_facts found")
    der = base64.b64decode(flow["mok_der"])
    assert facts["kernel_module"]["loaded"] is True and facts["kernel_module"]["version"] == DRIVER
    assert facts["userspace"]["driver_version"] == DRIVER and facts["userspace"]["nvml_ok"] is True
    assert facts["version_mismatch"] is False
    assert facts["gpu_count"] == 8 and facts["gpus"][0]["memory_total_mib"] == 81559
    assert {dev["driver"] for dev in facts["pci_devices"]} == {"nvidia"}
    assert [key["fingerprint"] for key in facts["mok"]["enrolled"]] == [hashlib.sha1(der).hexdigest()]
    assert any(node["path"] == "/dev/nvidia0" and node["major"] == 195 for node in facts["device_nodes"])


@pytest.fixture(scope="module")
def preinstalled(tmp_path_factory):
    """Nodes that came up with `up --driver` (driver on their disk before the first boot)."""
    state_dir = str(tmp_path_factory.mktemp("drv") / "state")
    lab = start_lab(state_dir, "--nodes", "2", "--driver", DRIVER, "--boot-delay", "0.3")
    yield lab
    stop_lab(lab)


def kube_allocatable_gpus(lab, timeout_s: float = 20):
    import subprocess
    kubeconfig = os.path.join(lab.state_dir, "kubeconfig")
    if not os.path.exists(kubeconfig):
        return None
    deadline = time.monotonic() + timeout_s
    value = ""
    while time.monotonic() < deadline:
        value = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "get", "node", NODE, "-o",
                                "jsonpath={.status.allocatable.nvidia\\.com/gpu}"],
                               capture_output=True, text=True, timeout=30).stdout
        if value not in ("", "0"):
            break
        time.sleep(0.5)
    return value


def test_up_with_driver_boots_the_node_with_the_module_loaded(preinstalled):
    smi = preinstalled.ssh(NODE, "nvidia-smi -L").stdout.splitlines()
    assert len(smi) == 8 and smi[0].startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")
    assert DRIVER in preinstalled.ssh(NODE, "cat /proc/driver/nvidia/version").stdout
    status = preinstalled.node_status(NODE)
    assert status["module_loaded"] is True and status["kernel_driver_version"] == DRIVER
    assert status["boots"] == 1


def test_kubernetes_twin_sees_the_gpus_of_the_loaded_driver(preinstalled):
    allocatable = kube_allocatable_gpus(preinstalled)
    if allocatable is None:
        pytest.skip("no Kubernetes twin in this lab")
    assert allocatable == "8"


def test_driver_mismatch_fault_makes_nvml_report_the_mismatch_until_cleared_and_rebooted(preinstalled):
    lab = preinstalled
    lab.gpulab("fault", NODE, "driver-mismatch")
    try:
        lab.reboot_from_inside(NODE)
        smi = lab.ssh(NODE, "nvidia-smi", check=False)
        assert smi.returncode != 0 and "Failed to initialize NVML: Driver/library version mismatch" in smi.stdout
        assert DRIVER not in lab.ssh(NODE, "cat /proc/driver/nvidia/version").stdout.splitlines()[0]
    finally:
        lab.gpulab("clear", NODE, "driver-mismatch")
    lab.reboot_from_inside(NODE)
    assert lab.ssh(NODE, "nvidia-smi", check=False).returncode == 0


def test_xid_79_gpu_is_lost_to_nvml_and_pci_until_cleared(preinstalled):
    lab = preinstalled
    lab.gpulab("fault", NODE, "xid:79:2")
    try:
        smi = lab.ssh(NODE, "nvidia-smi -L", check=False)
        assert smi.returncode != 0 and "GPU is lost" in smi.stdout
        assert "GPU 2:" not in smi.stdout and "GPU 3:" in smi.stdout
        assert "0000:3a:00.0" not in lab.ssh(NODE, "ls /sys/bus/pci/devices").stdout
    finally:
        lab.gpulab("clear", NODE, "xid:79:2")
    assert lab.ssh(NODE, "nvidia-smi -L").stdout.count("GPU ") == 8


def test_dkms_fail_leaves_the_dkms_module_missing_after_the_next_boot(preinstalled):
    lab, node = preinstalled, "gpu-node-02"
    subprocess_copy(lab, os.path.join(lab.state_dir, "runfiles", os.path.basename(RUNFILE)), RUNFILE, node)
    lab.ssh(node, "sh %s --silent --dkms" % RUNFILE)
    lab.reboot_from_inside(node)
    assert "/updates/dkms/" in lab.ssh(node, "modinfo -n nvidia").stdout
    assert lab.ssh(node, "nvidia-smi", check=False).returncode == 0
    lab.gpulab("fault", node, "dkms-fail")
    try:
        lab.reboot_from_inside(node)
        smi = lab.ssh(node, "nvidia-smi", check=False)
        assert smi.returncode != 0 and "couldn't communicate with the NVIDIA driver" in smi.stdout
        assert not any(line.startswith("nvidia ") for line in lab.ssh(node, "lsmod").stdout.splitlines())
    finally:
        lab.gpulab("clear", node, "dkms-fail")
