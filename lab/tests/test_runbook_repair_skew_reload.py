"""Case 3, version skew, repaired by a module reload (issue 25): the diagnose runbook over the twin (real
ansible-playbook, SSH to the nodes, HTTPS to the API twin).

Two nodes, each with `driver-skew` (the loaded module is the previous build, the userspace on disk the new one: a
package upgrade without its reboot) and a plugin restart, so the device plugin crash-loops on NVML's version mismatch:
- gpu-node-01 runs nvidia-persistenced (a systemd unit; it keeps /dev/nvidiactl open, as the real daemon does): the
  dry run reports the reload and changes nothing; the repair stops persistenced, unloads and loads the modules
  (gpuops.nvidia.nvidia_module_reload), starts persistenced again and restarts the plugin: 8 GPUs allocatable, the
  module at the userspace's version, and no reboot (boot id and boot count unchanged);
- gpu-node-02: a process holds /dev/nvidia0; the twin's `modprobe -r` is refused ("Module nvidia is in use") as the
  kernel refuses it; the repair does not reload (the existing behaviour: cordon, annotation naming the process, no
  reboot). Once it is gone, an nvidia-persistenced started by hand (no unit the reload stops) makes the kernel refuse
  the unload: the repair falls back to the reboot, its record saying why.
"""
from __future__ import annotations

import glob
import os
import shutil

import pytest

from conftest import start_lab, stop_lab
from gpulab.testkit.modules import gpu_allocatable, read_node, wait_allocatable
from test_runbook_repair_device_plugin import kubectl, plugin_pod, run_diagnose, wait_crash_loop

pytest.importorskip("ansible_runner")

DRIVER = "550.54.15"
OLDER = "550.54.14"   # the twin's driver-skew: same branch, the build before
PERSISTENCED = """#!/usr/bin/python3
# gpulab test stand-in for nvidia-persistenced: keeps the control device open while it runs, as the daemon does
import os, signal, sys, time
fd = os.open("/dev/nvidiactl", os.O_PATH)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(60)
"""
PERSISTENCED_UNIT = """[Unit]
Description=NVIDIA Persistence Daemon
[Service]
Type=simple
ExecStart=/usr/local/bin/nvidia-persistenced --user root
"""
HOLDER = ("nohup setsid python3 -c 'import os,time; fd=os.open(\"/dev/nvidia0\", os.O_PATH); time.sleep(3600)' "
          ">/dev/null 2>&1 & echo $!")


def steps_changed(audit):
    return {(line.get("host"), line.get("step")) for line in audit
            if line.get("event") == "task" and line.get("status") == "changed"}


def skew(lab, node):
    lab.gpulab("fault", node, "driver-skew")
    kubectl(lab, "delete", "pod", "-n", "kube-system", plugin_pod(lab, node)["metadata"]["name"], "--wait=false")
    wait_crash_loop(lab, node)
    assert wait_allocatable(lab, node, "0", timeout_s=90) == "0"
    assert lab.ssh(node, "cat /sys/module/nvidia/version").stdout.strip() == OLDER


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("skew-reload") / "state")
    lab = start_lab(state_dir, "--nodes", "2", "--driver", DRIVER, "--boot-delay", "0.3")
    try:
        for node in lab.node_names:
            assert wait_allocatable(lab, node, "8", timeout_s=90) == "8"
        yield lab
    finally:
        stop_lab(lab)
        shutil.rmtree(state_dir, ignore_errors=True)


def test_skew_is_repaired_by_a_module_reload_without_a_reboot(fleet, tmp_path):
    lab = fleet
    node = "gpu-node-01"
    lab.ssh(node, "mkdir -p /usr/local/bin /etc/systemd/system && cat > /usr/local/bin/nvidia-persistenced <<'EOF'\n"
            + PERSISTENCED + "EOF\nchmod 755 /usr/local/bin/nvidia-persistenced && cat > "
            "/etc/systemd/system/nvidia-persistenced.service <<'EOF'\n" + PERSISTENCED_UNIT + "EOF\n"
            "systemctl start nvidia-persistenced && systemctl is-active nvidia-persistenced")
    skew(lab, node)
    # the kernel refuses the unload while nvidia-persistenced holds the device
    refused = lab.ssh(node, "modprobe -r nvidia_drm nvidia_modeset nvidia_uvm nvidia", check=False)
    assert refused.returncode == 1 and "Module nvidia is in use" in refused.stderr, refused
    before = lab.node_status(node)

    # the dry run reports the reload and changes nothing
    confirm = {"gpuops_remediate": True}
    rc, _shown, causes, changed, failed, _audit = run_diagnose(lab, tmp_path / "dry-run", check=True, hosts=node,
                                                               **confirm)
    assert rc == 0 and not failed, failed
    assert causes[node]["cause"] == "version_skew"
    assert lab.ssh(node, "cat /sys/module/nvidia/version").stdout.strip() == OLDER
    assert lab.ssh(node, "systemctl is-active nvidia-persistenced", check=False).returncode == 0
    assert gpu_allocatable(lab, node) == "0"

    # the repair: persistenced stopped and started again around the reload, the plugin restarted, no reboot
    rc, _shown, causes, changed, failed, audit = run_diagnose(lab, tmp_path / "repair", hosts=node, **confirm)
    assert rc == 0 and not failed, failed
    after = lab.node_status(node)
    assert (after["boot_id"], after["boots"]) == (before["boot_id"], before["boots"])
    assert lab.ssh(node, "cat /sys/module/nvidia/version").stdout.strip() == DRIVER
    assert "driver-skew" not in after["faults"]
    assert lab.ssh(node, "systemctl is-active nvidia-persistenced", check=False).returncode == 0
    assert lab.ssh(node, "nvidia-smi -L").stdout.count("GPU ") == 8
    assert gpu_allocatable(lab, node) == "8"
    assert not read_node(lab, node)["spec"].get("unschedulable")
    steps = steps_changed(audit)
    assert {(node, "module_reload"), (node, "device_plugin_restart")} <= steps, steps
    assert (node, "reboot") not in steps, steps
    lab.ssh(node, "systemctl stop nvidia-persistenced", check=False)


def test_a_process_holding_a_gpu_stops_the_reload_and_a_refused_unload_falls_back_to_the_reboot(fleet, tmp_path):
    lab = fleet
    node = "gpu-node-02"
    skew(lab, node)
    holder = lab.ssh(node, HOLDER).stdout.strip()
    refused = lab.ssh(node, "modprobe -r nvidia", check=False)
    assert refused.returncode == 1 and "Module nvidia is in use" in refused.stderr, refused
    before = lab.node_status(node)

    # a process holds a GPU: no reload, no reboot: cordoned with the reason (the existing behaviour)
    confirm = {"gpuops_remediate": True}
    rc, _shown, causes, changed, failed, audit = run_diagnose(lab, tmp_path / "held", hosts=node, **confirm)
    assert rc == 0 and not failed, failed
    assert lab.ssh(node, "cat /sys/module/nvidia/version").stdout.strip() == OLDER
    assert lab.node_status(node)["boots"] == before["boots"]
    annotation = read_node(lab, node)["metadata"]["annotations"]["gpuops.nvidia/device-plugin-repair"]
    assert "GPU is in use" in annotation and "pid " in annotation, annotation
    assert not [step for step in steps_changed(audit) if step[1] in ("module_reload", "reboot")], audit

    # the holder is gone; an nvidia-persistenced run by hand (no unit to stop) makes the kernel refuse the unload:
    # the repair reboots instead, saying why, and gives the node back
    lab.ssh(node, "kill %s" % holder)
    lab.ssh(node, "cp /bin/sleep /usr/local/bin/nvidia-persistenced && "
                  "(nohup setsid /usr/local/bin/nvidia-persistenced 3600 >/dev/null 2>&1 &)")
    rc, _shown, causes, changed, failed, audit = run_diagnose(lab, tmp_path / "fallback", hosts=node, **confirm)
    assert rc == 0 and not failed, failed
    after = lab.node_status(node)
    assert after["boots"] == before["boots"] + 1 and after["boot_id"] != before["boot_id"]
    assert lab.ssh(node, "cat /sys/module/nvidia/version").stdout.strip() == DRIVER
    assert gpu_allocatable(lab, node) == "8"
    node02 = read_node(lab, node)
    assert not node02["spec"].get("unschedulable")
    assert "gpuops.nvidia/device-plugin-repair" not in (node02["metadata"].get("annotations") or {})
    steps = steps_changed(audit)
    assert (node, "reboot") in steps and (node, "module_reload") not in steps, steps
    said = []
    for path in glob.glob(os.path.join(str(tmp_path / "fallback"), "artifacts", "*", "stdout")):
        with open(path, encoding="utf-8") as stream:
            said += [line for line in stream if "no module reload" in line]
    assert said and "Module nvidia is in use" in said[0] and "reboot instead" in said[0], said
