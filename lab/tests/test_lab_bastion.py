"""`gpulab up --bastion`: the GPU nodes live in a network of their own whose only way in from the host is the
bastion's sshd. Checked as an operator would: ssh through the bastion (ProxyJump) works, a direct ssh to a node
is refused, the bastion lets its non-root user reach the nodes' sshd and nothing else, a node reboot through the
bastion comes back, and `down` leaves no process and no namespace behind.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import start_lab, stop_lab
from gpulab.netns import pids_in_network
from gpulab.osutil import pid_namespace, pids_in_namespace, port_accepts, process_name

DRIVER = "595.91.07"


@pytest.fixture(scope="module")
def fleet():
    # a short state dir (pytest's is longer under xdist): under a longer one the lab's ssh_config goes without
    # ControlMaster (inventory.py), and the sweep of the masters Ansible leaves behind would go untested
    state_dir = os.path.join(tempfile.mkdtemp(prefix="gl-bastion-", dir="/tmp"), "state")
    lab = start_lab(state_dir, "--nodes", "2", "--bastion", "--driver", DRIVER, "--runfile", DRIVER,
                    "--boot-delay", "0.5")
    yield lab
    stop_lab(lab)
    shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


def ssh(lab, *args, master=False, timeout=30) -> subprocess.CompletedProcess:
    """ssh with the lab's ssh_config; ``master``: leave a ControlPersist master behind, as Ansible does."""
    control = ["-o", "ControlMaster=auto", "-o", "ControlPersist=60"] if master else ["-o", "ControlMaster=no"]
    return subprocess.run(["ssh", "-F", os.path.join(lab.state_dir, "ssh_config")] + control + list(args),
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def node_ip(lab, name: str) -> str:
    return next(node["ip"] for node in lab.info["nodes"] if node["name"] == name)


def test_nodes_answer_through_the_bastion(fleet):
    for name in fleet.node_names:
        done = ssh(fleet, name, "hostname; nvidia-smi --query-gpu=driver_version --format=csv,noheader | sort -u")
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == [name, DRIVER]
    status = json.loads(fleet.gpulab("status", "--json").stdout)
    assert status["bastion"]["ssh"] and all(node["ssh"] for node in status["nodes"])


def test_a_direct_ssh_to_a_node_is_refused(fleet):
    for name in fleet.node_names:
        direct = ssh(fleet, "-o", "ProxyJump=none", name, "true")
        assert direct.returncode == 255 and "Connection refused" in direct.stderr
        assert not port_accepts(node_ip(fleet, name))
    assert port_accepts(fleet.info["bastion"]["ip"])


def test_the_bastion_is_a_non_root_jump_host_to_the_nodes_sshd_only(fleet):
    login = ssh(fleet, "bastion", "id -un; hostname")
    assert login.returncode == 0 and login.stdout.split() == ["gpuops", "bastion"]
    assert "Permission denied" in ssh(fleet, "root@bastion", "true").stderr
    mirror = fleet.info["runfile_mirror"].split("//", 1)[1]
    refused = ssh(fleet, "-W", mirror, "bastion")
    # the words depend on ssh's log level and on whether a mux master answers: "open failed: administratively
    # prohibited" (PermitOpen), or only "stdio forwarding failed"
    assert refused.returncode == 255 and any(
        words in refused.stderr for words in ("refused", "prohibited", "forwarding failed")), refused.stderr


def test_a_node_reaches_the_host_services_it_uses_through_the_reverse_bridges(fleet):
    mirror, api = fleet.info["runfile_mirror"], fleet.info["kube"]["api_url"]
    api_host, api_port = api.split("//", 1)[1].rsplit(":", 1)
    probe = ("import http.client, ssl, urllib.request; "
             "print(urllib.request.urlopen('%s/SHA256SUMS').read().decode().split()[1]); "
             "api = http.client.HTTPSConnection('%s', %s, context=ssl._create_unverified_context()); "
             "api.request('GET', '/version'); print(api.getresponse().status)" % (mirror, api_host, api_port))
    done = ssh(fleet, "gpu-node-01", "python3 -c \"%s\"" % probe)
    assert done.returncode == 0, done.stderr
    # the API server answers (it refuses an anonymous client, as a real one does)
    assert done.stdout.split() == ["NVIDIA-Linux-x86_64-%s.run" % DRIVER, "401"]


def test_a_node_rebooted_through_the_bastion_comes_back_in_the_fleet_network(fleet):
    before = fleet.node_status("gpu-node-02")
    done = fleet.ansible("gpu-node-02", "ansible.builtin.reboot", "reboot_timeout=60")
    assert '"rebooted": true' in done.stdout
    after = fleet.wait_status("gpu-node-02", "up")
    assert after["boot_id"] != before["boot_id"] and after["boots"] == before["boots"] + 1
    assert os.readlink("/proc/%d/ns/net" % after["pid"]) == fleet.info["network"]["namespace"]
    assert "Connection refused" in ssh(fleet, "-o", "ProxyJump=none", "gpu-node-02", "true").stderr
    assert ssh(fleet, "gpu-node-02", "hostname").stdout.strip() == "gpu-node-02"


def test_down_leaves_no_process_and_no_namespace(fleet):
    """Last in this file: takes the module's lab down."""
    info = fleet.info
    status = json.loads(fleet.gpulab("status", "--json").stdout)
    namespace = info["network"]["namespace"]
    pid_namespaces = [pid_namespace(node["pid"]) for node in status["nodes"]] + \
        [pid_namespace(status["bastion"]["pid"])]
    assert len(pids_in_network(namespace)) > 3 and None not in pid_namespaces
    # an ssh master through the bastion, as Ansible leaves one, must not keep anything alive
    assert ssh(fleet, "gpu-node-01", "true", master=True).returncode == 0
    assert clients_of(fleet.state_dir)
    fleet.gpulab("down")
    deadline = time.monotonic() + 5
    while pids_in_network(namespace) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pids_in_network(namespace) == []
    # SIGKILLed processes can take a while to go on a loaded machine; zombies are their reaper's (pids_in_namespace)
    deadline = time.monotonic() + 30
    while any(pids_in_namespace(namespace) for namespace in pid_namespaces) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = {pid: process_name(pid) for namespace in pid_namespaces for pid in pids_in_namespace(namespace)}
    assert left == {}
    assert not port_accepts(info["bastion"]["ip"]) and not os.path.exists(fleet.state_dir)
    assert clients_of(fleet.state_dir) == []


def clients_of(state_dir: str) -> list:
    """PIDs of the lab's ssh clients: run with its ssh_config or serving a master socket in its cm/ (a master
    renames itself ``ssh: DIR/cm/... [mux]``), ProxyJump hops included."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open("/proc/%s/comm" % entry) as stream:
                if stream.read().strip() != "ssh":
                    continue
            with open("/proc/%s/cmdline" % entry, "rb") as stream:
                if state_dir.encode() in stream.read():
                    pids.append(int(entry))
        except (OSError, ValueError):
            continue
    return pids


def test_down_after_a_daemon_crash_still_sweeps_the_bastion_and_the_namespace():
    # a short state dir (not pytest's, longer under xdist): under a longer one the lab's ssh_config goes without
    # ControlMaster (inventory.py) and no master would be left behind to sweep
    short_dir = tempfile.mkdtemp(prefix="gl-crash-", dir="/tmp")
    lab = start_lab(os.path.join(short_dir, "state"), "--nodes", "1", "--bastion", "--boot-delay", "0.5")
    try:
        info = lab.info
        assert ssh(lab, "gpu-node-01", "true", master=True).returncode == 0 and clients_of(lab.state_dir)
        os.kill(info["daemon_pid"], 9)
        assert pids_in_network(info["network"]["namespace"])
    finally:
        stop_lab(lab)
    state_left = os.path.exists(lab.state_dir)
    shutil.rmtree(short_dir, ignore_errors=True)
    assert pids_in_network(info["network"]["namespace"]) == [] and clients_of(lab.state_dir) == []
    assert not state_left
