"""Seed case 6 in GPU Operator mode: the MIG Manager, not the runbook, re-applies the MIG layout after the reboot.

Two H100 nodes under the twin's GPU Operator (driver 595.91.07, the device plugin's mixed strategy). A site layout
`gpuops-upgrade` is added to the MIG Manager's ConfigMap `default-mig-parted-config` (GPU 0: 3g.40gb, 2g.20gb,
2 x 1g.10gb; GPU 1: 4g.40gb, 3g.40gb; the other six whole) and both Nodes get `nvidia.com/mig.config=gpuops-upgrade`:
the MIG Manager applies it (`nvidia.com/mig.config.state` pending -> success, the device plugin restarted) and the
layout's `nvidia.com/mig-*` resources appear. The runbook then upgrades 595 -> 615 (a major upgrade) one node at a
time: each node reboots once (MIG instances do not survive it), the runbook leaves the layout to the MIG Manager
(its own `nvidia-smi mig -cgi` task skipped), the MIG Manager re-applies it after the boot and the runbook's wait
sees the layout's resources again.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import time

import pytest
import yaml

from conftest import collections_path, stop_lab
from test_runbook_operator_upgrade import OperatorFleet, start_patiently
from test_runbook_upgrade_mig import RESOURCES, mig_resources, wait_for
from upgrade_helpers import DRIVER_LABEL, NEW, OLD

pytestmark = pytest.mark.skipif(collections_path() is None, reason="the collection tree is not built (make tree)")

NODES = ["gpu-node-01", "gpu-node-02"]
CONFIG = "gpuops-upgrade"
LAYOUT = [{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}},
          {"devices": [1], "mig-enabled": True, "mig-devices": {"4g.40gb": 1, "3g.40gb": 1}},
          {"devices": [2, 3, 4, 5, 6, 7], "mig-enabled": False}]
# the mixed strategy advertises for LAYOUT what test_runbook_upgrade_mig's layout gets: its RESOURCES
STATE_LABEL = "nvidia.com/mig.config.state"


def layout_applied(fleet) -> bool:
    nodes = fleet.nodes()
    return all(nodes[name]["metadata"]["labels"].get(STATE_LABEL) == "success"
               and mig_resources(nodes[name]) == RESOURCES for name in NODES)


def mig_manager_applies(fleet) -> dict:
    """node -> the MIG Manager's Events that created MIG instances (`mig -cgi`)."""
    found = {}
    for event in fleet.kubectl_json("get", "events", "-n", "default")["items"]:
        if event.get("reason") == "MigConfigApplied" and "-cgi" in event.get("message", ""):
            found.setdefault(event["involvedObject"]["name"], []).append(event["message"])
    return found


def task_results(output: str, task: str) -> str:
    """What ansible-playbook printed under the first TASK line naming `task` (up to the next TASK)."""
    match = re.search(r"TASK \[[^\]]*%s[^\]]*\][^\n]*\n(.*?)(?=\nTASK \[|\nPLAY RECAP)" % re.escape(task), output,
                      re.S)
    return match.group(1) if match else ""


@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    base = tmp_path_factory.mktemp("mig-operator-fleet")
    lab = start_patiently(str(base / "state"), "--nodes", "2", "--driver", OLD, "--gpu-operator",
                          "--operator-time-scale", "0.01", "--boot-delay", "0.5", "--mig-strategy", "mixed")
    fleet = OperatorFleet(lab, tmp_path_factory.mktemp("mig-operator-runs"))
    try:
        kubectl = ["kubectl", "--kubeconfig", fleet.kubeconfig]
        config_map = fleet.kubectl_json("get", "configmap", "default-mig-parted-config", "-n", "gpu-operator")
        config = yaml.safe_load(config_map["data"]["config.yaml"])
        assert {"all-disabled", "all-1g.10gb", "all-balanced"} <= set(config["mig-configs"])
        config["mig-configs"][CONFIG] = LAYOUT
        patch = json.dumps({"data": {"config.yaml": yaml.safe_dump(config, sort_keys=False)}})
        subprocess.run(kubectl + ["patch", "configmap", "default-mig-parted-config", "-n", "gpu-operator",
                                  "--type", "merge", "-p", patch], check=True, capture_output=True, timeout=60)
        subprocess.run(kubectl + ["label", "nodes"] + NODES + ["nvidia.com/mig.config=" + CONFIG],
                       check=True, capture_output=True, timeout=60)
        assert wait_for(lambda: layout_applied(fleet), timeout=240), \
            {name: (node["metadata"]["labels"].get(STATE_LABEL), mig_resources(node))
             for name, node in fleet.nodes().items()}
        yield fleet
    finally:
        stop_lab(lab)
        shutil.rmtree(str(base), ignore_errors=True)


def test_the_mig_manager_re_applies_the_layout_after_a_major_upgrade_in_operator_mode(fleet):
    before = {name: len(messages) for name, messages in mig_manager_applies(fleet).items()}
    assert before == {name: 1 for name in NODES}, before
    since = time.time()
    _rc, output = fleet.run(gpuops_confirm="gpulab", gpuops_run_id="mig-operator", gpuops_upgrade_batches=[1, 1],
                            gpuops_max_unavailable=1, gpuops_max_fail_percentage=0)
    # the runbook left the layout to the MIG Manager: its own re-create step and plugin restart were skipped
    recreate = task_results(output, "Re-create the node's MIG layout")
    assert recreate and not re.search(r"^(changed|ok|failed|fatal):", recreate, re.M), recreate
    assert fleet.boots(since) == {name: 1 for name in NODES}, output[-4000:]
    assert fleet.cluster_policy()["spec"]["driver"]["version"] == NEW
    nodes = fleet.nodes()
    for name in NODES:
        node = nodes[name]
        assert node["metadata"]["labels"].get(DRIVER_LABEL) == NEW and fleet.loaded_version(name) == NEW, name
        assert not node["spec"].get("unschedulable"), (name, output[-4000:])
        assert fleet.record(node)["state"] == "done", (name, fleet.record(node))
        assert node["metadata"]["labels"].get(STATE_LABEL) == "success", name
        assert node["metadata"]["labels"].get("nvidia.com/mig.config") == CONFIG, name
        assert mig_resources(node) == RESOURCES, (name, mig_resources(node))
    # the MIG Manager made the instances again after each node's boot (once more per node, its -cgi commands)
    after = mig_manager_applies(fleet)
    assert {name: len(messages) for name, messages in after.items()} == {name: 2 for name in NODES}, after
    for name in NODES:
        assert "nvidia-smi mig -i 0 -cgi 3g.40gb,2g.20gb,1g.10gb,1g.10gb -C" in after[name][-1], after[name]
    assert fleet.lock_holder() is None
    fleet.check_invariants(max_unavailable=1)
