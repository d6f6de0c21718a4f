"""The change engine (`gpuops.nvidia.change`, issue 24) with the change kind node_labels, over the Kubernetes API
twin and three node twins: a dry run changes nothing, bad labels are refused before anything changes, a canary that
does not keep its labels (another controller owns the label) stops the run with the node marked, a rollback puts the
node's labels back, and a run resumed from a node left mid-way finishes it first, then the rest, within the
invariants the twin's records show.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import threading

import pytest

from change_helpers import ChangeFleet
from conftest import collections_path, start_lab, stop_lab
from upgrade_helpers import OLD

pytestmark = pytest.mark.skipif(collections_path() is None, reason="the collection tree is not built (make tree)")

TIER = "gpu.example.com/tier"


@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("change-labels") / "state")
    lab = start_lab(state_dir, "--nodes", "3", "--driver", OLD, "--runfile", OLD, "--boot-delay", "0.5")
    yield ChangeFleet(lab, tmp_path_factory.mktemp("change-labels-runs"), "node_labels")
    stop_lab(lab)
    shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


class LabelOwner:
    """Another controller that owns a label of one node and puts its value back whenever it changes (as NFD or a
    cloud controller does with the labels it manages)."""

    def __init__(self, fleet, node, value):
        self.argv = ["kubectl", "--kubeconfig", fleet.kubeconfig, "label", "node", node, "--overwrite",
                     "%s=%s" % (TIER, value)]
        self.stop = threading.Event()
        subprocess.run(self.argv, check=True, capture_output=True, timeout=30)
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        while not self.stop.wait(0.3):
            subprocess.run(self.argv, capture_output=True, timeout=30)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=30)


def labels(fleet) -> dict:
    return {name: node["metadata"]["labels"].get(TIER) for name, node in fleet.nodes().items()}


def records(fleet) -> dict:
    return {name: fleet.change_record(node) for name, node in fleet.nodes().items()}


def test_the_dry_run_prints_the_plan_and_changes_nothing(fleet):
    _rc, output = fleet.run({"labels": {TIER: "batch"}})
    assert "Change node_labels node-labels-" in output and "(dry run: nothing will be changed)" in output
    assert "Batch 1/2 (canary):" in output and "Batch 2/2 (batch):" in output
    assert "each node stays in service while it changes" in output
    assert "To act, run again with -e gpuops_confirm=gpulab" in output
    assert labels(fleet) == {"gpu-node-01": None, "gpu-node-02": None, "gpu-node-03": None}
    assert set(records(fleet).values()) == {None}
    assert fleet.lock_holder() is None


@pytest.mark.parametrize("inputs,expected", [
    ({"labels": {"bad key": "x"}}, "gpuops_change_inputs.labels: 'bad key' is not a label key"),
    ({"labels": {TIER: "with space"}}, "is not a label value"),
    ({"lables": {TIER: "batch"}}, "gpuops_change_inputs for node_labels:"),
])
def test_bad_inputs_are_refused_before_anything_changes(fleet, inputs, expected):
    rc, output = fleet.run(inputs, check=False, gpuops_confirm="gpulab")
    assert rc != 0
    assert expected in output and "nothing was changed" in output
    assert set(labels(fleet).values()) == {None}
    assert set(records(fleet).values()) == {None}
    assert fleet.lock_holder() is None


def test_a_canary_that_does_not_keep_its_labels_stops_the_run_and_is_marked(fleet):
    with LabelOwner(fleet, "gpu-node-01", "train"):
        rc, output = fleet.run({"labels": {TIER: "batch"}}, check=False, gpuops_confirm="gpulab",
                               gpuops_run_id="labels-owned")
    assert rc != 0
    assert "the change stopped after batch 1/2" in output and "nodes not yet started are untouched" in output
    found = records(fleet)
    assert found["gpu-node-01"]["state"] == "failed"
    assert "the node does not carry the labels" in found["gpu-node-01"]["reason"]
    assert found["gpu-node-01"]["previous"] == {TIER: "train"}
    assert found["gpu-node-02"] is None and found["gpu-node-03"] is None
    assert labels(fleet) == {"gpu-node-01": "train", "gpu-node-02": None, "gpu-node-03": None}
    assert not any(node["spec"].get("unschedulable") for node in fleet.nodes().values())
    assert fleet.lock_holder() is None
    assert fleet.run_record("labels-owned")["outcome"].startswith("stopped after batch 1")
    # the same change again is refused until a person looks at the failed node
    rc, output = fleet.run({"labels": {TIER: "batch"}}, check=False, gpuops_confirm="gpulab")
    assert rc != 0 and "gpu-node-01: a previous run of this change failed the node" in output


def test_with_rollback_on_failure_the_failed_canary_gets_its_labels_back(fleet):
    with LabelOwner(fleet, "gpu-node-01", "train"):
        fleet.module("node_labels", {"names": ["gpu-node-01"], "labels": {"gpu.example.com/pool": "a"}})
        rc, output = fleet.run({"labels": {TIER: "infer", "gpu.example.com/pool": None}}, check=False,
                               gpuops_confirm="gpulab", gpuops_change_rollback_on_failure=True,
                               gpuops_run_id="labels-rollback")
    assert rc != 0 and "the change stopped after batch 1/2" in output
    node = fleet.nodes()["gpu-node-01"]
    record = fleet.change_record(node)
    assert record["state"] == "rolled-back" and record["previous"] == {TIER: "train", "gpu.example.com/pool": "a"}
    assert node["metadata"]["labels"].get("gpu.example.com/pool") == "a"      # removed by the change, put back
    assert labels(fleet)["gpu-node-02"] is None and labels(fleet)["gpu-node-03"] is None


def test_a_run_resumed_from_a_node_left_mid_way_finishes_it_first_then_the_rest(fleet):
    inputs = {"labels": {TIER: "batch", "gpu.example.com/pool": "b"}}
    _rc, output = fleet.run(inputs)
    change_id = output.split("Change node_labels ")[1].split()[0]
    # a run killed after gpu-node-03's record and before its labels
    fleet.module("node_change_record", {"kind": "node_labels", "records": [
        {"name": "gpu-node-03", "state": "applying", "change": change_id, "run_id": "killed",
         "previous": {TIER: None, "gpu.example.com/pool": None}}]})
    _rc, output = fleet.run(inputs, gpuops_confirm="gpulab", gpuops_run_id="labels-resume")
    assert labels(fleet) == {"gpu-node-01": "batch", "gpu-node-02": "batch", "gpu-node-03": "batch"}
    found = records(fleet)
    assert {name: record["state"] for name, record in found.items()} == {
        "gpu-node-01": "done", "gpu-node-02": "done", "gpu-node-03": "done"}
    assert found["gpu-node-03"]["previous"] == {TIER: None, "gpu.example.com/pool": None}   # the first capture
    assert found["gpu-node-01"]["previous"] == {TIER: "train", "gpu.example.com/pool": "a"}
    run_record = fleet.run_record("labels-resume")
    assert run_record["outcome"] == "completed"
    assert [batch["nodes"] for batch in run_record["plan"]["batches"]] == [["gpu-node-03"],
                                                                          ["gpu-node-01", "gpu-node-02"]]
    assert fleet.lock_holder() is None
    assert not any(node["spec"].get("unschedulable") for node in fleet.nodes().values())
    fleet.check_invariants(max_unavailable=1)
    # the same change again has nothing to do
    _rc, output = fleet.run(inputs, gpuops_confirm="gpulab")
    assert output.count("already changed (recorded done)") == 3
