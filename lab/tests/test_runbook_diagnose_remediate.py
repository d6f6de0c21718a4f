"""The diagnose runbook's whole method over the twin: real ansible-playbook (ansible-runner), real SSH to the node,
real HTTPS to the API twin.

A node gets the stale ledger (`gpulab fault NODE stale-device-plugin`: the kubelet restarted, the plugin did not
register again: capacity 8, allocatable 0, NVML 8). Diagnose names layer L5 and case 1 without changing anything;
with `gpuops_remediate: true` it restarts the device-plugin pod on that node only and allocatable is 8 again.
A node with a GPU off the bus (Xid 79) is case 4: remediation only cordons and taints it, with the reason.
"""
from __future__ import annotations

import pytest

from conftest import start_lab, stop_lab
from diagnose_helpers import run_diagnose
from gpulab.testkit.modules import gpu_allocatable, read_node, wait_allocatable

ansible_runner = pytest.importorskip("ansible_runner")

DRIVER = "550.54.15"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    lab = start_lab(str(tmp_path_factory.mktemp("diagnose-remediate") / "state"), "--nodes", "3", "--driver", DRIVER,
                    "--boot-delay", "0.3")
    try:
        for node in lab.node_names:
            assert wait_allocatable(lab, node, "8") == "8"
        lab.gpulab("fault", "gpu-node-01", "stale-device-plugin")
        lab.gpulab("fault", "gpu-node-03", "xid:79")
        assert wait_allocatable(lab, "gpu-node-01", "0") == "0"
        yield lab
    finally:
        stop_lab(lab)


def test_diagnose_names_case_1_then_remediation_restores_allocatable(fleet, tmp_path):
    rc, shown, changed, failed = run_diagnose(fleet, tmp_path / "read-only")
    assert rc == 0 and not failed
    assert not changed
    node01 = shown["gpu-node-01"]
    assert node01["failing_layer"] == "L5"
    assert [case["case"] for case in node01["cases"]] == [1]
    assert node01["cases"][0]["runbook"] == "docs/alerts.md#gpuallocatablezero"
    assert any("capacity 8, allocatable 0, NVML 8" in message for message in node01["findings"])
    node03 = shown["gpu-node-03"]
    assert node03["failing_layer"] == "L0" and 4 in [case["case"] for case in node03["cases"]]
    assert shown["gpu-node-02"]["cases"] == [] and shown["gpu-node-02"]["failing_layer"] is None
    assert gpu_allocatable(fleet, "gpu-node-01") == "0"
    assert not read_node(fleet, "gpu-node-03")["spec"].get("unschedulable")

    rc, shown, changed, failed = run_diagnose(fleet, tmp_path / "remediate", gpuops_remediate=True)
    assert rc == 0 and not failed, shown
    assert gpu_allocatable(fleet, "gpu-node-01") == "8"
    # the hardware node: cordoned and tainted with the reason, its pods left alone
    node03 = read_node(fleet, "gpu-node-03")
    assert node03["spec"]["unschedulable"] is True
    assert "diagnose case 4" in node03["metadata"]["annotations"]["gpuops.nvidia/cordon-reason"]
    assert {"key": "gpuops.nvidia/hardware", "value": "xid", "effect": "NoSchedule"} in [
        dict((key, taint.get(key)) for key in ("key", "value", "effect")) for taint in node03["spec"]["taints"]]
    # the healthy node was not touched
    assert "gpu-node-02" not in changed
    assert not read_node(fleet, "gpu-node-02")["spec"].get("unschedulable")
