"""Seed case 6: a MIG fleet upgraded across a major driver version keeps its MIG layouts.

Four H100 nodes, the device plugin's mixed strategy, GPUs 0 and 1 of each in MIG mode with a layout made with
nvidia-smi (GPU 0: 3g.40gb, 2g.20gb, 2 x 1g.10gb; GPU 1: 4g.40gb, 3g.40gb), the other six whole. The runbook
upgrades 595 -> 615 (the branch changes: a major upgrade) in 2-node batches. The twin drops the MIG instances at
each reboot and keeps MIG mode, as a GPU does; the runbook reads each layout before, re-creates it after the
reboot and waits for the layout's `nvidia.com/mig-*` resources. gpu-node-04 has the twin's `mig-create-fail`
(`nvidia-smi mig -cgi` answers NVML's Unknown Error): it ends cordoned, its record naming the GPU and the error.

A run killed while a MIG node reboots (two nodes of their own, the same layout) is resumed: the node came back
without its MIG instances, and the resumed run re-creates the layout from the node's record (`mig_layout`, written
before the drain), so the node is given back with its MIG resources, after one boot.

The upgrade runs dry first (gpuops_confirm unset: nothing changes). After it, gpu-node-04 (MIG GPUs without
instances, `mig -cgi` failing) gets the GSP's Xid 119 on GPU 0: `diagnose` names case 6 (`mig_create_failed`)
with the reset and re-create, and changes nothing.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest

from conftest import collections_path, start_lab, stop_lab
from diagnose_helpers import run_diagnose
from upgrade_helpers import DRIVER_LABEL, NEW, OLD, Fleet

pytestmark = pytest.mark.skipif(collections_path() is None, reason="the collection tree is not built (make tree)")

NODES = ["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04"]
BROKEN = "gpu-node-04"
LAYOUT = {0: ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], 1: ["4g.40gb", "3g.40gb"]}
# what the mixed strategy advertises for LAYOUT on an 8-GPU node
RESOURCES = {"nvidia.com/mig-3g.40gb": "2", "nvidia.com/mig-2g.20gb": "1", "nvidia.com/mig-1g.10gb": "2",
             "nvidia.com/mig-4g.40gb": "1", "nvidia.com/gpu": "6"}


def make_layout(lab, node: str) -> None:
    """MIG mode on GPUs 0 and 1 (pending until a reset), then their instances, as an operator would."""
    commands = []
    for index, profiles in LAYOUT.items():
        commands += ["nvidia-smi -i %d -mig 1" % index, "nvidia-smi -i %d -r" % index,
                     "nvidia-smi mig -i %d -cgi %s -C" % (index, ",".join(profiles))]
    lab.ssh(node, " && ".join(commands), timeout=60)


def mig_listing(lab, node: str) -> list:
    """The profiles of the node's MIG devices as `nvidia-smi -L` lists them, sorted."""
    listing = lab.ssh(node, "nvidia-smi -L").stdout
    return sorted(line.split()[1] for line in listing.splitlines() if line.strip().startswith("MIG"))


def mig_resources(node: dict) -> dict:
    allocatable = node["status"].get("allocatable") or {}
    return {name: value for name, value in allocatable.items() if name in RESOURCES}


def wait_for(predicate, timeout=90):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(1)
    return False


@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("mig-fleet") / "state")
    lab = start_lab(state_dir, "--nodes", "4", "--driver", OLD, "--runfile", OLD, "--boot-delay", "0.5",
                    "--mig-strategy", "mixed")
    fleet = Fleet(lab, tmp_path_factory.mktemp("mig-runs"))
    try:
        for name in NODES:
            make_layout(lab, name)
        # the device plugin reads the MIG devices when it starts
        fleet.module("device_plugin_restart", {"nodes": NODES})
        assert wait_for(lambda: all(mig_resources(node) == RESOURCES for node in fleet.nodes().values())), \
            {name: mig_resources(node) for name, node in fleet.nodes().items()}
        lab.gpulab("fault", BROKEN, "mig-create-fail")
        yield fleet
    finally:
        subprocess.run(["kubectl", "--kubeconfig", fleet.kubeconfig, "uncordon", BROKEN], capture_output=True,
                       timeout=60)
        stop_lab(lab)
        shutil.rmtree(tmp_path_factory.getbasetemp() / "mig-fleet0", ignore_errors=True)


@pytest.fixture()
def resume_fleet(needs_root, tmp_path):
    """Two MIG nodes of their own (the layout above), for a run killed mid-way; set up and gone before `fleet`."""
    lab = start_lab(str(tmp_path / "state"), "--nodes", "2", "--driver", OLD, "--runfile", OLD, "--boot-delay", "0.5",
                    "--mig-strategy", "mixed")
    fleet = Fleet(lab, tmp_path)
    try:
        for name in NODES[:2]:
            make_layout(lab, name)
        fleet.module("device_plugin_restart", {"nodes": NODES[:2]})
        assert wait_for(lambda: all(mig_resources(node) == RESOURCES for node in fleet.nodes().values())), \
            {name: mig_resources(node) for name, node in fleet.nodes().items()}
        yield fleet
    finally:
        stop_lab(lab)


def test_a_run_killed_during_a_mig_nodes_reboot_recreates_the_layout_from_the_record(resume_fleet):
    fleet, canary = resume_fleet, NODES[0]
    # the canary stays down for 5 s (boot delay x 10): the run is killed while it reboots, before any re-create
    fleet.lab.gpulab("fault", canary, "slow-boot")
    since = time.time()
    process = fleet.run(background=True, gpuops_confirm="gpulab", gpuops_run_id="mig-resume")
    try:
        deadline = time.monotonic() + 600
        while not fleet.lab.events(node=canary, kind="down", since=since):
            assert process.poll() is None, process.stdout.read()[-4000:]
            assert time.monotonic() < deadline, "the canary never rebooted"
            time.sleep(0.2)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    fleet.lab.wait_status(canary, "up", timeout_s=120)
    fleet.lab.gpulab("clear", canary, "slow-boot")
    record = fleet.record(fleet.nodes()[canary])
    assert record["state"] == "rebooting", record
    # the kubelet reports the new boot: the resume verifies the node, it does not reboot it again
    assert wait_for(lambda: fleet.nodes()[canary]["status"]["nodeInfo"]["bootID"] != record["boot_id_before"])
    assert [(gpu["index"], gpu["profiles"]) for gpu in record["mig_layout"]] == sorted(LAYOUT.items()), record
    # the reboot dropped the instances (MIG mode stays): reading the node again finds no layout
    assert mig_listing(fleet.lab, canary) == []

    _rc, output = fleet.run(gpuops_confirm="gpulab", gpuops_run_id="mig-resume")
    assert "(resume: verify)" in output, output[-4000:]
    assert fleet.boots(since) == {name: 1 for name in NODES[:2]}, output[-4000:]
    for name, node in fleet.nodes().items():
        assert fleet.record(node)["state"] == "done", (name, fleet.record(node))
        assert node["metadata"]["labels"].get(DRIVER_LABEL) == NEW, name
        assert not node["spec"].get("unschedulable"), (name, output[-4000:])
        assert mig_resources(node) == RESOURCES, (name, mig_resources(node))
        assert mig_listing(fleet.lab, name) == sorted(LAYOUT[0] + LAYOUT[1]), name


def test_a_major_upgrade_keeps_the_mig_layouts_and_fails_the_node_whose_layout_cannot_be_recreated(fleet):
    # the dry run first (gpuops_confirm unset): the plan, and nothing changed on the same fleet
    since = time.time()
    _rc, output = fleet.run(gpuops_upgrade_batches=[2, 2], gpuops_max_unavailable=2, gpuops_max_fail_percentage=50)
    assert "dry run: nothing will be changed" in output, output[-4000:]
    assert fleet.boots(since) == {}
    assert fleet.lock_holder() is None
    for name, node in fleet.nodes().items():
        assert fleet.record(node) is None and not node["spec"].get("unschedulable"), name
        assert node["metadata"]["labels"].get(DRIVER_LABEL) != NEW, name
        assert mig_resources(node) == RESOURCES, (name, mig_resources(node))
        assert mig_listing(fleet.lab, name) == sorted(LAYOUT[0] + LAYOUT[1]), name

    since = time.time()
    rc, output = fleet.run(check=False, gpuops_confirm="gpulab", gpuops_run_id="mig-major",
                           gpuops_upgrade_batches=[2, 2], gpuops_max_unavailable=2,
                           gpuops_max_fail_percentage=50)
    assert "Re-create the node's MIG layout" in output, output[-4000:]
    assert fleet.boots(since) == {name: 1 for name in NODES}, output[-4000:]
    nodes = fleet.nodes()
    for name in NODES[:3]:
        node = nodes[name]
        assert node["metadata"]["labels"].get(DRIVER_LABEL) == NEW, name
        assert not node["spec"].get("unschedulable"), (name, output[-4000:])
        assert fleet.record(node)["state"] == "done", (name, fleet.record(node))
        # the layout is back, and the cluster can schedule on every MIG device of it
        assert mig_resources(node) == RESOURCES, (name, mig_resources(node))
        assert mig_listing(fleet.lab, name) == sorted(LAYOUT[0] + LAYOUT[1]), name
    broken = nodes[BROKEN]
    assert broken["spec"].get("unschedulable"), output[-4000:]
    record = fleet.record(broken)
    assert record["state"] == "failed", record
    assert "MIG layout not re-created" in record["reason"] and "Unknown Error" in record["reason"], record
    assert "GPU 0 (3g.40gb,2g.20gb,1g.10gb,1g.10gb)" in record["reason"], record
    # the driver itself is in: only the layout is missing, and the node stays out of the pool
    assert broken["metadata"]["labels"].get(DRIVER_LABEL) == NEW
    assert "nvidia.com/mig-3g.40gb" not in {k for k, v in (broken["status"].get("allocatable") or {}).items()
                                            if v not in ("0", 0)}
    assert rc != 0 or "failed" in output


def test_diagnose_names_case_6_on_the_node_whose_layout_cannot_be_recreated_and_changes_nothing(fleet, tmp_path):
    """After the upgrade above: gpu-node-04 upgraded, its MIG GPUs without instances (`mig -cgi` answers Unknown
    Error), and the GSP's Xid 119 on GPU 0 in its kernel log: diagnose names seed case 6 (mig_create_failed) with
    the reset and the re-create, and changes nothing."""
    assert mig_listing(fleet.lab, BROKEN) == []
    fleet.lab.gpulab("fault", BROKEN, "xid:119:0")
    before = fleet.nodes()[BROKEN]
    since = time.time()
    rc, shown, changed, failed = run_diagnose(fleet.lab, tmp_path / "diagnose", limit=BROKEN)
    assert rc == 0 and not failed, shown
    assert not changed
    seen = shown[BROKEN]
    assert 6 in [case["case"] for case in seen["cases"]], seen
    found = [entry for entry in seen["diagnosis"] if entry["code"] == "mig_create_failed"]
    assert len(found) == 1, seen["diagnosis"]
    assert "GPU 0" in found[0]["message"] and "Xid 119" in found[0]["message"], found
    assert "NVML_ERROR_UNKNOWN" in found[0]["message"]
    assert "nvidia-smi -i 0 -r" in found[0]["remedy"] and "nvidia-smi mig -i 0 -cgi" in found[0]["remedy"], found
    assert "restart the device plugin" in found[0]["remedy"]
    # nothing changed: no boot, the node as it was (cordoned, same record), still no MIG instance
    after = fleet.nodes()[BROKEN]
    assert fleet.boots(since) == {}
    assert after["spec"].get("unschedulable") == before["spec"].get("unschedulable")
    assert fleet.record(after) == fleet.record(before)
    assert mig_listing(fleet.lab, BROKEN) == []
    fleet.lab.gpulab("clear", BROKEN, "mig-create-fail")
