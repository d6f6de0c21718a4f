"""`gpulab down` leaves no mount, process or file behind, also after its daemon died; the host is untouched."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from conftest import LAB_DIR, Lab, start_lab, stop_lab

sys.path.insert(0, LAB_DIR)
from gpulab.daemon import ssh_clients_of  # noqa: E402
from gpulab.osutil import pid_namespace, pids_in_namespace  # noqa: E402


def host_view() -> dict:
    with open("/proc/sys/kernel/random/boot_id") as stream:
        boot_id = stream.read()
    return {"boot_id": boot_id, "hostname": socket.gethostname(), "dev": sorted(os.listdir("/dev")),
            "pci": sorted(os.listdir("/sys/bus/pci/devices")), "modules": sorted(os.listdir("/sys/module")),
            "proc_driver": sorted(os.listdir("/proc/driver"))}


def mounts_mentioning(path: str) -> list:
    with open("/proc/self/mountinfo") as stream:
        return [line for line in stream if path in line]


def lab_processes(lab: Lab) -> dict:
    """Host PIDs of the daemon, every node process and every host ssh client of the nodes."""
    namespaces = [pid_namespace(node["pid"]) for node in
                  __import__("json").loads(lab.gpulab("status", "--json").stdout)["nodes"] if node["pid"]]
    return {"daemon": [lab.info["daemon_pid"]],
            "nodes": [pid for namespace in namespaces for pid in pids_in_namespace(namespace)],
            "namespaces": namespaces,
            "ssh": ssh_clients_of([node["ip"] for node in lab.info["nodes"]])}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open("/proc/%d/stat" % pid) as stream:
        return stream.read().split(") ", 1)[1][0] != "Z"


def exercise(lab: Lab) -> None:
    """Leave as much state behind as a user would: ssh and Ansible control masters, a full disk, a hung node."""
    subprocess.run(["ssh", "-F", os.path.join(lab.state_dir, "ssh_config"), "gpu-node-01", "true"], check=True,
                   timeout=30)
    lab.ansible("gpu_nodes", "ping")
    lab.gpulab("fault", "gpu-node-01", "disk-full")
    lab.gpulab("fault", "gpu-node-02", "reboot-hang")
    lab.ssh("gpu-node-02", "reboot")
    lab.wait_status("gpu-node-02", "hung")


def assert_nothing_left(lab: Lab, processes: dict, before: dict, kept: list) -> None:
    assert mounts_mentioning(lab.state_dir) == []
    left = [pid for pid in processes["daemon"] + processes["nodes"] + processes["ssh"] if alive(pid)]
    assert left == [], left
    assert all(pids_in_namespace(namespace) == [] for namespace in processes["namespaces"])
    assert sorted(os.listdir(lab.state_dir)) == kept if kept else not os.path.exists(lab.state_dir)
    assert host_view() == before


def test_down_removes_every_mount_process_and_file_it_made(tmp_path, request):
    state_dir = str(tmp_path / "state")
    os.makedirs(state_dir)
    with open(os.path.join(state_dir, "operator-notes.txt"), "w") as stream:
        stream.write("not the lab's\n")
    before = host_view()
    lab = start_lab(state_dir, "--nodes", "2", "--boot-delay", "0.3")
    request.addfinalizer(lambda: stop_lab(lab))
    exercise(lab)
    processes = lab_processes(lab)
    assert processes["ssh"], "the exercise should leave ControlPersist masters"
    assert mounts_mentioning(state_dir)
    lab.gpulab("down")
    assert_nothing_left(lab, processes, before, kept=["operator-notes.txt"])


def test_down_after_the_daemon_was_killed_still_cleans_up(tmp_path, request):
    state_dir = str(tmp_path / "created-by-up")
    before = host_view()
    lab = start_lab(state_dir, "--nodes", "2", "--boot-delay", "0.3")
    request.addfinalizer(lambda: stop_lab(lab))
    lab.ssh("gpu-node-02", "nohup sleep 300 >/dev/null 2>&1 &")
    processes = lab_processes(lab)
    os.kill(lab.info["daemon_pid"], signal.SIGKILL)
    time.sleep(0.2)
    assert lab.gpulab("status", check=False).returncode == 1
    lab.gpulab("down")
    assert_nothing_left(lab, processes, before, kept=[])


def test_host_views_are_unchanged_while_nodes_run(lab):
    before = host_view()
    lab.ssh("gpu-node-01", "ls /proc/driver /sys/module /dev >/dev/null")
    assert host_view() == before
    assert not os.path.exists("/proc/driver/nvidia")
