"""The DCGM diagnostics gate inside a driver upgrade (issue 25, Gates): `dcgmi diag` is part of each node's verify,
run before the node is given back, and a failed test fails the node with the test named.

A 2-node lab with DCGM on its nodes (`gpulab up --dcgm`), upgraded by the real `driver_upgrade` runbook (confirmed,
one node a batch, the gate at its default: `auto`, level 2). The second node's PCIe test fails from its reboot on
(`dcgm-fail:pcie:3`, armed for its next boot: the GPUs were fine when the roll-out started). The canary ends done
and given back; the second node ends failed and cordoned, its record's reason naming the failing test and GPU.
Invariants as the other upgrade tests judge them: one boot each, no PDB violation, never more than one GPU node
out, the roll-out lock released.
"""
from __future__ import annotations

import os
import shutil
import time

import pytest

from conftest import collections_path, start_lab, stop_lab
from upgrade_helpers import DRIVER_LABEL, NEW, OLD, Fleet

pytestmark = pytest.mark.skipif(collections_path() is None, reason="the collection tree is not built (make tree)")

CANARY, OTHER = "gpu-node-01", "gpu-node-02"
FAULT = "dcgm-fail:pcie:3"


@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("upgrade-dcgm") / "state")
    lab = start_lab(state_dir, "--nodes", "2", "--driver", OLD, "--runfile", OLD, "--dcgm", "--boot-delay", "0.5")
    try:
        yield Fleet(lab, tmp_path_factory.mktemp("upgrade-dcgm-runs"))
    finally:
        stop_lab(lab)
        shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


def test_a_failed_dcgm_diag_after_the_reboot_keeps_the_node_from_being_given_back(fleet):
    # the GPUs pass before the roll-out; the PCIe test of GPU 3 fails from the node's next boot on
    assert fleet.lab.ssh(OTHER, "dcgmi diag -r 2 -j", check=False).returncode == 0
    fleet.lab.gpulab("fault", OTHER, FAULT, "--at-next-boot")
    assert fleet.lab.ssh(OTHER, "dcgmi diag -r 2 -j", check=False).returncode == 0
    since = time.time()

    rc, output = fleet.run(check=False, gpuops_confirm="gpulab")
    assert rc != 0, output[-4000:]
    assert "PCIe failed on GPU 3" in output, output[-4000:]
    nodes = fleet.nodes()

    # the canary: its gate passed, upgraded and given back
    canary = nodes[CANARY]
    assert fleet.record(canary)["state"] == "done", fleet.record(canary)
    assert canary["metadata"]["labels"][DRIVER_LABEL] == NEW
    assert canary["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert not canary["spec"].get("unschedulable")

    # the other: rebooted into the new driver, but its DCGM gate failed: failed, cordoned, the test named
    other = nodes[OTHER]
    record = fleet.record(other)
    assert record["state"] == "failed", record
    assert "PCIe" in record["reason"] and "GPU 3" in record["reason"], record
    assert other["spec"].get("unschedulable") is True
    assert FAULT in fleet.lab.node_status(OTHER)["faults"]

    # invariants: one boot each, no PDB violation, at most one GPU node out at once, the lock released
    assert fleet.boots(since) == {CANARY: 1, OTHER: 1}
    fleet.check_invariants(max_unavailable=1)
    assert fleet.lock_holder() is None
