"""A 16-node roll-out with 4-node batches, every Kubernetes step run once per batch: in the second batch one node
fails its drain (a PDB that never allows a disruption) and another fails its verify (its device plugin crashes
after the reboot, so its GPUs never come back in the batch's one wait). Both end cordoned with their own reasons,
the two other nodes of the batch finish, the run stops before the third batch, the invariants hold (the checker's
replay of the twin's records); once the faults are cleared and the two nodes given back, a resume finishes the
fleet (its canary, then one 11-node batch) without a second reboot of any node.
"""
from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from conftest import collections_path, start_lab, stop_lab
from upgrade_helpers import DRIVER_LABEL, NEW, OLD, Fleet

pytestmark = [pytest.mark.skipif(collections_path() is None, reason="the collection tree is not built (make tree)"),
              pytest.mark.fleet]

NODES = ["gpu-node-%02d" % index for index in range(1, 17)]
DRAIN_FAILS, VERIFY_FAILS = "gpu-node-03", "gpu-node-04"
BATCH_2 = ["gpu-node-02", DRAIN_FAILS, VERIFY_FAILS, "gpu-node-05"]


@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("batch-faults") / "state")
    lab = start_lab(state_dir, "--nodes", "16", "--driver", OLD, "--runfile", OLD, "--boot-delay", "0.3")
    yield Fleet(lab, tmp_path_factory.mktemp("batch-faults-runs"))
    stop_lab(lab)
    shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


def test_two_nodes_of_a_batch_fail_alone_the_run_stops_after_it_and_a_resume_finishes(fleet):
    since = time.time()
    fleet.lab.gpulab("fault", DRAIN_FAILS, "pdb-block")
    fleet.lab.gpulab("fault", VERIFY_FAILS, "device-plugin-crash", "--at-next-boot")
    rc, output = fleet.run(check=False, gpuops_confirm="gpulab", gpuops_run_id="batch-faults",
                           gpuops_upgrade_batches=[1, 4], gpuops_max_unavailable=4, gpuops_drain_timeout=20,
                           gpuops_ready_timeout=40)
    assert rc != 0, output[-4000:]
    assert "stopped after batch 2" in output, output[-4000:]
    nodes = fleet.nodes()
    drained = fleet.record(nodes[DRAIN_FAILS])
    assert drained["state"] == "failed" and drained["reason"].startswith("Drain the node: drain of %s timed out"
                                                                          % DRAIN_FAILS), drained
    assert "pdb-block-%s" % DRAIN_FAILS in drained["reason"], drained
    verified = fleet.record(nodes[VERIFY_FAILS])
    assert verified["state"] == "failed", verified
    # its GPUs never came back: the one wait of the batch timed out for it alone, or the device-plugin restart that
    # a stale-looking ledger gets once did not bring its plugin back
    assert VERIFY_FAILS in verified["reason"] and ("timed out after 40s waiting for" in verified["reason"]
                                                   or "device plugin" in verified["reason"]), verified
    for name in (DRAIN_FAILS, VERIFY_FAILS):
        assert nodes[name]["spec"].get("unschedulable") is True, name
    for name in ["gpu-node-01", "gpu-node-02", "gpu-node-05"]:         # the canary and the batch's other two
        assert fleet.record(nodes[name])["state"] == "done" and not nodes[name]["spec"].get("unschedulable"), name
        assert nodes[name]["metadata"]["labels"][DRIVER_LABEL] == NEW, name
    for name in NODES[5:]:                                               # the third batch on: never touched
        assert fleet.record(nodes[name]) is None and not nodes[name]["spec"].get("unschedulable"), name
    assert DRAIN_FAILS not in fleet.boots(since)                        # never installed, never rebooted
    assert fleet.boots(since).get(VERIFY_FAILS) == 1
    assert fleet.lock_holder() is None
    fleet.check_invariants(max_unavailable=4)

    with open(os.path.join(fleet.record_dir, "driver-upgrade-batch-faults.json")) as stream:
        run = json.load(stream)
    assert [batch["nodes"] for batch in run["plan"]["batches"]][1] == BATCH_2

    fleet.lab.gpulab("clear", DRAIN_FAILS, "pdb-block")
    fleet.lab.gpulab("clear", VERIFY_FAILS, "device-plugin-crash")
    for name in (DRAIN_FAILS, VERIFY_FAILS):      # the documented way back: the node fixed, its record removed
        fleet.module("node_upgrade_record", {"name": name, "state": "absent"})
        fleet.module("node_drain", {"name": name, "state": "uncordon"})
    resumed_at = time.time()
    # the resume takes the twelve nodes left in one batch after its canary: one drain, one wait, one smoke step
    fleet.run(gpuops_confirm="gpulab", gpuops_run_id="batch-faults-resume", gpuops_upgrade_batches=[1, 11],
              gpuops_max_unavailable=11)
    nodes = fleet.nodes()
    for name in NODES:
        assert nodes[name]["metadata"]["labels"][DRIVER_LABEL] == NEW, name
        assert not nodes[name]["spec"].get("unschedulable"), name
    # the node that failed its verify runs the target already: once given back, the resume skips it
    assert fleet.record(nodes[VERIFY_FAILS]) is None
    for name in [name for name in NODES if name != VERIFY_FAILS]:
        assert fleet.record(nodes[name])["state"] == "done", name
    boots = fleet.boots(resumed_at)
    assert sorted(boots) == sorted([DRAIN_FAILS] + NODES[5:]) and set(boots.values()) == {1}, boots
    fleet.check_invariants(max_unavailable=11)
    assert fleet.lock_holder() is None
