"""The driver upgrade runbook (`gpuops.nvidia.driver_upgrade`) over real SSH and HTTPS against the fleet twin.

Each scenario runs the real playbook with ansible-playbook and judges it from the twin's own records: node events
(boots), the Kubernetes API's change records replayed by the checker (GPU nodes out at once, PDB violations,
reboots), and what the API and the nodes show afterwards. Nodes start on 595.91.07; the target is 615.71.09.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from conftest import collections_path, start_lab, stop_lab
from upgrade_helpers import DRIVER_LABEL, NEW, OLD, Fleet

pytestmark = pytest.mark.skipif(collections_path() is None, reason="the collection tree is not built (make tree)")


@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    """Three H100 nodes on 595.91.07, shared by the happy path and the scenarios that change nothing."""
    state_dir = str(tmp_path_factory.mktemp("upgrade-fleet") / "state")
    lab = start_lab(state_dir, "--nodes", "3", "--driver", OLD, "--runfile", OLD, "--boot-delay", "0.5")
    yield Fleet(lab, tmp_path_factory.mktemp("upgrade-fleet-runs"))
    stop_lab(lab)
    shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


@pytest.fixture()
def small_fleet(needs_root, tmp_path):
    """Two nodes of its own, for a scenario that leaves a node broken."""
    lab = start_lab(str(tmp_path / "state"), "--nodes", "2", "--driver", OLD, "--runfile", OLD, "--boot-delay", "0.5")
    yield Fleet(lab, tmp_path)
    stop_lab(lab)


# --------------------------------------------------------------------------- refused before anything changes

def test_the_default_run_prints_the_plan_and_changes_nothing(fleet):
    since = time.time()
    _rc, output = fleet.run()
    assert "dry run: nothing will be changed" in output
    assert "Batch 1/3 (canary):" in output and "gpu-node-01" in output.split("Batch 2/3")[0]
    assert "%s -> %s" % (OLD, NEW) in output
    assert "To act, run again with -e gpuops_confirm=gpulab" in output
    assert all(fleet.record(node) is None and not node["spec"].get("unschedulable")
               for node in fleet.nodes().values())
    assert fleet.boots(since) == {}
    assert fleet.lock_holder() is None


@pytest.mark.parametrize("overrides,expected", [
    ({"gpuops_driver_version": "615.71.09; reboot", "gpuops_confirm": "gpulab"},
     "gpuops_driver_version: '615.71.09; reboot' is not a driver version"),
    ({"gpuops_upgrade_batches": [0, "125%"], "gpuops_max_unavailable": "x", "gpuops_confirm": "gpulab"},
     "gpuops_upgrade_batches: entries must be counts >= 1 or percentages"),
    ({"gpuops_canary_nodes": ["gpu-node-09"]}, "gpuops_canary_nodes: not among the target nodes: gpu-node-09"),
    ({"gpuops_confirm": "yes"}, "gpuops_confirm must be the cluster's name typed out (gpulab), got yes"),
    ({"gpuops_driver_install_method": "magic", "gpuops_confirm": "gpulab"},
     "gpuops_driver_install_method must be one of: auto, operator, runfile, package, got: magic"),
])
def test_bad_input_is_refused_before_anything_changes(fleet, overrides, expected):
    since = time.time()
    rc, output = fleet.run(check=False, **overrides)
    assert rc != 0
    assert expected in output
    assert all(fleet.record(node) is None for node in fleet.nodes().values())
    assert fleet.boots(since) == {}


def test_a_second_run_is_refused_while_another_holds_the_lock(fleet):
    env = dict(fleet.lab.env, ANSIBLE_COLLECTIONS_PATH=collections_path())
    take = ["ansible", "localhost", "-m", "gpuops.nvidia.rollout_lock", "-a",
            json.dumps({"kubeconfig": fleet.kubeconfig, "state": "acquired", "name": "gpuops-nvidia-rollout",
                        "holder": "alice@bastion-2/run-7", "ttl": 600})]
    subprocess.run(take, check=True, capture_output=True, env=env, timeout=120)
    try:
        since = time.time()
        rc, output = fleet.run(check=False, gpuops_confirm="gpulab")
        assert rc != 0
        assert "held by alice@bastion-2/run-7" in output
        assert all(fleet.record(node) is None and not node["spec"].get("unschedulable")
                   for node in fleet.nodes().values())
        assert fleet.boots(since) == {}
    finally:
        release = take[:-1] + [json.dumps({"kubeconfig": fleet.kubeconfig, "state": "released",
                                           "name": "gpuops-nvidia-rollout", "holder": "alice@bastion-2/run-7"})]
        subprocess.run(release, check=True, capture_output=True, env=env, timeout=120)


# --------------------------------------------------------------------------- the roll-out

def test_a_confirmed_run_upgrades_the_canary_first_then_each_batch_and_keeps_the_invariants(fleet):
    since = time.time()
    _rc, output = fleet.run(gpuops_confirm="gpulab", gpuops_run_id="it-happy")
    nodes = fleet.nodes()
    for name, node in nodes.items():
        assert node["metadata"]["labels"][DRIVER_LABEL] == NEW, name
        assert not node["spec"].get("unschedulable"), name
        record = fleet.record(node)
        assert record["state"] == "done" and record["from"] == OLD and record["to"] == NEW, record
        assert "remediation.medik8s.io/exclude-from-remediation" not in node["metadata"]["annotations"]
    assert fleet.boots(since) == {"gpu-node-01": 1, "gpu-node-02": 1, "gpu-node-03": 1}
    order = [event["node"] for event in fleet.lab.events(kind="up", since=since)]
    assert order == ["gpu-node-01", "gpu-node-02", "gpu-node-03"]       # canary first, then the batches
    fleet.check_invariants(max_unavailable=1)
    assert fleet.lock_holder() is None
    with open(os.path.join(fleet.record_dir, "driver-upgrade-it-happy.json")) as stream:
        run_record = json.load(stream)
    assert run_record["outcome"] == "completed"
    assert [batch["nodes"] for batch in run_record["plan"]["batches"]] == [["gpu-node-01"], ["gpu-node-02"],
                                                                          ["gpu-node-03"]]
    assert set(run_record["nodes"]["gpu-node-02"]["record"]["steps"]) == {
        "draining", "installing", "rebooting", "verifying", "done"}
    assert "gpu-node-03              595.91.07 -> 615.71.09 done" in output


def test_running_it_again_changes_nothing_on_the_nodes(fleet):
    if fleet.record(fleet.nodes()["gpu-node-01"]) is None:
        pytest.skip("needs the confirmed run of the previous test")
    since = time.time()
    _rc, output = fleet.run(gpuops_confirm="gpulab")
    assert "Skipped: gpu-node-01: already at %s" % NEW in output
    assert fleet.boots(since) == {}


def test_a_canary_whose_dkms_build_fails_stops_the_roll_out_and_stays_cordoned(small_fleet):
    small_fleet.lab.gpulab("fault", "gpu-node-01", "dkms-fail")
    since = time.time()
    rc, output = small_fleet.run(check=False, gpuops_confirm="gpulab")
    assert rc != 0
    nodes = small_fleet.nodes()
    canary, other = nodes["gpu-node-01"], nodes["gpu-node-02"]
    assert canary["spec"].get("unschedulable") is True
    record = small_fleet.record(canary)
    # the twin's dkms-fail makes the runfile's DKMS build fail, as a missing compiler or headers would
    assert record["state"] == "failed" and "dkms" in record["reason"], record
    # nothing touched after the failed gate
    assert small_fleet.record(other) is None and not other["spec"].get("unschedulable")
    assert other["metadata"]["labels"][DRIVER_LABEL] == OLD
    assert small_fleet.boots(since) == {}          # the install failed: no reboot was attempted
    small_fleet.check_invariants(max_unavailable=1)
    assert "stopped after batch 1" in output


def test_a_full_disk_is_refused_before_any_drain(small_fleet):
    small_fleet.lab.gpulab("fault", "gpu-node-02", "disk-full")
    since = time.time()
    rc, output = small_fleet.run(check=False, gpuops_confirm="gpulab")
    assert rc != 0
    assert "gpu-node-02 does not meet" in output and "disk" in output
    assert all(small_fleet.record(node) is None and not node["spec"].get("unschedulable")
               for node in small_fleet.nodes().values())
    assert small_fleet.boots(since) == {}


def test_a_run_killed_mid_batch_resumes_without_a_second_reboot(small_fleet):
    since = time.time()
    process = small_fleet.run(background=True, gpuops_confirm="gpulab", gpuops_run_id="it-resume")
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline:
            record = small_fleet.record(small_fleet.nodes()["gpu-node-01"])
            if record and record["state"] == "verifying":
                break
            assert process.poll() is None, process.stdout.read()[-4000:]
            time.sleep(0.5)
        else:
            raise AssertionError("the canary never reached verifying")
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    _rc, output = small_fleet.run(gpuops_confirm="gpulab", gpuops_run_id="it-resume")
    assert "(resume: verify)" in output
    nodes = small_fleet.nodes()
    assert all(small_fleet.record(node)["state"] == "done" for node in nodes.values())
    assert small_fleet.boots(since) == {"gpu-node-01": 1, "gpu-node-02": 1}
    small_fleet.check_invariants(max_unavailable=1)
