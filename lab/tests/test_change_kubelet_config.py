"""The change kind `kubelet_config` of `gpuops.nvidia.change` over real SSH and HTTPS against the fleet twin.

The twin's kubelet reads its KubeletConfiguration at start and refuses to start where the real kubelet does: a
CPU manager policy other than the one its checkpoint (`/var/lib/kubelet/cpu_manager_state`) names, the static
policy without a CPU reservation, image GC thresholds out of order. A refused kubelet posts nothing, so its Node
goes NotReady; once it starts again its device plugin registers again.

On three nodes (a canary of one, then a batch of two): a dry run changes nothing; unknown fields and thresholds
out of order are refused before anything changes; a canary whose kubelet refuses the new setting is rolled back
(with gpuops_change_rollback_on_failure) or stops the run, cordoned, with the reason; a run resumed from a node left
mid-way finishes it first, then the batch of two, each node drained, its kubelet restarted once on the new
settings (its CPU manager checkpoint rewritten for the new policy), then its device-plugin pod restarted after
the kubelet (a new pod, created after the kubelet's start: the plugin registers with the new kubelet, the runbook's
case 1 link), within the invariants the twin's records show.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest
import yaml

from change_helpers import ChangeFleet
from conftest import collections_path, start_lab, stop_lab
from gpulab.kube.sim.deviceplugin import is_device_plugin_pod
from upgrade_helpers import OLD

pytestmark = pytest.mark.skipif(collections_path() is None, reason="the collection tree is not built (make tree)")

CONFIG = "/var/lib/kubelet/config.yaml"
STATE = "/var/lib/kubelet/cpu_manager_state"
NODES = ("gpu-node-01", "gpu-node-02", "gpu-node-03")
PINNED = {"settings": {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0",
                       "topologyManagerPolicy": "single-numa-node"}}


@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    """Three H100 nodes: a canary of one, then a batch of two."""
    state_dir = str(tmp_path_factory.mktemp("kubelet-config") / "state")
    lab = start_lab(state_dir, "--nodes", "3", "--driver", OLD, "--boot-delay", "0.3")
    yield ChangeFleet(lab, tmp_path_factory.mktemp("kubelet-config-runs"), "kubelet_config")
    stop_lab(lab)
    shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


def ready(node: dict) -> str:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition["type"] == "Ready":
            return condition["status"]
    return "missing"


def wait_node(fleet, name, predicate, timeout_s=30.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        node = fleet.nodes()[name]
        if predicate(node) or time.monotonic() > deadline:
            return node
        time.sleep(0.5)


def test_the_twin_kubelet_refuses_a_cpu_manager_policy_its_checkpoint_does_not_name(fleet):
    """The twin itself, as an operator would find it: a policy change without the checkpoint's removal keeps the
    kubelet down and the Node NotReady; removing the checkpoint while the kubelet is stopped brings both back."""
    lab, name = fleet.lab, "gpu-node-03"
    original = lab.ssh(name, "cat %s" % CONFIG).stdout
    assert json.loads(lab.ssh(name, "cat %s" % STATE).stdout)["policyName"] == "none"
    try:
        lab.ssh(name, "printf 'cpuManagerPolicy: static\\nreservedSystemCPUs: \"0\"\\n' >> %s" % CONFIG)
        refused = lab.ssh(name, "systemctl restart kubelet", check=False)
        assert refused.returncode != 0
        assert lab.ssh(name, "systemctl is-active kubelet", check=False).stdout.strip() == "failed"
        log = lab.ssh(name, "cat /run/gpulab-systemd/kubelet.service.log").stdout
        assert 'configured policy "static" differs from state checkpoint policy "none"' in log
        node = wait_node(fleet, name, lambda node: ready(node) != "True")
        assert ready(node) == "Unknown", node["status"]
        lab.ssh(name, "systemctl stop kubelet && rm %s && systemctl start kubelet" % STATE)
        assert json.loads(lab.ssh(name, "cat %s" % STATE).stdout)["policyName"] == "static"
        node = wait_node(fleet, name, lambda node: ready(node) == "True"
                         and node["status"]["allocatable"].get("nvidia.com/gpu") == "8")
        assert ready(node) == "True" and node["status"]["allocatable"]["nvidia.com/gpu"] == "8", node["status"]
    finally:
        lab.ssh(name, "cat > %s <<'EOF'\n%sEOF\nsystemctl stop kubelet; rm -f %s; systemctl start kubelet"
                % (CONFIG, original, STATE), check=False)
    assert json.loads(lab.ssh(name, "cat %s" % STATE).stdout)["policyName"] == "none"
    assert ready(wait_node(fleet, name, lambda node: ready(node) == "True")) == "True"


# --------------------------------------------------------------------------- the runbook

def node_files(fleet) -> dict:
    """node -> (config file, CPU manager checkpoint policy or None without one, kubelet starts so far), over SSH."""
    found = {}
    for name in NODES:
        out = fleet.lab.ssh(name, "cat %s; echo '<<>>'; cat %s 2>/dev/null; echo '<<>>'; "
                                  "grep -c 'kubelet stand-in' /run/gpulab-systemd/kubelet.service.log"
                            % (CONFIG, STATE)).stdout.split("<<>>\n")
        found[name] = (out[0], json.loads(out[1])["policyName"] if out[1].strip() else None, int(out[2]))
    return found


def plugin_pods(fleet) -> dict:
    """node -> its device-plugin pod (the last listed where a replaced one is still going away)."""
    found = {}
    for pod in fleet.kubectl_json("get", "pods", "-n", "kube-system")["items"]:
        if is_device_plugin_pod(pod) and not pod["metadata"].get("deletionTimestamp"):
            found[pod["spec"].get("nodeName")] = pod
    return found


def kubelet_started_at(fleet, name) -> str:
    """When the node's kubelet last started (RFC 3339, seconds): it binds its registration socket at each start."""
    epoch = int(fleet.lab.ssh(name, "stat -c %Y /var/lib/kubelet/device-plugins/kubelet.sock").stdout)
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def records(fleet) -> dict:
    return {name: fleet.change_record(node) for name, node in fleet.nodes().items()}


def test_the_dry_run_prints_the_plan_and_changes_nothing(fleet):
    before = node_files(fleet)
    _rc, output = fleet.run(PINNED)
    assert "Change kubelet_config kubelet-config-" in output and "(dry run: nothing will be changed)" in output
    assert "Batch 1/2 (canary):" in output and "Batch 2/2 (batch):" in output
    assert "To act, run again with -e gpuops_confirm=gpulab" in output
    assert node_files(fleet) == before
    assert set(records(fleet).values()) == {None}
    assert not any(node["spec"].get("unschedulable") for node in fleet.nodes().values())
    assert fleet.lock_holder() is None


@pytest.mark.parametrize("inputs,expected", [
    ({"settings": {"cpuManagerPolicy": "static", "evictionHard": {"memory.available": "5%"}}},
     "settings.evictionHard. Supported parameters include: cpuManagerPolicy,"),
    ({"settings": {"imageGCHighThresholdPercent": 70, "imageGCLowThresholdPercent": 75}},
     "settings.imageGCLowThresholdPercent 75 must be less than settings.imageGCHighThresholdPercent 70"),
])
def test_unknown_fields_and_thresholds_out_of_order_are_refused_before_anything_changes(fleet, inputs, expected):
    before = node_files(fleet)
    rc, output = fleet.run(inputs, check=False, gpuops_confirm="gpulab")
    assert rc != 0
    assert expected in output and "nothing was changed" in output
    assert node_files(fleet) == before
    assert set(records(fleet).values()) == {None}
    assert fleet.lock_holder() is None


def test_with_rollback_on_failure_a_canary_whose_kubelet_refuses_the_setting_gets_its_config_back(fleet):
    """A high image GC threshold under the node's low one (80 by default): the kubelet refuses to start."""
    before = node_files(fleet)
    since = time.time()
    rc, output = fleet.run({"settings": {"imageGCHighThresholdPercent": 75}}, check=False, gpuops_confirm="gpulab",
                           gpuops_change_rollback_on_failure=True, gpuops_run_id="kubelet-rollback")
    assert rc != 0 and "the change stopped after batch 1/2" in output
    found = records(fleet)
    assert found["gpu-node-01"]["state"] == "rolled-back", found
    assert "kubelet" in found["gpu-node-01"]["reason"]
    assert found["gpu-node-01"]["previous"]["settings"] == {"imageGCHighThresholdPercent": None}
    assert found["gpu-node-02"] is None and found["gpu-node-03"] is None
    after = node_files(fleet)
    assert yaml.safe_load(after["gpu-node-01"][0]) == yaml.safe_load(before["gpu-node-01"][0])   # the same config
    assert after["gpu-node-01"][1] == "none"
    assert after["gpu-node-01"][2] == before["gpu-node-01"][2] + 1      # the rollback's start (the refused one
    assert after["gpu-node-02"] == before["gpu-node-02"]                # left no stand-in line)
    node = fleet.nodes()["gpu-node-01"]
    assert ready(node) == "True" and not node["spec"].get("unschedulable")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert fleet.plugin_restarts(since) == {"gpu-node-01": 1}         # after the rollback's kubelet start
    assert fleet.run_record("kubelet-rollback")["outcome"].startswith("stopped after batch 1")


def test_a_canary_whose_kubelet_refuses_the_setting_stops_the_run_cordoned_with_the_reason(fleet):
    """The static CPU manager policy on a node without a CPU reservation: the kubelet refuses to start."""
    before = node_files(fleet)
    inputs = {"settings": {"cpuManagerPolicy": "static"}}
    rc, output = fleet.run(inputs, check=False, gpuops_confirm="gpulab", gpuops_run_id="kubelet-refused")
    assert rc != 0 and "the change stopped after batch 1/2" in output
    found = records(fleet)
    assert found["gpu-node-01"]["state"] == "failed" and "kubelet" in found["gpu-node-01"]["reason"], found
    assert found["gpu-node-01"]["previous"]["settings"] == {"cpuManagerPolicy": None}
    node = fleet.nodes()["gpu-node-01"]
    assert node["spec"].get("unschedulable") is True and ready(node) != "True"
    cordon_reason = " ".join(str(value) for value in node["metadata"].get("annotations", {}).values())
    assert "kubelet_config" in cordon_reason
    after = node_files(fleet)
    assert "cpuManagerPolicy: static" in after["gpu-node-01"][0]
    assert after["gpu-node-01"][1] is None          # the checkpoint of "none" removed, the kubelet wrote none
    assert after["gpu-node-02"] == before["gpu-node-02"] and after["gpu-node-03"] == before["gpu-node-03"]
    assert fleet.lock_holder() is None
    # the same change again is refused until a person looks at the failed node
    rc, output = fleet.run(inputs, check=False, gpuops_confirm="gpulab")
    assert rc != 0 and "gpu-node-01: a previous run of this change failed the node" in output
    # the person puts the node back as the guide says: the file as it was, the kubelet started, uncordoned
    fleet.lab.ssh("gpu-node-01", "cat > %s <<'EOF'\n%sEOF\nsystemctl restart kubelet" % (CONFIG, before["gpu-node-01"][0]))
    subprocess.run(["kubectl", "--kubeconfig", fleet.kubeconfig, "uncordon", "gpu-node-01"], check=True,
                   capture_output=True, timeout=60)
    assert ready(wait_node(fleet, "gpu-node-01", lambda node: ready(node) == "True")) == "True"


def test_a_run_resumed_from_a_node_left_mid_way_finishes_it_then_a_batch_of_two(fleet):
    _rc, output = fleet.run(PINNED)
    change_id = output.split("Change kubelet_config ")[1].split()[0]
    before = node_files(fleet)
    assert {policy for _config, policy, _starts in before.values()} == {"none"}
    # a run killed after gpu-node-03's record and before its kubelet changed
    previous = {"settings": {"cpuManagerPolicy": None, "reservedSystemCPUs": None, "topologyManagerPolicy": None},
                "config_path": CONFIG}
    fleet.module("node_change_record", {"kind": "kubelet_config", "records": [
        {"name": "gpu-node-03", "state": "applying", "change": change_id, "run_id": "killed", "previous": previous}]})
    pods_before = plugin_pods(fleet)
    since = time.time()
    fleet.run(PINNED, gpuops_confirm="gpulab", gpuops_run_id="kubelet-resume", gpuops_max_unavailable=2)
    after = node_files(fleet)
    # each node's device-plugin pod restarted once, after its kubelet: a new pod created after the kubelet's start
    assert fleet.plugin_restarts(since) == dict.fromkeys(NODES, 1)
    pods_after = plugin_pods(fleet)
    for name in NODES:
        assert pods_after[name]["metadata"]["uid"] != pods_before[name]["metadata"]["uid"], name
        assert pods_after[name]["metadata"]["creationTimestamp"] >= kubelet_started_at(fleet, name), name
    for name in NODES:
        config, policy, starts = after[name]
        assert policy == "static", name                         # the checkpoint of "none" went, the kubelet wrote
        assert "cpuManagerPolicy: static" in config and "topologyManagerPolicy: single-numa-node" in config
        assert "reservedSystemCPUs: '0'" in config and "clusterDomain: cluster.local" in config
        assert starts == before[name][2] + 1, name              # one restart each
    found = records(fleet)
    assert {name: record["state"] for name, record in found.items()} == dict.fromkeys(NODES, "done")
    assert found["gpu-node-03"]["previous"] == previous         # the first capture
    assert found["gpu-node-01"]["previous"]["settings"] == {"cpuManagerPolicy": None, "reservedSystemCPUs": None,
                                                            "topologyManagerPolicy": None}
    run_record = fleet.run_record("kubelet-resume")
    assert run_record["outcome"] == "completed"
    assert [batch["nodes"] for batch in run_record["plan"]["batches"]] == [["gpu-node-03"],
                                                                          ["gpu-node-01", "gpu-node-02"]]
    for name, node in fleet.nodes().items():
        assert ready(node) == "True" and not node["spec"].get("unschedulable"), name
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8", name
    assert fleet.boots(since) == {}                             # no reboot
    report = fleet.check_invariants(max_unavailable=2)
    assert report["max_unavailable_gpu_nodes"] == 2, report     # the batch of two was out at once
    assert fleet.lock_holder() is None
    # the same change again has nothing to do
    _rc, output = fleet.run(PINNED, gpuops_confirm="gpulab")
    assert output.count("already changed (recorded done)") == 3
