"""Change kind `mig_layout` (docs/change_mig_layout.md): a MIG layout applied per GPU pool through the change engine.

In process first: the twin's kubelet ledger follows a new layout as a real kubelet does - the plugin restarted after
`nvidia-smi mig` registers the new profiles, a profile the layout dropped keeps its capacity with 0 allocatable for
the kubelet's stop grace period (endpointStopGracePeriod, 5 min; shortened here), then leaves the Node - and the
single strategy's plugin refuses a layout of two profiles.

Then the runbook over real SSH on three H100 nodes without the GPU Operator (nvidia-smi mode, the device plugin's
mixed strategy), canary gpu-node-01 then a batch of two: a dry run changes nothing; a confirmed run killed once the
canary is done is resumed (the canary left alone) and leaves every node with GPUs 0 and 1 split in two 3g.40gb each,
their `nvidia.com/mig-3g.40gb` allocatable, at most two nodes out at once (the twin's records); a layout the GPU
cannot take (two 4g.40gb: 8 of 7 slices) fails the canary and, with rollback, the canary gets that layout back and
the run stops; without rollback a failed canary stops the run, cordoned, its record naming the nvidia-smi command
and its error. The MIG Manager mode was tried by hand on the Operator twin, not here:
an Operator lab costs minutes of CI.
"""
from __future__ import annotations

import os
import shutil
import signal
import time

import pytest

from change_helpers import ChangeFleet
from conftest import collections_path, start_lab, stop_lab
from gpulab.kube.sim.deviceplugin import NAMESPACE as PLUGIN_NAMESPACE
from gpulab.kube.testing import FakeNodeView, make_gpus, wait_for
from test_kube_cluster_controllers import make_cluster, plugin_pod  # noqa: F401 (make_cluster: a fixture)


def _status(store, node):
    status = store.get("nodes", node)["status"]
    return ({name: value for name, value in status["capacity"].items() if name.startswith("nvidia.com/")},
            {name: value for name, value in status["allocatable"].items() if name.startswith("nvidia.com/")})


def test_a_profile_the_new_layout_drops_leaves_the_node_after_the_kubelets_grace(make_cluster):
    view = FakeNodeView("gpu-0", gpus=make_gpus(2, mig_profiles=["3g.40gb", "3g.40gb"]))
    cluster = make_cluster([view], mig_strategy="mixed")
    store = cluster.store
    wait_for(lambda: _status(store, "gpu-0")[1].get("nvidia.com/mig-3g.40gb") == "4", what="the first layout")
    cluster.config.plugin_stop_grace_s = 3.0
    view.set_gpus(make_gpus(2, mig_profiles=["1g.10gb"] * 7), notify=False)
    store.delete("pods", plugin_pod(store, "gpu-0")["metadata"]["name"], PLUGIN_NAMESPACE)
    wait_for(lambda: _status(store, "gpu-0")[1].get("nvidia.com/mig-1g.10gb") == "14", what="the new layout")
    capacity, allocatable = _status(store, "gpu-0")
    # within the grace: the old profile is still in capacity, none of it allocatable
    assert capacity["nvidia.com/mig-3g.40gb"] == "4" and allocatable["nvidia.com/mig-3g.40gb"] == "0", (capacity,
                                                                                                      allocatable)
    started = time.monotonic()
    wait_for(lambda: "nvidia.com/mig-3g.40gb" not in _status(store, "gpu-0")[0], what="the old profile gone")
    assert time.monotonic() - started < 6
    capacity, allocatable = _status(store, "gpu-0")
    assert capacity == {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "14"}, capacity
    assert allocatable == capacity


def test_the_single_strategy_plugin_refuses_two_profiles_and_takes_one(make_cluster):
    """The plugin's device map with the single strategy: every MIG device of one type, none beside a whole GPU; a
    plugin started on another layout crash-loops with its error, one started on a uniform layout registers the MIG
    devices as nvidia.com/gpu."""
    view = FakeNodeView("gpu-0", gpus=make_gpus(2))
    cluster = make_cluster([view], mig_strategy="single")
    store = cluster.store
    wait_for(lambda: _status(store, "gpu-0")[1].get("nvidia.com/gpu") == "2", what="two whole GPUs")
    view.set_gpus(make_gpus(2, mig_profiles=["3g.40gb", "1g.10gb"]), notify=False)
    store.delete("pods", plugin_pod(store, "gpu-0")["metadata"]["name"], PLUGIN_NAMESPACE)
    pod = wait_for(lambda: (plugin_pod(store, "gpu-0") or {}).get("status", {}).get("containerStatuses")
                   and plugin_pod(store, "gpu-0")["status"]["containerStatuses"][0]["state"].get("waiting")
                   and plugin_pod(store, "gpu-0"), what="the plugin crash-looping")
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    log = cluster.logs.get(PLUGIN_NAMESPACE, pod["metadata"]["name"]) or ""
    assert "invalid MIG configuration: more than one MIG device type present on node" in log, log
    wait_for(lambda: _status(store, "gpu-0")[1]["nvidia.com/gpu"] == "0", what="no GPU allocatable")
    view.set_gpus(make_gpus(2, mig_profiles=["1g.10gb"] * 7), notify=False)
    wait_for(lambda: _status(store, "gpu-0")[1].get("nvidia.com/gpu") == "14", what="the uniform layout registered")


NODES = ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
LAYOUT = [{"devices": [0, 1], "profiles": ["3g.40gb", "3g.40gb"]}]
PROFILES = {0: ["3g.40gb", "3g.40gb"], 1: ["3g.40gb", "3g.40gb"]}
# what the mixed strategy advertises for LAYOUT on an 8-GPU node
RESOURCES = {"nvidia.com/gpu": "6", "nvidia.com/mig-3g.40gb": "4"}
TOO_BIG = [{"devices": [0], "profiles": ["4g.40gb", "4g.40gb"]}]
ALSO_TOO_BIG = [{"devices": [1], "profiles": ["7g.80gb", "1g.10gb"]}]
SETTINGS = {"gpuops_max_unavailable": 2}
INPUTS = {"stable_seconds": 1, "timeout": 120}


def profiles_of(lab, node: str) -> dict:
    """GPU index -> the profiles of its MIG devices, as `nvidia-smi -L` lists them (GPUs without any left out)."""
    layout, index = {}, None
    for line in lab.ssh(node, "nvidia-smi -L").stdout.splitlines():
        if line.startswith("GPU "):
            index = int(line.split()[1].rstrip(":"))
        elif line.strip().startswith("MIG "):
            layout.setdefault(index, []).append(line.split()[1])
    return layout


def gpu_resources(node: dict) -> dict:
    allocatable = node["status"].get("allocatable") or {}
    return {name: value for name, value in allocatable.items() if name.startswith("nvidia.com/") and value != "0"}


@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    if collections_path() is None:
        pytest.skip("the collection tree is not built (make tree)")
    base = tmp_path_factory.mktemp("change-mig-layout")
    lab = start_lab(str(base / "state"), "--nodes", "3", "--driver", "595.91.07", "--boot-delay", "0.5",
                    "--mig-strategy", "mixed")
    try:
        yield ChangeFleet(lab, base, "mig_layout")
    finally:
        stop_lab(lab)
        shutil.rmtree(base, ignore_errors=True)


def test_a_dry_run_plans_canary_then_two_and_changes_nothing(fleet):
    since = time.time()
    _rc, output = fleet.run(dict(INPUTS, layout=LAYOUT), **SETTINGS)
    assert "dry run: nothing will be changed" in output, output[-3000:]
    for name, node in fleet.nodes().items():
        assert fleet.change_record(node) is None and not node["spec"].get("unschedulable"), name
        assert profiles_of(fleet.lab, name) == {}, name
    assert fleet.plugin_restarts(since) == {}


def test_a_run_killed_after_the_canary_is_resumed_and_gives_every_node_the_layout(fleet):
    since = time.time()
    process = fleet.run(dict(INPUTS, layout=LAYOUT), background=True, gpuops_confirm="gpulab",
                        gpuops_run_id="mig-a", **SETTINGS)
    try:
        deadline = time.monotonic() + 300
        while (fleet.change_record(fleet.nodes()[NODES[0]]) or {}).get("state") != "done":
            assert process.poll() is None, process.stdout.read()[-4000:]
            assert time.monotonic() < deadline, "the canary was never done"
            time.sleep(0.5)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    canary_done = fleet.change_record(fleet.nodes()[NODES[0]])
    resumed = time.time()
    # the same run id: the killed run's lock is its own (its holder token)
    _rc, output = fleet.run(dict(INPUTS, layout=LAYOUT), gpuops_confirm="gpulab", gpuops_run_id="mig-a", **SETTINGS)
    nodes = fleet.nodes()
    records = {name: fleet.change_record(node) for name, node in nodes.items()}
    assert {record["state"] for record in records.values()} == {"done"}, records
    assert len({record["change"] for record in records.values()}) == 1, records
    # the resume left the canary alone: its record as the killed run left it, its plugin not restarted again
    assert records[NODES[0]] == canary_done, records[NODES[0]]
    assert NODES[0] not in fleet.plugin_restarts(resumed), output[-3000:]
    assert fleet.plugin_restarts(since).get(NODES[0]) == 1
    for name in NODES[1:]:
        assert records[name]["steps"]["applying"] >= canary_done["steps"]["done"], records
        assert records[name]["previous"]["mode"] == "nvidia_smi", records[name]
    for name, node in nodes.items():
        assert profiles_of(fleet.lab, name) == PROFILES, name
        assert gpu_resources(node) == RESOURCES, (name, gpu_resources(node))
        assert not node["spec"].get("unschedulable"), name
    fleet.check_invariants(max_unavailable=2)


def test_a_layout_the_gpu_cannot_take_fails_the_canary_and_rollback_restores_its_layout(fleet):
    since = time.time()
    rc, output = fleet.run(dict(INPUTS, layout=TOO_BIG), check=False, gpuops_confirm="gpulab",
                           gpuops_change_rollback_on_failure=True, gpuops_canary_nodes=[NODES[0]], **SETTINGS)
    assert rc != 0, output[-3000:]
    nodes = fleet.nodes()
    record = fleet.change_record(nodes[NODES[0]])
    assert record["state"] == "rolled-back" and "Insufficient Resources" in record["reason"], record
    # captured afresh for this change: the layout the earlier change left, which the rollback put back
    assert record["previous"]["layout"][0] == {"devices": [0], "mig_enabled": True,
                                               "profiles": ["3g.40gb", "3g.40gb"]}, record
    assert profiles_of(fleet.lab, NODES[0]) == PROFILES
    assert gpu_resources(nodes[NODES[0]]) == RESOURCES and not nodes[NODES[0]]["spec"].get("unschedulable")
    for name in NODES[1:]:
        assert fleet.change_record(nodes[name])["state"] == "done", name   # the earlier change's record
        assert profiles_of(fleet.lab, name) == PROFILES, name
    assert set(fleet.plugin_restarts(since)) == {NODES[0]}


def test_a_failed_canary_without_rollback_stops_the_run_cordoned_saying_why(fleet):
    rc, output = fleet.run(dict(INPUTS, layout=ALSO_TOO_BIG), check=False, gpuops_confirm="gpulab",
                           gpuops_canary_nodes=[NODES[1]], **SETTINGS)
    assert rc != 0, output[-3000:]
    nodes = fleet.nodes()
    record = fleet.change_record(nodes[NODES[1]])
    assert record["state"] == "failed", record
    assert "nvidia-smi mig -i 1 -cgi 7g.80gb,1g.10gb -C" in record["reason"], record
    assert "Insufficient Resources" in record["reason"], record
    assert nodes[NODES[1]]["spec"].get("unschedulable"), "the failed canary is given back"
    for name in (NODES[0], NODES[2]):
        assert fleet.change_record(nodes[name])["state"] in ("done", "rolled-back"), name
        assert not nodes[name]["spec"].get("unschedulable"), name
        assert profiles_of(fleet.lab, name) == PROFILES, name
