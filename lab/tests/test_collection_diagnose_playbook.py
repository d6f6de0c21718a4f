"""The collection's diagnose runbook over twin nodes: real ansible-playbook (driven by ansible-runner, as
users run it from a bastion), real SSH, the real nvidia_driver_facts module on each node.

Three nodes come up with a driver on their disk; one then gets a userspace/kernel version mismatch (a
half-done upgrade) and one loses a GPU off the bus (Xid 79). The runbook must tell the three apart.
"""
from __future__ import annotations

import os
import sys
import time

import pytest

from conftest import REPO_DIR, collections_path, start_lab, stop_lab

ansible_runner = pytest.importorskip("ansible_runner")

DRIVER = "550.54.15"
PLAYBOOK = os.path.join(REPO_DIR, "playbooks", "diagnose.yml")
GATHER_TASK = "Gather the NVIDIA driver facts"


def collection_path() -> str:
    path = collections_path()
    if path is None:
        pytest.fail("no ansible_collections/gpuops/nvidia tree: run through `make lab-test`")
    return path


def gpu_resources(lab, node: str) -> dict:
    """nvidia.com/gpu capacity and allocatable of a node, read with the official Python client."""
    from kubernetes import client, config
    api = client.CoreV1Api(config.new_client_from_config(config_file=os.path.join(lab.state_dir, "kubeconfig")))
    status = api.read_node(node).status
    return {"capacity": (status.capacity or {}).get("nvidia.com/gpu"),
            "allocatable": (status.allocatable or {}).get("nvidia.com/gpu")}


def wait_gpu_resources(lab, node: str, wanted: dict, timeout_s: float = 30) -> dict:
    deadline, seen = time.monotonic() + timeout_s, {}
    while time.monotonic() < deadline:
        seen = gpu_resources(lab, node)
        if seen == wanted:
            break
        time.sleep(0.3)
    return seen


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("diagnose") / "state")
    lab = start_lab(state_dir, "--nodes", "3", "--driver", DRIVER, "--boot-delay", "0.3")
    try:
        # the device plugin has registered all 8 GPUs before one falls off the bus
        assert wait_gpu_resources(lab, "gpu-node-03", {"capacity": "8", "allocatable": "8"}) == {
            "capacity": "8", "allocatable": "8"}
        lab.gpulab("fault", "gpu-node-02", "driver-mismatch")
        lab.gpulab("fault", "gpu-node-03", "xid:79")
        yield lab
    finally:
        stop_lab(lab)


def run_diagnose(lab, tmp_path, **extravars):
    """Run the runbook; return (rc, facts by host, failed hosts)."""
    result = ansible_runner.run(
        private_data_dir=str(tmp_path), playbook=PLAYBOOK, inventory=os.path.join(lab.state_dir, "inventory.yml"),
        extravars=extravars, quiet=True,
        # the collection first, then whatever else the caller's path holds (kubernetes.core in `make test-matrix`)
        envvars={"ANSIBLE_COLLECTIONS_PATH": os.pathsep.join(
                     filter(None, [collection_path(), os.environ.get("ANSIBLE_COLLECTIONS_PATH")])),
                 "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")})
    facts, failed = {}, set()
    for event in result.events:
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == GATHER_TASK:
            facts[data["host"]] = data["res"]["ansible_facts"]["nvidia_driver"]
        elif event.get("event") in ("runner_on_failed", "runner_on_unreachable"):
            failed.add(data["host"])
    return result.rc, facts, failed


@pytest.fixture(scope="module")
def report(fleet, tmp_path_factory):
    return run_diagnose(fleet, tmp_path_factory.mktemp("runner"))


def codes(facts: dict) -> set:
    return {entry["code"] for entry in facts["diagnosis"]}


def test_runbook_reports_every_node_and_fails_none_by_default(report):
    rc, facts, failed = report
    assert rc == 0 and failed == set()
    assert sorted(facts) == ["gpu-node-01", "gpu-node-02", "gpu-node-03"]


def test_healthy_node_has_driver_on_both_sides_and_no_diagnosis(report):
    node = report[1]["gpu-node-01"]
    assert node["kernel_module"]["loaded"] is True and node["kernel_module"]["version"] == DRIVER
    assert node["userspace"]["driver_version"] == DRIVER and node["userspace"]["nvml_ok"] is True
    assert node["gpu_count"] == 8 and len(node["pci_devices"]) == 8
    assert [entry for entry in node["diagnosis"] if entry["severity"] in ("critical", "error")] == []


def test_half_done_upgrade_is_diagnosed_as_version_mismatch(report):
    node = report[1]["gpu-node-02"]
    assert node["version_mismatch"] is True
    assert node["userspace"]["error_kind"] == "version_mismatch" and node["userspace"]["nvml_ok"] is False
    assert node["kernel_module"]["version"] != DRIVER and node["userspace"]["nvml_library_version"] == DRIVER
    mismatch = next(entry for entry in node["diagnosis"] if entry["code"] == "version_mismatch")
    assert node["kernel_module"]["version"] in mismatch["message"] and DRIVER in mismatch["message"]


def test_gpu_fallen_off_the_bus_is_a_critical_xid_79_and_missing_from_nvml(report):
    node = report[1]["gpu-node-03"]
    xid79 = [entry for entry in node["diagnosis"] if entry["code"] == "xid_79"]
    assert xid79 and xid79[0]["severity"] == "critical"
    assert any(event["code"] == 79 for event in node["xid_events"])
    assert node["gpu_count"] == 7


def test_fail_on_critical_fails_exactly_the_broken_nodes(fleet, tmp_path):
    rc, facts, failed = run_diagnose(fleet, tmp_path, gpuops_diagnose_fail_on=["critical"])
    assert rc != 0
    assert failed == {"gpu-node-02", "gpu-node-03"}



def test_kubernetes_counts_the_lost_gpu_as_unhealthy_capacity_8_allocatable_7(fleet):
    assert wait_gpu_resources(fleet, "gpu-node-03", {"capacity": "8", "allocatable": "7"}) == {
        "capacity": "8", "allocatable": "7"}
