"""`gpuops repair` on the fleet twin (issue 25): the real `gpuops` command, the real audit callback, the diagnose
runbook with its remediation over SSH on two node twins and the Kubernetes API twin.

gpu-node-01 gets the stale ledger (`gpulab fault NODE stale-device-plugin`: capacity 8, allocatable 0, NVML 8;
case 1). A repair without --limit is refused; the dry run names the node, its case and the step that would run and
changes nothing (the healthy gpu-node-02 beside it: no repair); --apply (ticket and typed cluster name) restarts
the plugin on that node and allocatable is 8 again; the trail verifies and its runner_end line names the repair.
"""
from __future__ import annotations

import os
import shutil
import time

import pytest

from conftest import start_lab, stop_lab
from gpulab.testkit.modules import gpu_allocatable, kube_client, wait_allocatable
from gpuops_cli import gpuops, records

pytest.importorskip("ansible_runner")

DRIVER = "550.54.15"
TICKET = "INC-25"
STALE, HEALTHY = "gpu-node-01", "gpu-node-02"
CASE_1_TASK = "Case 1, stale ledger"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("runner-repair") / "state")
    lab = start_lab(state_dir, "--nodes", "2", "--driver", DRIVER, "--boot-delay", "0.3")
    try:
        for node in lab.node_names:
            assert wait_allocatable(lab, node, "8") == "8"
        lab.gpulab("fault", STALE, "stale-device-plugin")
        assert wait_allocatable(lab, STALE, "0") == "0"
        yield lab
    finally:
        stop_lab(lab)
        shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


def repair(fleet, data_dir, *args):
    started = time.monotonic()
    done = gpuops("repair", "-i", os.path.join(fleet.state_dir, "inventory.yml"), "--data-dir", str(data_dir),
                  *args, timeout=900)
    print("gpuops repair %s: %.1f s" % (" ".join(args), time.monotonic() - started))
    return done


def plugin_pods(fleet, node) -> list:
    """The names of the device-plugin pods on the node (a restart replaces the pod)."""
    import kubernetes
    pods = kubernetes.client.CoreV1Api(kube_client(fleet)).list_pod_for_all_namespaces(
        field_selector="spec.nodeName=" + node)
    return sorted(pod.metadata.name for pod in pods.items if "device-plugin" in pod.metadata.name)


def runner_end(audit_log) -> dict:
    return [record for record in records(audit_log) if record["event"] == "runner_end"][-1]


def test_a_repair_without_limit_is_refused_with_one_line(fleet, tmp_path):
    done = repair(fleet, tmp_path / "data")
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        "gpuops: refused: gpuops repair names its nodes: pass --limit NODES (there is no fleet-wide repair)"]
    assert [record["event"] for record in records(tmp_path / "data" / "audit.jsonl")] == ["refused"]
    assert gpu_allocatable(fleet, STALE) == "0"


def test_the_dry_run_names_the_repair_then_apply_repairs_and_the_trail_names_it(fleet, tmp_path):
    data_dir = tmp_path / "data"
    audit_log = str(data_dir / "audit.jsonl")
    pods_before = plugin_pods(fleet, STALE)
    assert pods_before

    done = repair(fleet, data_dir, "--limit", "%s,%s" % (STALE, HEALTHY))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "repairs would run (dry run, nothing changed):" in done.stdout
    assert "%-22s layer -   case(s) none: no repair" % HEALTHY in done.stdout
    assert CASE_1_TASK in done.stdout and "(would change)" in done.stdout
    assert gpu_allocatable(fleet, STALE) == "0" and plugin_pods(fleet, STALE) == pods_before
    end = runner_end(audit_log)
    # a dry run verifies no repair: no remediation_verified gate, passed or failed
    assert not [record for record in records(audit_log)
                if record["run_id"] == end["run_id"] and record.get("gate") == "remediation_verified"]
    assert end["mode"] == "check" and end["runbook"] == "repair" and end["exit_code"] == 0
    node, healthy = end["repairs"]
    assert healthy == {"node": HEALTHY, "failing_layer": None, "cases": [], "actions": []}
    assert node["node"] == STALE and node["cases"] == [1] and node["failing_layer"] == "L5"
    assert [action["status"] for action in node["actions"] if action["task"].startswith(CASE_1_TASK)] == ["changed"]

    done = repair(fleet, data_dir, "--limit", STALE, "--apply", "--ticket", TICKET, "--confirm", "gpulab")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert gpu_allocatable(fleet, STALE) == "8" and plugin_pods(fleet, STALE) != pods_before
    assert gpu_allocatable(fleet, HEALTHY) == "8"
    end = runner_end(audit_log)
    assert end["mode"] == "apply" and end["exit_code"] == 0
    [node] = end["repairs"]
    assert node["node"] == STALE and node["cases"] == [1]
    assert [action["status"] for action in node["actions"] if action["task"].startswith(CASE_1_TASK)] == ["changed"]
    trail = records(audit_log)
    start = [record for record in trail if record["event"] == "runner_start"][-1]
    assert start["ticket"] == TICKET and start["limit"] == STALE and "gpuops_remediate" in start["extra_vars"]
    assert any(record.get("gate") == "remediation_verified" and record["passed"] and record["host"] == STALE
               for record in trail if record["run_id"] == end["run_id"])

    verified = gpuops("audit", "verify", audit_log)
    assert verified.returncode == 0 and ": intact, " in verified.stdout, verified.stdout + verified.stderr
