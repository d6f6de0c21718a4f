"""The driver upgrade with batches of more than one node and a budget that someone else's node already uses.

Five nodes; gpu-node-05 is cordoned by another team (not ours: our inventory holds 01-04 only), so
it counts against `gpuops_max_unavailable` for the whole run. With a budget of 2 the canary goes (1 other + 1
ours) and the 2-node batch is refused before anything of it is touched (1 + 2 > 2); with a budget of 3 a second
run resumes and the 2-node batch goes together. The twin's records show at most 3 GPU nodes out at any moment,
two of them ours at once, no PDB violated, one boot per upgraded node, the other team's node left as it was.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest
import yaml

from conftest import collections_path, start_lab, stop_lab
from upgrade_helpers import DRIVER_LABEL, NEW, OLD, Fleet

pytestmark = pytest.mark.skipif(collections_path() is None, reason="the collection tree is not built (make tree)")

OURS = ["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04"]
OTHERS = "gpu-node-05"


@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("multinode-fleet") / "state")
    lab = start_lab(state_dir, "--nodes", "5", "--driver", OLD, "--runfile", OLD, "--boot-delay", "0.5")
    fleet = Fleet(lab, tmp_path_factory.mktemp("multinode-runs"))
    done = subprocess.run(["kubectl", "--kubeconfig", fleet.kubeconfig, "cordon", OTHERS], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with open(os.path.join(lab.state_dir, "inventory.yml")) as stream:
        inventory = yaml.safe_load(stream)
    del inventory["all"]["children"]["gpu_nodes"]["hosts"][OTHERS]
    fleet.our_inventory = os.path.join(os.path.dirname(fleet.record_dir), "ours.yml")
    with open(fleet.our_inventory, "w") as stream:
        yaml.safe_dump(inventory, stream)
    yield fleet
    stop_lab(lab)
    shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


def drivers(fleet) -> dict:
    return {name: node["metadata"]["labels"].get(DRIVER_LABEL) for name, node in fleet.nodes().items()}


def test_a_batch_that_would_overspend_the_budget_others_use_is_refused_before_it_starts(fleet):
    since = time.time()
    rc, output = fleet.run(check=False, inventory=fleet.our_inventory, gpuops_confirm="gpulab",
                           gpuops_run_id="multi-tight", gpuops_upgrade_batches=[1, 2], gpuops_max_unavailable=2)
    assert rc != 0, output[-3000:]
    assert "budget spent" in output and "gpu-node-05 (cordoned)" in output, output[-3000:]
    assert fleet.boots(since) == {"gpu-node-01": 1}                    # the canary only
    nodes = fleet.nodes()
    assert drivers(fleet) == {"gpu-node-01": NEW, "gpu-node-02": OLD, "gpu-node-03": OLD, "gpu-node-04": OLD,
                              OTHERS: OLD}
    for name in ("gpu-node-02", "gpu-node-03", "gpu-node-04"):        # nothing of the refused batch touched
        assert not nodes[name]["spec"].get("unschedulable") and fleet.record(nodes[name]) is None, name
    assert not nodes["gpu-node-01"]["spec"].get("unschedulable")
    assert nodes[OTHERS]["spec"].get("unschedulable")                  # theirs, left as it was
    assert fleet.lock_holder() is None
    fleet.check_invariants(max_unavailable=2)


def test_with_room_for_it_the_resume_runs_two_nodes_at_once_within_the_budget(fleet):
    since = time.time()
    fleet.run(inventory=fleet.our_inventory, gpuops_confirm="gpulab", gpuops_run_id="multi-room",
              gpuops_upgrade_batches=[1, 2], gpuops_max_unavailable=3)
    assert fleet.boots(since) == {"gpu-node-02": 1, "gpu-node-03": 1, "gpu-node-04": 1}
    assert drivers(fleet) == dict({name: NEW for name in OURS}, **{OTHERS: OLD})
    nodes = fleet.nodes()
    for name in OURS:
        assert not nodes[name]["spec"].get("unschedulable") and fleet.record(nodes[name])["state"] == "done", name
    assert nodes[OTHERS]["spec"].get("unschedulable") and fleet.record(nodes[OTHERS]) is None
    report = fleet.check_invariants(max_unavailable=3)
    # the 2-node batch was out together, beside the other team's node
    assert report["max_unavailable_gpu_nodes"] == 3, report["max_unavailable_nodes"]
    assert OTHERS in report["max_unavailable_nodes"]
    assert fleet.lock_holder() is None
