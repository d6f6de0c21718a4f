"""The node bootstrap runbook in batches of two under a budget another team's node already uses.

Five nodes on 595.91.07; gpu-node-05 is cordoned by another team and is not ours (the run's hosts are 01-04). A
bootstrap to 615.71.09 in batches of two (`gpuops_bootstrap_batches: [2]`) with a budget of 2 is refused before
its first batch drains anything (2 of ours + the other team's 1 > 2); with a budget of 3 both batches go, two of
ours out at once beside the other team's node, each node rebooted once, no PDB violated, the other node left as it
was.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import collections_path, start_lab, stop_lab
from upgrade_helpers import DRIVER_LABEL, NEW, OLD, Fleet

pytestmark = pytest.mark.skipif(collections_path() is None, reason="the collection tree is not built (make tree)")

OURS = ["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04"]
OTHERS = "gpu-node-05"


@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("bootstrap-batches") / "state")
    lab = start_lab(state_dir, "--nodes", "5", "--driver", OLD, "--runfile", OLD, "--boot-delay", "0.3")
    fleet = Fleet(lab, tmp_path_factory.mktemp("bootstrap-batches-runs"))
    subprocess.run(["kubectl", "--kubeconfig", fleet.kubeconfig, "cordon", OTHERS], check=True,
                   capture_output=True, timeout=60)
    yield fleet
    stop_lab(lab)
    shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


def bootstrap(fleet, max_unavailable) -> tuple:
    runfiles = os.path.join(fleet.lab.state_dir, "runfiles")
    extra = {"gpuops_driver_version": NEW, "gpuops_bootstrap_hosts": "gpu_nodes:!" + OTHERS,
             "gpuops_bootstrap_batches": [2], "gpuops_max_unavailable": max_unavailable,
             "gpuops_drain_timeout": 60, "gpuops_bootstrap_reboot_timeout": 120,
             "nvidia_driver_runfile_src": runfiles + "/NVIDIA-Linux-x86_64-{{ nvidia_driver_version }}.run"}
    done = subprocess.run(["ansible-playbook", "-i", os.path.join(fleet.lab.state_dir, "inventory.yml"),
                           "gpuops.nvidia.node_bootstrap", "-e", json.dumps(extra)],
                          capture_output=True, text=True, env=fleet.ansible_env(), timeout=900)
    return done.returncode, done.stdout + done.stderr


def test_a_batch_that_would_overspend_the_budget_others_use_is_refused_before_it_drains(fleet):
    since = time.time()
    rc, output = bootstrap(fleet, max_unavailable=2)
    assert rc != 0, output[-4000:]
    assert "Gate the batch against the budget" in output and "budget" in output.lower(), output[-4000:]
    nodes = fleet.nodes()
    for name in OURS:
        assert not nodes[name]["spec"].get("unschedulable"), name
        assert nodes[name]["metadata"]["labels"][DRIVER_LABEL] == OLD, name
    assert fleet.boots(since) == {}


def test_batches_of_two_within_the_budget_bootstrap_every_node_once_beside_the_other_teams_node(fleet):
    since = time.time()
    rc, output = bootstrap(fleet, max_unavailable=3)
    assert rc == 0, output[-6000:]
    nodes = fleet.nodes()
    for name in OURS:
        assert nodes[name]["metadata"]["labels"][DRIVER_LABEL] == NEW, name
        assert not nodes[name]["spec"].get("unschedulable"), name
    assert nodes[OTHERS]["spec"].get("unschedulable") is True
    assert nodes[OTHERS]["metadata"]["labels"][DRIVER_LABEL] == OLD
    boots = fleet.boots(since)
    assert sorted(boots) == OURS and set(boots.values()) == {1}, boots
    report = fleet.check_invariants(max_unavailable=3)
    # a batch of two of ours was out at once beside the other team's node
    assert report["max_unavailable_gpu_nodes"] == 3 and OTHERS in report["max_unavailable_nodes"], report
