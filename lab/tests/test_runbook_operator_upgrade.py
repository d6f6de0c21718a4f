"""The driver upgrade runbook (`gpuops.nvidia.driver_upgrade`) on a GPU Operator-managed twin (`--gpu-operator`).

One 4-node lab whose GPU Operator runs the driver 595.91.07 (ClusterPolicy `cluster-policy`, autoUpgrade on, the
twin's Operator timers scaled by 0.01), used by the scenarios in order, each judged from the twin's records and what
the API and the nodes show:
1. the default run prints a plan naming Operator mode and changes nothing;
2. with `operator-driver-fail` on the canary a confirmed run stops: the canary is marked (failed record, skip label,
   cordoned), the other three still run the old driver, held back;
3. the fault cleared, a re-run resumes: canary first, then the rest, the ClusterPolicy and every node's driver at
   615.71.09, nothing cordoned, no skip label, hold mark or Operator state in progress left, the lock released, no
   reboot, the invariants kept;
4. autoUpgrade off, the same runbook rolls back to 595.91.07 (going back is a paced roll-out) restarting each
   drained node's driver pod itself.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import Lab, collections_path, stop_lab
from test_runbook_driver_upgrade import Fleet

OLD, NEW = "595.91.07", "615.71.09"
DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"
STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
SKIP_LABEL = "nvidia.com/gpu-driver-upgrade.skip"
HOLD = "gpuops.nvidia/operator-hold"
PREVIOUS = "gpuops.nvidia/driver-upgrade-previous"

pytestmark = pytest.mark.skipif(collections_path() is None, reason="the collection tree is not built (make tree)")


class OperatorFleet(Fleet):
    def extra_vars(self, **overrides) -> dict:
        values = dict(super().extra_vars(), gpuops_upgrade_batches=[1, 3], gpuops_max_unavailable=3,
                      gpuops_ready_timeout=300)
        values.update(overrides)
        return values

    @property
    def names(self) -> list:
        return self.lab.node_names

    def cluster_policy(self) -> dict:
        return self.kubectl_json("get", "clusterpolicy", "cluster-policy")

    def driver_pods(self) -> dict:
        pods = self.kubectl_json("get", "pods", "-n", "gpu-operator", "-l", "app=nvidia-driver-daemonset")["items"]
        return {pod["spec"]["nodeName"]: pod for pod in pods}

    def loaded_version(self, node: str) -> str:
        return self.lab.ssh(node, "cat /proc/driver/nvidia/version").stdout.split("Kernel Module")[1].split()[2]


def start_patiently(state_dir: str, *up_args, ready_timeout_s: float = 900) -> Lab:
    """`gpulab up`, waiting past its own readiness timeout (60 s + 5 s per node): on a loaded shared machine the
    nodes and the driver pods' first builds can take longer, and the daemon goes on starting the lab."""
    lab = Lab(state_dir)
    done = lab.gpulab("up", *up_args, check=False, timeout=ready_timeout_s)
    if done.returncode != 0:
        deadline = time.monotonic() + ready_timeout_s
        while "not ready after" in done.stdout + done.stderr and time.monotonic() < deadline:
            if os.path.exists(os.path.join(state_dir, "lab.json")) and lab.info.get("status") == "ready":
                return lab
            if lab.info.get("error"):
                break
            time.sleep(1)
        stop_lab(lab)
        raise AssertionError("gpulab up failed: %s%s" % (done.stdout, done.stderr))
    return lab


@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    base = tmp_path_factory.mktemp("operator-fleet")
    lab = start_patiently(str(base / "state"), "--nodes", "4", "--driver", OLD, "--gpu-operator",
                          "--operator-time-scale", "0.01", "--boot-delay", "0.5")
    yield OperatorFleet(lab, tmp_path_factory.mktemp("operator-fleet-runs"))
    stop_lab(lab)
    shutil.rmtree(str(base), ignore_errors=True)


def test_the_default_run_prints_a_plan_in_operator_mode_and_changes_nothing(fleet):
    _rc, output = fleet.run()
    assert "dry run: nothing will be changed" in output
    assert "Install: GPU Operator mode (ClusterPolicy cluster-policy runs the driver" in output
    assert "ClusterPolicy cluster-policy spec.driver.version: %s -> %s" % (OLD, NEW) in output
    assert "autoUpgrade on: the upgrade controller restarts each released node" in output
    assert "Batch 1/2 (canary):" in output and "gpu-node-01" in output.split("Batch 2/2")[0]
    assert fleet.cluster_policy()["spec"]["driver"]["version"] == OLD
    for name, node in fleet.nodes().items():
        assert fleet.record(node) is None and not node["spec"].get("unschedulable"), name
        assert SKIP_LABEL not in node["metadata"]["labels"] and HOLD not in node["metadata"]["annotations"], name
    assert fleet.lock_holder() is None


def test_forcing_a_host_install_on_operator_managed_nodes_is_refused(fleet):
    rc, output = fleet.run(check=False, gpuops_confirm="gpulab", gpuops_driver_install_method="runfile")
    assert rc != 0
    assert "runfile: the GPU Operator runs the driver of %s" % ", ".join(fleet.names) in output
    assert fleet.cluster_policy()["spec"]["driver"]["version"] == OLD
    assert all(fleet.record(node) is None for node in fleet.nodes().values())


def test_a_canary_whose_driver_container_fails_stops_the_roll_out_held_and_marked(fleet):
    fleet.lab.gpulab("fault", "gpu-node-01", "operator-driver-fail")
    since = time.time()
    rc, output = fleet.run(check=False, gpuops_confirm="gpulab", gpuops_run_id="op-fail")
    assert rc != 0 and "stopped after batch 1" in output
    policy = fleet.cluster_policy()
    assert policy["spec"]["driver"]["version"] == NEW
    assert json.loads(policy["metadata"]["annotations"][PREVIOUS])["version"] == OLD
    nodes = fleet.nodes()
    canary = nodes["gpu-node-01"]
    record = fleet.record(canary)
    assert record["state"] == "failed" and "driver pod" in record["reason"], record
    assert canary["spec"].get("unschedulable") is True
    assert canary["metadata"]["labels"][SKIP_LABEL] == "true"
    for name in fleet.names[1:]:
        node = nodes[name]
        assert fleet.record(node) is None and not node["spec"].get("unschedulable"), name
        assert node["metadata"]["labels"][SKIP_LABEL] == "true", name           # still held back
        assert node["metadata"]["labels"][DRIVER_LABEL] == OLD, name
        assert fleet.loaded_version(name) == OLD, name
    assert fleet.boots(since) == {}
    assert fleet.lock_holder() is None
    fleet.check_invariants(max_unavailable=3)


def test_a_re_run_after_the_fault_is_cleared_resumes_and_finishes_clean(fleet):
    if fleet.record(fleet.nodes()["gpu-node-01"]) is None:
        pytest.skip("needs the stopped run of the previous test")
    fleet.lab.gpulab("clear", "gpu-node-01", "operator-driver-fail")
    since = time.time()
    _rc, output = fleet.run(gpuops_confirm="gpulab", gpuops_run_id="op-resume")
    assert "(resume: continue)" in output
    policy = fleet.cluster_policy()
    assert policy["spec"]["driver"]["version"] == NEW
    assert PREVIOUS not in (policy["metadata"].get("annotations") or {})
    nodes = fleet.nodes()
    for name in fleet.names:
        node = nodes[name]
        labels, annotations = node["metadata"]["labels"], node["metadata"]["annotations"]
        assert labels[DRIVER_LABEL] == NEW and fleet.loaded_version(name) == NEW, name
        assert not node["spec"].get("unschedulable"), name
        assert SKIP_LABEL not in labels and HOLD not in annotations, name
        assert "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable" not in annotations, name
        assert labels.get(STATE_LABEL, "") in ("", "upgrade-done"), name
        assert fleet.record(node)["state"] == "done", name
    steps = {name: fleet.record(nodes[name])["steps"] for name in fleet.names}
    assert all(steps["gpu-node-01"]["done"] <= steps[name]["draining"] for name in fleet.names[1:])   # canary first
    assert fleet.boots(since) == {}                 # Operator mode: the driver container swaps the modules
    assert fleet.lock_holder() is None
    fleet.check_invariants(max_unavailable=3)
    with open(os.path.join(fleet.record_dir, "driver-upgrade-op-resume.json")) as stream:
        run_record = json.load(stream)
    assert run_record["outcome"] == "completed"
    assert run_record["plan"]["install"]["sources"][0]["previous_version"] == OLD


def test_with_auto_upgrade_off_the_runbook_restarts_the_driver_pods_itself(fleet):
    if fleet.cluster_policy()["spec"]["driver"]["version"] != NEW:
        pytest.skip("needs the completed run of the previous test")
    patch = json.dumps({"spec": {"driver": {"upgradePolicy": {"autoUpgrade": False}}}})
    subprocess.run(["kubectl", "--kubeconfig", fleet.kubeconfig, "patch", "clusterpolicy", "cluster-policy",
                    "--type", "merge", "-p", patch], check=True, capture_output=True, timeout=60)
    since = time.time()
    before = {name: pod["metadata"]["name"] for name, pod in fleet.driver_pods().items()}
    _rc, output = fleet.run(gpuops_confirm="gpulab", gpuops_driver_version=OLD, gpuops_run_id="op-back")
    assert "autoUpgrade off: the runbook restarts each drained node's driver pod" in output
    assert fleet.cluster_policy()["spec"]["driver"]["version"] == OLD
    after = fleet.driver_pods()
    nodes = fleet.nodes()
    for name in fleet.names:
        assert after[name]["metadata"]["name"] != before[name], name                 # a new pod on every node
        assert nodes[name]["metadata"]["labels"][DRIVER_LABEL] == OLD and fleet.loaded_version(name) == OLD, name
        assert not nodes[name]["spec"].get("unschedulable"), name
        assert SKIP_LABEL not in nodes[name]["metadata"]["labels"], name
    assert fleet.boots(since) == {}
    fleet.check_invariants(max_unavailable=3)
