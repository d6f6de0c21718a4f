"""The node bootstrap runbook (`gpuops.nvidia.node_bootstrap`) over real SSH and HTTPS: two driverless twin nodes
become schedulable GPU nodes, and a second run changes nothing and reboots nothing."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from conftest import collections_path, start_lab, stop_lab

VERSION = "615.71.09"
pytestmark = pytest.mark.skipif(collections_path() is None, reason="the collection tree is not built (make tree)")


@pytest.fixture(scope="module")
def bare(needs_root, tmp_path_factory):
    lab = start_lab(str(tmp_path_factory.mktemp("bootstrap") / "state"), "--nodes", "2", "--boot-delay", "0.5")
    yield lab
    stop_lab(lab)


def bootstrap(lab) -> str:
    extra = {"gpuops_driver_version": VERSION,
             # the twin's nodes are not kubeadm-joined hosts and its apt repository has no toolkit package
             "precheck_require_kubelet": False, "container_runtime_toolkit_install": False}
    done = subprocess.run(["ansible-playbook", "-i", os.path.join(lab.state_dir, "inventory.yml"),
                           "gpuops.nvidia.node_bootstrap", "-e", json.dumps(extra)],
                          capture_output=True, text=True, timeout=900,
                          env=dict(lab.env, ANSIBLE_COLLECTIONS_PATH=collections_path()))
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return done.stdout


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
    since = time.time()
    output = bootstrap(bare)
    assert re.search(r"gpu-node-01\s+: ok=\d+\s+changed=0 ", output), output[-3000:]
    assert re.search(r"gpu-node-02\s+: ok=\d+\s+changed=0 ", output), output[-3000:]
    assert bare.events(kind="up", since=since) == []
