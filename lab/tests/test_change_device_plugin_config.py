"""The change kind `device_plugin_config` (issue 24) on three node twins of 8 GPUs whose device plugin runs with a
config ConfigMap (the Helm chart's `config.name`: the ConfigMap volume and the config-manager sidecar), as an
operator runs it: `gpuops.nvidia.change` over real SSH and the API twin over HTTPS.

- the dry run prints the plan and changes nothing;
- the confirmed run of time-slicing x4, killed while the canary verifies, resumes with the same run id: the canary
  continues, then the batch of two; every node advertises 32 `nvidia.com/gpu` with GFD's labels, and the twin's
  records show the canary first, no node cordoned, no plugin pod deleted, no reboot, the invariants kept;
- then a canary whose plugin does not have the next config (the inputs name a staged ConfigMap the plugin does not
  read) crash-loops, fails its verify, is rolled back (its ts-4 label back, plugin restarted, 32 GPUs again) and
  stops the run before the batch.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from change_helpers import ChangeFleet
from conftest import collections_path, start_lab, stop_lab
from gpulab.kube.sim.deviceplugin import CONFIG_LABEL, DAEMONSET_NAME, IMAGE, NAMESPACE

pytestmark = pytest.mark.skipif(collections_path() is None, reason="the collection tree is not built (make tree)")

NODES = ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
CONFIGMAP, STAGED = "nvidia-device-plugin-configs", "staged-device-plugin-configs"


def time_sliced(replicas):
    return ("version: v1\nflags:\n  migStrategy: none\nsharing:\n  timeSlicing:\n    resources:\n"
            "    - name: nvidia.com/gpu\n      replicas: %d\n" % replicas)


def configmap(name, data):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE}, "data": data}


# what `helm upgrade --set config.name=...` adds to the plugin's DaemonSet: the config-manager sidecar and the
# ConfigMap volume (strategic merge: the lists are merged by name)
CONFIG_MANAGER = {"name": "config-manager", "image": IMAGE, "command": ["config-manager"],
                  "env": [{"name": "NODE_LABEL", "value": CONFIG_LABEL},
                          {"name": "CONFIG_FILE_SRCDIR", "value": "/available-configs"},
                          {"name": "CONFIG_FILE_DST", "value": "/config/config.yaml"},
                          {"name": "FALLBACK_STRATEGIES", "value": "named,single"}]}
DAEMONSET_PATCH = {"spec": {"template": {"spec": {
    "containers": [CONFIG_MANAGER], "volumes": [{"name": "available-configs", "configMap": {"name": CONFIGMAP}}]}}}}


def inputs(config, configmap_name=CONFIGMAP, **more):
    return dict({"config": config, "configmap": configmap_name, "configmap_namespace": NAMESPACE,
                 "stable_seconds": 2, "timeout": 6}, **more)


@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("change-dpc") / "state")
    lab = start_lab(state_dir, "--nodes", "3", "--driver", "595.91.07", "--boot-delay", "0.3")
    fleet = ChangeFleet(lab, tmp_path_factory.mktemp("change-dpc-runs"), "device_plugin_config")
    try:
        kubectl(fleet, "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
            configmap(CONFIGMAP, {"default": "version: v1\nflags:\n  migStrategy: none\n", "ts-4": time_sliced(4)}),
            configmap(STAGED, {"ts-8": time_sliced(8)})]}))
        kubectl(fleet, "-n", NAMESPACE, "patch", "daemonset", DAEMONSET_NAME, "--type", "strategic",
                "-p", json.dumps(DAEMONSET_PATCH))
        wait_until(lambda: all(advertises(node, "8", "none") for node in fleet.nodes().values()), 120,
                   "every plugin running with the config")
        yield fleet
    finally:
        stop_lab(lab)
        shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


def kubectl(fleet, *args, stdin=None):
    done = subprocess.run(["kubectl", "--kubeconfig", fleet.kubeconfig] + list(args), input=stdin,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def wait_until(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("timed out waiting for " + what)


def advertises(node, gpus, strategy):
    labels = node["metadata"]["labels"]
    return node["status"]["allocatable"].get("nvidia.com/gpu") == gpus and \
        labels.get("nvidia.com/gpu.sharing-strategy") == strategy


def snapshot(fleet) -> dict:
    return {name: (node["metadata"]["labels"].get(CONFIG_LABEL), node["status"]["allocatable"].get("nvidia.com/gpu"),
                   fleet.change_record(node)) for name, node in fleet.nodes().items()}


def test_the_dry_run_prints_the_plan_and_changes_nothing(fleet):
    before, since = snapshot(fleet), time.time()
    _rc, output = fleet.run(inputs("ts-4"))
    assert "gpu-node-01" in output and "To act, run again with -e gpuops_confirm=gpulab" in output, output[-3000:]
    assert "time-slicing, 4 replicas per GPU advertised as nvidia.com/gpu" in output
    assert snapshot(fleet) == before
    assert fleet.plugin_restarts(since) == {} and fleet.lock_holder() is None


def test_the_confirmed_run_killed_mid_canary_resumes_and_shares_every_gpu_four_times(fleet):
    since = time.time()
    process = fleet.run(inputs("ts-4"), background=True, gpuops_confirm="gpulab", gpuops_run_id="dpc-resume")
    try:
        wait_until(lambda: (fleet.change_record(fleet.nodes()["gpu-node-01"]) or {}).get("state") == "verifying"
                   or process.poll() is not None, 120, "the canary verifying")
        assert process.poll() is None, process.stdout.read()[-4000:]
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    _rc, output = fleet.run(inputs("ts-4"), gpuops_confirm="gpulab", gpuops_run_id="dpc-resume")
    assert "gpu-node-01  (resume: continue)" in output, output[-4000:]

    nodes = fleet.nodes()
    records = {name: fleet.change_record(node) for name, node in nodes.items()}
    assert all(record["state"] == "done" and record["run_id"] == "dpc-resume" for record in records.values()), records
    for node in nodes.values():
        labels = node["metadata"]["labels"]
        assert advertises(node, "32", "time-slicing") and labels[CONFIG_LABEL] == "ts-4"
        assert labels["nvidia.com/gpu.replicas"] == "4" and labels["nvidia.com/gpu.product"].endswith("-SHARED")
    # canary first: both batch nodes started after the canary was done
    assert all(records[name]["steps"]["applying"] >= records["gpu-node-01"]["steps"]["done"]
               for name in ("gpu-node-02", "gpu-node-03")), records
    # disruption none, from the API twin's records: no node cordoned, no plugin pod deleted (the config-manager
    # reloaded the plugin), no reboot
    changes = fleet.change_records(since)
    assert not [r for r in changes if r["resource"] == "nodes" and (r.get("object") or {}).get("spec", {})
                .get("unschedulable")]
    assert fleet.plugin_restarts(since) == {}
    assert fleet.boots(since) == {}
    report = fleet.check_invariants(max_unavailable=1)
    assert report["max_unavailable_gpu_nodes"] == 0, report


def test_a_canary_whose_plugin_lacks_the_config_is_rolled_back_to_its_config_and_stops_the_run(fleet):
    since = time.time()
    rc, output = fleet.run(inputs("ts-8", STAGED), check=False, gpuops_confirm="gpulab",
                           gpuops_canary_nodes=["gpu-node-01"], gpuops_change_rollback_on_failure=True)
    assert rc != 0 and "the change stopped after batch 1/2" in output, output[-4000:]
    nodes = fleet.nodes()
    canary = fleet.change_record(nodes["gpu-node-01"])
    assert canary["state"] == "rolled-back" and "does not run device plugin config ts-8" in canary["reason"], canary
    assert canary["previous"] == {"config": "ts-4"} and set(canary["steps"]) >= {"applying", "verifying", "failed"}
    # rolled back: its config label as before, its plugin restarted once, its 8 GPUs shared 4 times again
    assert nodes["gpu-node-01"]["metadata"]["labels"][CONFIG_LABEL] == "ts-4"
    assert advertises(nodes["gpu-node-01"], "32", "time-slicing")
    assert fleet.plugin_restarts(since) == {"gpu-node-01": 1}
    for name in ("gpu-node-02", "gpu-node-03"):    # the batch never started: still done with ts-4
        record = fleet.change_record(nodes[name])
        assert record["state"] == "done" and record["run_id"] == "dpc-resume", record
        assert nodes[name]["metadata"]["labels"][CONFIG_LABEL] == "ts-4"
    assert fleet.lock_holder() is None
