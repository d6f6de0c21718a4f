"""The node bootstrap runbook (`gpuops.nvidia.node_bootstrap`) over real SSH and HTTPS: two driverless twin nodes
become schedulable GPU nodes, with the NVIDIA Container Toolkit installed from the twin's signed mirror of NVIDIA's
repository (the nodes' only package source, as on an air-gapped site) and the CDI spec written by its nvidia-ctk;
a second run changes nothing and reboots nothing."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest
import yaml

from conftest import collections_path, start_lab, stop_lab

VERSION = "615.71.09"
TOOLKIT = "1.17.8-1"
TOOLKIT_PACKAGES = ["libnvidia-container-tools", "libnvidia-container1", "nvidia-container-toolkit",
                    "nvidia-container-toolkit-base"]
pytestmark = pytest.mark.skipif(collections_path() is None, reason="the collection tree is not built (make tree)")


@pytest.fixture(scope="module")
def bare(needs_root, tmp_path_factory):
    lab = start_lab(str(tmp_path_factory.mktemp("bootstrap") / "state"), "--nodes", "2", "--boot-delay", "0.5")
    for name in ("gpu-node-01", "gpu-node-02"):
        lab.ssh(name, "rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*")
    yield lab
    stop_lab(lab)


def bootstrap(lab) -> str:
    # the toolkit's repository and key are the twin's mirror, by the inventory's container_runtime_toolkit_repo_*
    extra = {"gpuops_driver_version": VERSION, "precheck_require_kubelet": False}
    done = subprocess.run(["ansible-playbook", "-i", os.path.join(lab.state_dir, "inventory.yml"),
                           "gpuops.nvidia.node_bootstrap", "-e", json.dumps(extra)],
                          capture_output=True, text=True, timeout=900,
                          env=dict(lab.env, ANSIBLE_COLLECTIONS_PATH=collections_path()))
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return done.stdout


def toolkit_state(lab, node: str) -> dict:
    """{package: (installed version, dpkg selection)} of the toolkit's packages on the node."""
    versions = dict(line.split() for line in lab.ssh(node, "dpkg-query -W -f '${Package} ${Version}\\n' %s"
                                                         % " ".join(TOOLKIT_PACKAGES)).stdout.splitlines())
    selections = dict(line.split() for line in lab.ssh(node, "dpkg --get-selections %s"
                                                           % " ".join(TOOLKIT_PACKAGES)).stdout.splitlines())
    return {package: (versions.get(package), selections.get(package)) for package in TOOLKIT_PACKAGES}


def uuid_of(lab, node: str, index: int) -> str:
    return lab.ssh(node, "nvidia-smi --query-gpu=uuid --format=csv,noheader -i %d" % index).stdout.strip()


def nodes(lab) -> dict:
    done = subprocess.run(["kubectl", "--kubeconfig", os.path.join(lab.state_dir, "kubeconfig"), "get", "nodes",
                           "-o", "json"], capture_output=True, text=True, timeout=60, check=True)
    return {node["metadata"]["name"]: node for node in json.loads(done.stdout)["items"]}


def test_two_driverless_nodes_become_schedulable_gpu_nodes_and_a_second_run_changes_nothing(bare):
    before = nodes(bare)
    assert all("nvidia.com/gpu" not in (node["status"].get("allocatable") or {}) or
               node["status"]["allocatable"]["nvidia.com/gpu"] == "0" for node in before.values())
    since = time.time()
    bootstrap(bare)
    for name, node in nodes(bare).items():
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8", name
        assert node["metadata"]["labels"]["nvidia.com/cuda.driver-version.full"] == VERSION, name
        assert not node["spec"].get("unschedulable"), name
    boots = [event["node"] for event in bare.events(kind="up", since=since)]
    assert sorted(set(boots)) == ["gpu-node-01", "gpu-node-02"]
    for name in ("gpu-node-01", "gpu-node-02"):
        assert toolkit_state(bare, name) == {package: (TOOLKIT, "hold") for package in TOOLKIT_PACKAGES}, name
        spec = yaml.safe_load(bare.ssh(name, "cat /etc/cdi/nvidia.yaml").stdout)
        assert spec["kind"] == "nvidia.com/gpu"
        names = [device["name"] for device in spec["devices"]]
        assert names[:2] == ["0", uuid_of(bare, name, 0)] and names[-1] == "all" and len(names) == 17, names
        mounts = [mount["containerPath"] for mount in spec["containerEdits"]["mounts"]]
        assert "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.%s" % VERSION in mounts and "/usr/bin/nvidia-smi" in mounts
    since = time.time()
    output = bootstrap(bare)
    assert re.search(r"gpu-node-01\s+: ok=\d+\s+changed=0 ", output), output[-3000:]
    assert re.search(r"gpu-node-02\s+: ok=\d+\s+changed=0 ", output), output[-3000:]
    assert bare.events(kind="up", since=since) == []
