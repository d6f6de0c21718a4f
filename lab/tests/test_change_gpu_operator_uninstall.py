"""The change kind `gpu_operator_uninstall` of `gpuops.nvidia.change` on a GPU Operator twin (`--gpu-operator`).

One 3-node lab whose Operator runs the driver 595.91.07; each node carries what the Operator's container-toolkit
operand leaves on a host (`gpulab/nvidia/toolkitoperand.py`: the containerd drop-in with the runtimes nvidia,
nvidia-cdi and nvidia-legacy, the binaries under /usr/local/nvidia/toolkit, /run/nvidia). The scenarios, in order,
judged from the API, the nodes and the twin's records:
1. a dry run refuses while a pod asks for a GPU outside the Operator's namespace, naming it; without it the dry
   run prints the plan; neither changes anything;
2. a confirmed run whose canary still has the NVIDIA runtime in containerd's main config (a toolkit before 1.18
   wrote it there) backs up the ClusterPolicy, uninstalls the Operator and its CRDs, then stops on the canary:
   the canary is recorded failed and stays cordoned, the other two are untouched;
3. the canary's config fixed, the run again: the canary is continued first, then the batch of two; every node
   ends clean (no NVIDIA runtime in `containerd config dump`, containerd active, no toolkit, no /run/nvidia, no
   Operator pod), uncordoned, recorded done; the first run's backup stays; no reboot; the checker's invariants
   hold. The kind has no rollback (the backup is how to reinstall).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from change_helpers import ChangeFleet
from conftest import collections_path, start_lab, stop_lab

DRIVER = "595.91.07"
KIND = "gpu_operator_uninstall"
INPUTS = {"operand_timeout": 120}
NAMES = ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
MAIN_CONFIG = "/etc/containerd/config.toml"
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
# what a Container Toolkit before 1.18 wrote into the main config itself (no drop-in)
OLD_TOOLKIT_ENTRY = """
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
    BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"
"""
GPU_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer", "namespace": "default"},
           "spec": {"containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                                    "command": ["sleep", "infinity"],
                                    "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}

pytestmark = pytest.mark.skipif(collections_path() is None, reason="the collection tree is not built (make tree)")


class UninstallFleet(ChangeFleet):
    def run_change(self, check=True, **overrides):
        return self.run(INPUTS, check=check, **dict({"gpuops_max_unavailable": 2}, **overrides))

    def kubectl(self, *args, stdin=None):
        return subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig] + list(args), input=stdin,
                              capture_output=True, text=True, timeout=60)

    def operator_objects(self) -> dict:
        """What of the Operator the API still serves: CRDs, ClusterPolicies, its namespace's pods."""
        crds = [crd["metadata"]["name"] for crd in self.kubectl_json("get", "crd")["items"]]
        found = {"crds": sorted(name for name in crds if name.endswith(".nvidia.com")), "policies": [], "pods": []}
        if "clusterpolicies.nvidia.com" in crds:
            found["policies"] = [p["metadata"]["name"] for p in self.kubectl_json("get", "clusterpolicy")["items"]]
        found["pods"] = [p["metadata"]["name"] for p in
                         self.kubectl_json("get", "pods", "-n", "gpu-operator")["items"]]
        return found

    def node_state(self, name: str) -> dict:
        """What the clean-up removes, as the node shows it."""
        dump = self.lab.ssh(name, "containerd --config %s config dump" % MAIN_CONFIG).stdout
        shell = self.lab.ssh(name, "systemctl is-active containerd; test -e %s && echo drop-in; "
                                   "test -e /usr/local/nvidia/toolkit && echo toolkit; test -e /run/nvidia && echo run"
                             % DROP_IN, check=False).stdout.split()
        return {"nvidia_runtime": "nvidia-container-runtime" in dump, "containerd": shell[0],
                "left": sorted(set(shell[1:]))}


@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    base = tmp_path_factory.mktemp("operator-uninstall")
    lab = start_lab(str(base / "state"), "--nodes", "3", "--driver", DRIVER, "--gpu-operator",
                    "--operator-time-scale", "0.01", "--boot-delay", "0.3")
    yield UninstallFleet(lab, tmp_path_factory.mktemp("operator-uninstall-runs"), KIND)
    stop_lab(lab)
    shutil.rmtree(str(base), ignore_errors=True)


def assert_nothing_changed(fleet):
    assert fleet.operator_objects()["policies"] == ["cluster-policy"]
    for name, node in fleet.nodes().items():
        assert fleet.change_record(node) is None and not node["spec"].get("unschedulable"), name
    for name in NAMES:
        assert fleet.node_state(name)["left"] == ["drop-in", "run", "toolkit"], name
    assert fleet.lock_holder() is None


def test_a_dry_run_refuses_while_a_gpu_pod_runs_then_prints_the_plan_and_changes_nothing(fleet):
    assert fleet.kubectl("apply", "-f", "-", stdin=json.dumps(GPU_POD)).returncode == 0
    try:
        rc, output = fleet.run_change(check=False)
        assert rc != 0
        assert "1 pod(s) use NVIDIA GPUs outside gpu-operator: default/trainer on gpu-node-0" in output, output[-4000:]
        assert "(nvidia.com/gpu)" in output and "nothing was changed" in output
        assert_nothing_changed(fleet)
    finally:
        fleet.kubectl("delete", "pod", "trainer", "--wait=true")
    _rc, output = fleet.run_change()
    assert "ClusterPolicy cluster-policy, namespace gpu-operator" in output, output[-4000:]
    assert "Change gpu_operator_uninstall " in output and "(dry run: nothing will be changed)" in output
    assert "each node is drained while it changes; rollback: none" in output
    assert "Batch 1/2 (canary):" in output and "Batch 2/2 (batch):" in output
    assert_nothing_changed(fleet)


def test_a_canary_with_the_runtime_in_the_main_config_stops_the_run_after_the_operator_went(fleet):
    fleet.lab.ssh(NAMES[0], "cp %s /root/config.toml.orig && cat >> %s <<'EOF'\n%sEOF" % (
        MAIN_CONFIG, MAIN_CONFIG, OLD_TOOLKIT_ENTRY))
    since = time.time()
    rc, output = fleet.run_change(check=False, gpuops_confirm="gpulab", gpuops_run_id="uninstall-1")
    assert rc != 0 and "the change stopped after batch 1/2" in output, output[-4000:]
    assert fleet.operator_objects() == {"crds": [], "policies": [], "pods": []}
    backup = os.path.join(fleet.record_dir, "gpu-operator-backup-uninstall-1")
    with open(os.path.join(backup, "objects.json")) as stream:
        saved = json.load(stream)
    assert [(item["kind"], item["metadata"]["name"]) for item in saved] == [("ClusterPolicy", "cluster-policy")]
    assert saved[0]["spec"]["driver"]["version"] == DRIVER
    with open(os.path.join(backup, "manifests.yaml")) as stream:
        assert "kind: ClusterPolicy" in stream.read()
    nodes = fleet.nodes()
    canary = nodes[NAMES[0]]
    record = fleet.change_record(canary)
    assert record["state"] == "failed" and MAIN_CONFIG in record["reason"], record
    assert canary["spec"].get("unschedulable") is True
    for name in NAMES[1:]:
        assert fleet.change_record(nodes[name]) is None and not nodes[name]["spec"].get("unschedulable"), name
        assert fleet.node_state(name)["left"] == ["drop-in", "run", "toolkit"], name
    assert fleet.boots(since) == {}
    assert fleet.lock_holder() is None


def test_the_fixed_canary_resumes_then_the_batch_of_two_and_every_node_ends_clean(fleet):
    if fleet.change_record(fleet.nodes()[NAMES[0]]) is None:
        pytest.skip("needs the stopped run of the previous test")
    # a person fixes the canary's main config and marks its record for resume
    fleet.lab.ssh(NAMES[0], "cp /root/config.toml.orig %s" % MAIN_CONFIG)
    change_id = fleet.change_record(fleet.nodes()[NAMES[0]])["change"]
    fleet.module("node_change_record", {"kind": KIND, "records": [
        {"name": NAMES[0], "state": "applying", "change": change_id, "run_id": "by-hand"}]})
    since = time.time()
    _rc, output = fleet.run_change(gpuops_confirm="gpulab", gpuops_run_id="uninstall-2")
    assert "gpu-node-01  (resume: continue)" in output, output[-4000:]
    assert fleet.run_record("uninstall-2")["outcome"] == "completed"
    nodes = fleet.nodes()
    for name in NAMES:
        assert fleet.change_record(nodes[name])["state"] == "done", name
        assert not nodes[name]["spec"].get("unschedulable"), name
        assert fleet.node_state(name) == {"nvidia_runtime": False, "containerd": "active", "left": []}, name
    steps = {name: fleet.change_record(nodes[name])["steps"] for name in NAMES}
    assert all(steps[NAMES[0]]["done"] <= steps[name]["applying"] for name in NAMES[1:]), steps   # canary first
    assert fleet.operator_objects() == {"crds": [], "policies": [], "pods": []}
    assert os.listdir(fleet.record_dir).count("gpu-operator-backup-uninstall-2") == 0     # nothing left to back up
    assert os.path.exists(os.path.join(fleet.record_dir, "gpu-operator-backup-uninstall-1", "objects.json"))
    assert fleet.boots(since) == {}
    assert fleet.lock_holder() is None
    fleet.check_invariants(max_unavailable=2)
