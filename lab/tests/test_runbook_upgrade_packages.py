"""The driver upgrade runbook (`gpuops.nvidia.driver_upgrade`) with the package install method, over real SSH and
HTTPS, on an Ubuntu 22.04 and a Rocky Linux 9 node whose only driver source is the twin's signed mirror of NVIDIA's
CUDA repositories (`gpulab up --cuda-repo`): the nvidia_driver role adds the repository itself
(`nvidia_driver_cuda_repo`), installs NVIDIA's packages by their real names at the pinned version (Ubuntu
`nvidia-driver-570-open` and its parts at `<version>-0ubuntu1`, held by dpkg; Rocky the `nvidia-driver:570-open`
module stream, version-locked by dnf) and moves the hold or lock with every change.

The nodes are bootstrapped on OLD by packages (node_bootstrap), then:
1. a roll-out to NEW whose verify fails on both nodes (the device plugin crash-loops after the upgrade's reboot)
   with `gpuops_rollback_on_failure`: each node is downgraded by its package manager to OLD (OLD installed and
   held, NEW gone), rebooted and verified, its record rolled-back with the reason;
2. once the cause is fixed, the roll-out to NEW: both nodes end on NEW, held, one reboot each, the invariants hold.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time

import pytest

from conftest import collections_path, start_lab, stop_lab
from upgrade_helpers import DRIVER_LABEL, Fleet

OLD, NEW = "570.124.06", "570.133.20"
NODES = {"gpu-node-01": "Ubuntu", "gpu-node-02": "Rocky"}
UBUNTU_PACKAGES = ["nvidia-driver-570-open", "nvidia-dkms-570-open", "nvidia-utils-570", "libnvidia-compute-570",
                   "nvidia-kernel-common-570"]
ROCKY_PACKAGES = ["nvidia-driver", "nvidia-driver-cuda", "nvidia-driver-libs", "kmod-nvidia-open-dkms",
                  "nvidia-persistenced"]
PACKAGE_VARS = {"gpuops_driver_install_method": "package", "nvidia_driver_cuda_repo": True}
pytestmark = pytest.mark.skipif(collections_path() is None or not shutil.which("modifyrepo_c"),
                                reason="the collection tree is not built (make tree), or no rpm tools")


@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("pkg-fleet") / "state")
    lab = start_lab(state_dir, "--nodes", "2", "--os", "ubuntu2204,rocky9", "--cuda-repo", OLD, "--cuda-repo", NEW,
                    "--boot-delay", "0.5")
    # the Ubuntu node's only package source is the mirror, as on an air-gapped site
    lab.ssh("gpu-node-01", "rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*")
    # the Rocky node has EPEL (NVIDIA's dkms packages need its dkms), as NVIDIA's guide asks: the mirror's stand-in
    epel = "%s/epel/9/Everything/x86_64/" % lab.info["package_mirror"]
    lab.ssh("gpu-node-02", "printf '[epel]\\nname=Extra Packages for Enterprise Linux 9\\nbaseurl=%s\\nenabled=1\\n"
            "gpgcheck=1\\ngpgkey=%s/epel/RPM-GPG-KEY-EPEL-9\\n' > /etc/yum.repos.d/epel.repo"
            % (epel, lab.info["package_mirror"]))
    fleet = Fleet(lab, tmp_path_factory.mktemp("pkg-fleet-runs"))
    try:
        bootstrap_by_packages(fleet, OLD)
        yield fleet
    finally:
        stop_lab(lab)
        shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


def bootstrap_by_packages(fleet, version: str) -> None:
    extra = {"gpuops_driver_version": version, "precheck_require_kubelet": False, "nvidia_driver_method": "package",
             "nvidia_driver_cuda_repo": True, "container_runtime_toolkit_install": False}
    done = subprocess.run(["ansible-playbook", "-i", os.path.join(fleet.lab.state_dir, "inventory.yml"),
                           "gpuops.nvidia.node_bootstrap", "-e", json.dumps(extra)],
                          capture_output=True, text=True, timeout=1800, env=fleet.ansible_env())
    output = done.stdout + done.stderr
    assert done.returncode == 0, "\n".join(line for line in output.splitlines() if "fatal:" in line) + output[-3000:]


def packages_on(fleet, node: str) -> dict:
    """{"versions": {package: version}, "held": [packages the package manager holds, at which version]}."""
    if NODES[node] == "Rocky":
        query = fleet.lab.ssh(node, "rpm -q --queryformat '%%{NAME} %%{VERSION}\\n' %s" % " ".join(ROCKY_PACKAGES))
        locks = fleet.lab.ssh(node, "dnf -q versionlock list").stdout
        held = sorted(re.findall(r"^(\S+)-3:(\S+)-1\.el9\.\*$", locks, re.MULTILINE))
        versions = dict(line.split() for line in query.stdout.splitlines() if "not installed" not in line)
        return {"versions": versions, "held": held}
    query = fleet.lab.ssh(node, "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' %s"
                          % " ".join(UBUNTU_PACKAGES)).stdout
    versions = {line.split()[0]: line.split()[1].rsplit("-", 1)[0] for line in query.splitlines()
                if line.split()[2].startswith("ii") or line.split()[2].startswith("hi")}
    selections = fleet.lab.ssh(node, "dpkg --get-selections %s" % " ".join(UBUNTU_PACKAGES)).stdout
    held = sorted((line.split()[0], versions.get(line.split()[0])) for line in selections.splitlines()
                  if line.split()[1] == "hold")
    return {"versions": versions, "held": held}


def expected_packages(node: str, version: str) -> dict:
    names = ROCKY_PACKAGES if NODES[node] == "Rocky" else UBUNTU_PACKAGES
    return {"versions": {name: version for name in names}, "held": sorted((name, version) for name in names)}


def loaded_driver(fleet, node: str) -> str:
    return fleet.lab.ssh(node, "cat /sys/module/nvidia/version").stdout.strip()


def test_the_bootstrap_installed_the_old_release_by_packages_held(fleet):
    assert {node: fleet.lab.ssh(node, "grep -E '^NAME=' /etc/os-release").stdout.split('"')[1].split()[0]
            for node in NODES} == NODES
    for node in NODES:
        assert packages_on(fleet, node) == expected_packages(node, OLD), node
        assert loaded_driver(fleet, node) == OLD, node
    assert "[epel]" in fleet.lab.ssh("gpu-node-02", "cat /etc/yum.repos.d/epel.repo").stdout
    assert "stream=570-open" in fleet.lab.ssh("gpu-node-02", "cat /etc/dnf/modules.d/nvidia-driver.module").stdout


def test_a_verify_failure_rolls_both_nodes_back_to_the_old_packages(fleet):
    for node in NODES:
        fleet.lab.gpulab("fault", node, "device-plugin-crash", "--at-next-boot")

    def fix_each_node_once_it_failed(stop: threading.Event):
        """The cause is found while the rollback runs: each node's plugin is fixed once its upgrade failed."""
        left = set(NODES)
        while left and not stop.is_set():
            for name, node in fleet.nodes().items():
                if name in left and (fleet.record(node) or {}).get("state") == "failed":
                    fleet.lab.gpulab("clear", name, "device-plugin-crash")
                    left.discard(name)
            stop.wait(0.5)

    stop = threading.Event()
    fixer = threading.Thread(target=fix_each_node_once_it_failed, args=(stop,), daemon=True)
    since = time.time()
    fixer.start()
    try:
        rc, output = fleet.run(check=False, timeout=2400, gpuops_driver_version=NEW, gpuops_confirm="gpulab",
                               gpuops_run_id="pkg-rollback", gpuops_upgrade_batches=[2], gpuops_max_unavailable=2,
                               gpuops_rollback_on_failure=True, gpuops_ready_timeout=60, **PACKAGE_VARS)
    finally:
        stop.set()
        fixer.join(timeout=10)
        for node in NODES:
            fleet.lab.gpulab("clear", node)
    assert rc != 0, output[-4000:]
    nodes = fleet.nodes()
    for name in NODES:
        record = fleet.record(nodes[name])
        assert record["state"] == "rolled-back", (name, record)
        assert record["reason"].startswith("rolled back to %s after: " % OLD), record
        assert nodes[name]["metadata"]["labels"][DRIVER_LABEL] == OLD, name
        assert not nodes[name]["spec"].get("unschedulable"), name
        # the downgrade by the package manager: OLD installed and held, NEW gone
        assert packages_on(fleet, name) == expected_packages(name, OLD), name
        assert loaded_driver(fleet, name) == OLD, name
    assert fleet.boots(since) == {name: 2 for name in NODES}     # the upgrade's reboot and the rollback's
    assert fleet.lock_holder() is None
    fleet.check_invariants(max_unavailable=2)
    for name in NODES:
        fleet.module("node_upgrade_record", {"name": name, "state": "absent"})


def test_the_roll_out_by_packages_brings_both_nodes_to_the_new_release_held(fleet):
    since = time.time()
    _rc, output = fleet.run(timeout=2400, gpuops_driver_version=NEW, gpuops_confirm="gpulab",
                            gpuops_run_id="pkg-upgrade", gpuops_upgrade_batches=[1, 1], **PACKAGE_VARS)
    nodes = fleet.nodes()
    for name in NODES:
        record = fleet.record(nodes[name])
        assert record["state"] == "done" and record["from"] == OLD and record["to"] == NEW, record
        assert nodes[name]["metadata"]["labels"][DRIVER_LABEL] == NEW, name
        assert not nodes[name]["spec"].get("unschedulable"), name
        assert packages_on(fleet, name) == expected_packages(name, NEW), name
        assert loaded_driver(fleet, name) == NEW, name
    assert fleet.boots(since) == {name: 1 for name in NODES}
    assert [event["node"] for event in fleet.lab.events(kind="up", since=since)] == list(NODES)
    fleet.check_invariants(max_unavailable=2)
    assert fleet.lock_holder() is None
    assert "gpu-node-02              %s -> %s done" % (OLD, NEW) in output
