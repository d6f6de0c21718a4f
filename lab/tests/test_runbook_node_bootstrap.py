"""The node bootstrap runbook (`gpuops.nvidia.node_bootstrap`) over real SSH and HTTPS, on the seed's validated
distributions at once: an Ubuntu 22.04 and a Rocky Linux 9 (both with Secure Boot on: the module is signed with a MOK
the operator confirms at the console during the reboot, the pair each distribution's DKMS signs with: shim-signed's
MOK.priv/MOK.der on Ubuntu, dkms's mok.key/mok.pub on Rocky) and a Debian 12 node, driverless, become schedulable GPU nodes,
each with the NVIDIA Container Toolkit installed and held by its own package manager (apt, dnf with versionlock,
apt) from the twin's signed mirror of NVIDIA's repository and the CDI spec written by its nvidia-ctk; a second run
changes nothing and reboots nothing. Then the Rocky node, its kernel's build tree gone, gets it back from the driver
role by Rocky's package, `kernel-devel-<release>` (from the twin's BaseOS), at Rocky's path."""
from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time

import pytest
import yaml

from conftest import collections_path, start_lab, stop_lab

VERSION = "615.71.09"
TOOLKIT = "1.17.8-1"
TOOLKIT_PACKAGES = ["libnvidia-container-tools", "libnvidia-container1", "nvidia-container-toolkit",
                    "nvidia-container-toolkit-base"]
UBUNTU_DRIVER_PACKAGES = ["nvidia-driver-open", "nvidia-dkms-open", "nvidia-utils", "libnvidia-compute",
                          "nvidia-kernel-common"]
FLEET = {"gpu-node-01": "Ubuntu", "gpu-node-02": "Rocky", "gpu-node-03": "Debian"}
SECURE_BOOT_NODE = "gpu-node-02"
SECURE_BOOT_NODES = ["gpu-node-01", SECURE_BOOT_NODE]
# the key pair each distribution's DKMS signs with, where the driver role makes and enrols its MOK
MOK_PAIRS = {"gpu-node-01": ("/var/lib/shim-signed/mok/MOK.priv", "/var/lib/shim-signed/mok/MOK.der"),
             "gpu-node-02": ("/var/lib/dkms/mok.key", "/var/lib/dkms/mok.pub")}
pytestmark = pytest.mark.skipif(collections_path() is None, reason="the collection tree is not built (make tree)")


@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    lab = start_lab(str(tmp_path_factory.mktemp("mixed") / "state"), "--nodes", "3",
                    "--os", "ubuntu2204,rocky9,debian12", "--secure-boot-node", "gpu-node-01",
                    "--secure-boot-node", SECURE_BOOT_NODE,
                    "--boot-delay", "0.5", "--mok-timeout", "60", "--cuda-repo", VERSION)
    # the Ubuntu node takes the driver by packages from (the mirror of) NVIDIA's CUDA repository: branch 615 is past
    # 590, where NVIDIA's Ubuntu names lose the branch (nvidia-driver-open, ...)
    os.makedirs(os.path.join(lab.state_dir, "host_vars"), exist_ok=True)
    with open(os.path.join(lab.state_dir, "host_vars", "gpu-node-01.yml"), "w") as stream:
        yaml.safe_dump({"nvidia_driver_method": "package", "nvidia_driver_cuda_repo": True}, stream)
    for name in ("gpu-node-01", "gpu-node-03"):
        # the Debian and Ubuntu nodes' only package source is the mirror, as on an air-gapped site
        lab.ssh(name, "rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*")
    yield lab
    stop_lab(lab)


def confirm_mok_at_the_console(lab, nodes: list, since: float, stop: threading.Event) -> None:
    """The operator at the nodes' consoles: confirms the staged key whenever a node's MokManager waits."""
    confirmed = {node: 0 for node in nodes}
    while not stop.is_set():
        events = lab.events(kind="mok-manager-waiting", since=since)
        for node in nodes:
            waiting = [event for event in events if event["node"] == node]
            if len(waiting) > confirmed[node]:
                lab.gpulab("mok-confirm", node)
                confirmed[node] = len(waiting)
        stop.wait(0.5)


def bootstrap(lab) -> str:
    extra = {"gpuops_driver_version": VERSION, "precheck_require_kubelet": False,
             "nvidia_driver_mok_password": "mixed-fleet-mok"}
    stop = threading.Event()
    console = threading.Thread(target=confirm_mok_at_the_console, args=(lab, SECURE_BOOT_NODES, time.time(), stop),
                               daemon=True)
    console.start()
    try:
        done = subprocess.run(["ansible-playbook", "-i", os.path.join(lab.state_dir, "inventory.yml"),
                               "gpuops.nvidia.node_bootstrap", "-e", json.dumps(extra)],
                              capture_output=True, text=True, timeout=900,
                              env=dict(lab.env, ANSIBLE_COLLECTIONS_PATH=collections_path()))
    finally:
        stop.set()
        console.join()
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return done.stdout


def distribution(lab, node: str) -> str:
    return re.search(r'^NAME="?([^" \n]+)', lab.ssh(node, "cat /etc/os-release").stdout, re.MULTILINE).group(1)


def toolkit_state(lab, node: str) -> dict:
    """{package: version-release} installed, and whether the package manager holds them there."""
    if distribution(lab, node) == "Rocky":
        query = lab.ssh(node, "rpm -q --queryformat '%%{NAME} %%{VERSION}-%%{RELEASE}\\n' %s"
                        % " ".join(TOOLKIT_PACKAGES)).stdout
        locks = lab.ssh(node, "dnf -q versionlock list").stdout
        held = all(re.search(r"^%s-0:%s\.\*$" % (re.escape(name), re.escape(TOOLKIT)), locks, re.MULTILINE)
                   for name in TOOLKIT_PACKAGES)
    else:
        query = lab.ssh(node, "dpkg-query -W -f '${Package} ${Version}\\n' %s" % " ".join(TOOLKIT_PACKAGES)).stdout
        selections = lab.ssh(node, "dpkg --get-selections %s" % " ".join(TOOLKIT_PACKAGES)).stdout
        held = all(line.split()[1] == "hold" for line in selections.splitlines())
    return {"versions": dict(line.split() for line in query.splitlines()), "held": held}


def kube_nodes(lab) -> dict:
    done = subprocess.run(["kubectl", "--kubeconfig", os.path.join(lab.state_dir, "kubeconfig"), "get", "nodes",
                           "-o", "json"], capture_output=True, text=True, timeout=60, check=True)
    return {node["metadata"]["name"]: node for node in json.loads(done.stdout)["items"]}


def test_ubuntu_rocky_and_debian_nodes_become_gpu_nodes_with_the_toolkit_held_and_a_rerun_changes_nothing(fleet):
    assert {node: distribution(fleet, node) for node in FLEET} == FLEET
    for name in SECURE_BOOT_NODES:
        assert fleet.ssh(name, "mokutil --sb-state").stdout.strip() == "SecureBoot enabled", name
    assert all(node["status"].get("allocatable", {}).get("nvidia.com/gpu", "0") == "0"
               for node in kube_nodes(fleet).values())
    since = time.time()
    bootstrap(fleet)
    for name, node in kube_nodes(fleet).items():
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8", name
        assert node["metadata"]["labels"]["nvidia.com/cuda.driver-version.full"] == VERSION, name
        assert not node["spec"].get("unschedulable"), name
    assert sorted({event["node"] for event in fleet.events(kind="up", since=since)}) == sorted(FLEET)
    for name in FLEET:
        assert toolkit_state(fleet, name) == {"versions": {package: TOOLKIT for package in TOOLKIT_PACKAGES},
                                              "held": True}, name
        spec = yaml.safe_load(fleet.ssh(name, "cat /etc/cdi/nvidia.yaml").stdout)
        names = [device["name"] for device in spec["devices"]]
        assert spec["kind"] == "nvidia.com/gpu" and names[0] == "0" and names[-1] == "all" and len(names) == 17, name
        mounts = [mount["containerPath"] for mount in spec["containerEdits"]["mounts"]]
        assert "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.%s" % VERSION in mounts, name
    query = fleet.ssh("gpu-node-01", "dpkg-query -W -f '${Package} ${Version}\\n' %s; dpkg --get-selections %s"
                      % (" ".join(UBUNTU_DRIVER_PACKAGES), " ".join(UBUNTU_DRIVER_PACKAGES))).stdout.split("\n")
    versions = dict(line.split() for line in query[:len(UBUNTU_DRIVER_PACKAGES)])
    assert versions == {name: VERSION + "-1ubuntu1" for name in UBUNTU_DRIVER_PACKAGES}, query
    assert all(line.split()[1] == "hold" for line in query[len(UBUNTU_DRIVER_PACKAGES):] if line.strip()), query
    for name in SECURE_BOOT_NODES:
        key, certificate = MOK_PAIRS[name]
        assert fleet.ssh(name, "modinfo -F signer nvidia").stdout.strip() == "gpuops.nvidia module signing key", name
        assert fleet.ssh(name, "stat -c %%a %s" % key).stdout.strip() == "600", name
        assert fleet.ssh(name, "mokutil --test-key %s" % certificate, check=False).stdout.strip() == (
            "%s is already enrolled" % certificate), name
        dkms_conf = fleet.ssh(name, "cat /etc/dkms/framework.conf.d/gpuops-mok.conf").stdout
        assert "mok_signing_key=%s\nmok_certificate=%s\n" % (key, certificate) in dkms_conf, name
    assert sorted(event["node"] for event in fleet.events(kind="mok-enrolled", since=since)) == SECURE_BOOT_NODES
    since = time.time()
    output = bootstrap(fleet)
    for name in FLEET:
        assert re.search(r"%s\s+: ok=\d+\s+changed=0 " % name, output), output[-3000:]
    assert fleet.events(kind="up", since=since) == []


def test_a_rocky_node_without_its_kernels_build_tree_gets_it_from_kernel_devel_by_the_driver_role(fleet):
    release = fleet.ssh(SECURE_BOOT_NODE, "uname -r").stdout.strip()
    build = "/lib/modules/%s/build" % release
    fleet.ssh(SECURE_BOOT_NODE, "rm -f %s" % build)
    play = os.path.join(fleet.state_dir, "driver-role.yml")
    with open(play, "w") as stream:
        yaml.safe_dump([{"hosts": SECURE_BOOT_NODE, "become": True, "roles": [
            {"role": "gpuops.nvidia.nvidia_driver", "nvidia_driver_version": VERSION}]}], stream)
    done = subprocess.run(["ansible-playbook", "-i", os.path.join(fleet.state_dir, "inventory.yml"), play],
                          capture_output=True, text=True, timeout=600,
                          env=dict(fleet.env, ANSIBLE_COLLECTIONS_PATH=collections_path()))
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    prerequisites = done.stdout.split("Build prerequisites")[1].split("TASK [")[0]
    assert "changed: [%s]" % SECURE_BOOT_NODE in prerequisites, done.stdout[-6000:]
    assert fleet.ssh(SECURE_BOOT_NODE, "rpm -q --whatprovides kernel-devel-%s --queryformat '%%{NAME}'"
                     % release).stdout == "kernel-devel"
    assert fleet.ssh(SECURE_BOOT_NODE, "readlink %s" % build).stdout.strip() == "/usr/src/kernels/%s" % release
    # the tree DKMS builds against: a real kernel build tree (the host's Debian headers, at Rocky's path)
    assert re.match(r"^\d+\.\d+\.\d+", fleet.ssh(SECURE_BOOT_NODE, "make -s -C /usr/src/kernels/%s kernelversion"
                                                   % release).stdout.strip())
