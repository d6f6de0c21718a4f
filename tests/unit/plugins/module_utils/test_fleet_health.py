# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# Node JSON from tests/unit/fixtures/k8s (real captures, PROVENANCE.md there); pods shaped as the API serves
# NVIDIA/k8s-device-plugin's static manifest.

from __future__ import annotations

import copy
import json
import os

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import fleet_health as fh
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.timestamps import parse_time

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "k8s")
NOW = parse_time("2026-12-03T04:00:00Z")


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as stream:
        return json.load(stream) if name.endswith(".json") else yaml.safe_load(stream)


TWIN_NODE = fixture("node_gpulab-twin_h100x8_ready.json")


def node(name, capacity=8, allocatable=8, driver="550.54.15", unschedulable=False, annotations=None, taints=None,
         labels=None):
    found = copy.deepcopy(TWIN_NODE)
    found["metadata"]["name"] = name
    found["metadata"]["labels"]["nvidia.com/cuda.driver-version.full"] = driver
    found["metadata"]["labels"].update(labels or {})
    found["metadata"]["annotations"] = dict(annotations or {})
    found["status"]["capacity"]["nvidia.com/gpu"] = str(capacity)
    found["status"]["allocatable"]["nvidia.com/gpu"] = str(allocatable)
    found["spec"] = {"unschedulable": unschedulable, "taints": taints or []}
    return found


def plugin_pod(node_name, waiting=None, restarts=0):
    state = {"waiting": {"reason": waiting}} if waiting else {"running": {}}
    return {"metadata": {"name": "nvidia-device-plugin-" + node_name, "namespace": "kube-system",
                         "labels": {"name": "nvidia-device-plugin-ds"}},
            "spec": {"nodeName": node_name, "containers": [{"image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}]},
            "status": {"phase": "Running", "containerStatuses": [{"restartCount": restarts, "state": state}]}}


def gpu_pod(name, node_name=None, phase="Running", gpus=1, created="2026-12-03T03:00:00Z", message=None, env=None):
    container = {"name": "c", "image": "cuda"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if env:
        container["env"] = env
    status = {"phase": phase}
    if message:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": message}]
    return {"metadata": {"name": name, "namespace": "ml", "creationTimestamp": created},
            "spec": {"nodeName": node_name, "containers": [container]}, "status": status}


DAEMONSET = {"metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system"},
             "spec": {"template": {"metadata": {"labels": {"name": "nvidia-device-plugin-ds"}},
                                   "spec": {"containers": [{"image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}]}}}}


def facts(gpu_count=8, nvml_ok=True, pci=8, xids=(), diagnosis=(), **gpu_fields):
    gpus = [dict({"index": index, "pci_bus_id": "0000:%02x:00.0" % index, "memory_used_mib": 0,
                  "memory_total_mib": 81559}, **gpu_fields) for index in range(gpu_count if nvml_ok else 0)]
    return {"userspace": {"nvml_ok": nvml_ok}, "gpus": gpus, "gpu_count": len(gpus),
            "pci_devices": [{"class_id": "0x030200"}] * pci, "xid_events": list(xids),
            "diagnosis": list(diagnosis)}


def codes(report, name):
    return report["nodes"][name]["codes"]


def test_the_three_ledger_cases_of_the_runbook():
    nodes = [node("stale", 8, 0), node("unhealthy", 8, 7), node("offbus", 8, 8), node("fine")]
    pods = [plugin_pod(name) for name in ("stale", "unhealthy", "offbus", "fine")]
    report = fh.judge(nodes, pods, [DAEMONSET], NOW, node_facts={
        "stale": facts(8), "unhealthy": facts(8), "offbus": facts(7, pci=8), "fine": facts(8)})
    assert codes(report, "stale") == ["stale_ledger"]
    assert report["nodes"]["stale"]["cases"][0]["case"] == 1
    assert codes(report, "unhealthy") == ["gpu_unhealthy"]
    assert codes(report, "offbus") == ["gpu_off_the_bus"]
    assert report["nodes"]["offbus"]["failing_layer"] == "L0"
    assert report["nodes"]["fine"]["worst"] == "ok"
    assert report["summary"]["critical"]


def test_allocatable_zero_without_facts_asks_to_look_and_nvml_zero_is_case_7():
    report = fh.judge([node("a", 8, 0), node("b", 8, 0)], [plugin_pod("a"), plugin_pod("b")], [DAEMONSET], NOW,
                      node_facts={"b": facts(nvml_ok=False)})
    assert codes(report, "a") == ["allocatable_zero"]
    assert codes(report, "b") == ["gpu_resources_gone"]
    assert report["nodes"]["b"]["cases"][0]["case"] == 7


def test_real_capture_issue58_is_the_stale_ledger():
    captured = node("ocio-gpu01")
    captured["status"] = dict(captured["status"], **fixture(
        "node-status_k8s-device-plugin-issue58_allocatable-zero.PARTIAL.yaml")["status"])
    view = fh.cluster_view([captured], [], [])[0]["ocio-gpu01"]
    found = fh.check_ledger(view, facts(16, pci=16))
    assert [item["code"] for item in found] == ["stale_ledger"]
    assert "capacity 16, allocatable 0, NVML 16" in found[0]["message"]


def test_dra_node_is_judged_by_its_resource_slices_and_both_at_once_is_case_2():
    resource_slice = fixture("resourceslice_v1_gpu-nvidia-com_CONSTRUCTED.json")   # 2 GPUs + 1 MIG device
    dra_only = node("gpu-node-07")
    for key in ("capacity", "allocatable"):
        del dra_only["status"][key]["nvidia.com/gpu"]
    report = fh.judge([dra_only], [plugin_pod("gpu-node-07")], [DAEMONSET], NOW, resource_slices=[resource_slice],
                      node_facts={"gpu-node-07": facts(2, pci=2)})
    assert codes(report, "gpu-node-07") == []
    lost = fh.judge([dra_only], [plugin_pod("gpu-node-07")], [DAEMONSET], NOW, resource_slices=[resource_slice],
                    node_facts={"gpu-node-07": facts(3, pci=3)})
    assert codes(lost, "gpu-node-07") == ["gpu_unhealthy"]
    both = fh.judge([node("gpu-node-07")], [plugin_pod("gpu-node-07")], [DAEMONSET], NOW,
                    resource_slices=[resource_slice])
    assert codes(both, "gpu-node-07") == ["device_plugin_and_dra"]
    assert both["nodes"]["gpu-node-07"]["cases"][0]["case"] == 2


def test_components_missing_crash_looping_restarting():
    nodes = [node("none"), node("loop"), node("restarts")]
    pods = [plugin_pod("loop", waiting="CrashLoopBackOff", restarts=7), plugin_pod("restarts", restarts=6)]
    report = fh.judge(nodes, pods, [DAEMONSET], NOW)
    assert codes(report, "none") == ["device_plugin_missing"]
    assert codes(report, "loop") == ["device_plugin_crash_loop"]
    assert report["nodes"]["loop"]["cases"][0]["case"] == 3
    assert codes(report, "restarts") == ["device_plugin_restarts"]
    # GFD and DCGM exporter are judged only where the cluster runs them
    assert not any("gfd" in code for name in report["nodes"] for code in codes(report, name))


def test_pending_gpu_pods_past_the_threshold_with_the_schedulers_reason():
    message = "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."
    pods = [gpu_pod("old", phase="Pending", created="2026-12-03T03:00:00Z", message=message),
            gpu_pod("young", phase="Pending", created="2026-12-03T03:50:00Z", message=message),
            gpu_pod("cpu", phase="Pending", gpus=0)]
    found = fh.check_pending(pods, set(), NOW, 30)
    assert len(found) == 1 and "ml/old" in found[0]["message"] and message in found[0]["message"]
    assert "60 min" in found[0]["message"]


def test_driver_spread_and_target():
    nodes = [node("a"), node("b"), node("c", driver="535.161.08")]
    report = fh.judge(nodes, [plugin_pod(name) for name in "abc"], [DAEMONSET], NOW)
    assert report["driver_versions"] == {"550.54.15": 2, "535.161.08": 1}
    assert report["driver_target"] == "550.54.15"
    assert codes(report, "c") == ["driver_off_target"]
    forced = fh.judge(nodes, [plugin_pod(name) for name in "abc"], [DAEMONSET], NOW, target_driver="535.161.08")
    assert codes(forced, "a") == ["driver_off_target"] and codes(forced, "c") == []


def test_cordoned_long_and_by_whom():
    ours = node("ours", unschedulable=True, annotations={
        "gpuops.nvidia/cordon": json.dumps({"by": "gpuops.nvidia.node_drain", "at": "2026-12-01T04:00:00Z"}),
        "gpuops.nvidia/cordon-reason": "driver upgrade"})
    theirs = node("theirs", unschedulable=True, taints=[
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": "2026-11-30T04:00:00Z"}])
    recent = node("recent", unschedulable=True, taints=[
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": "2026-12-03T03:00:00Z"}])
    report = fh.judge([ours, theirs, recent], [plugin_pod(name) for name in ("ours", "theirs", "recent")],
                      [DAEMONSET], NOW)
    by_node = dict((item["node"], item) for item in report["findings"])
    assert "by gpuops.nvidia.node_drain" in by_node["ours"]["message"]
    assert "driver upgrade" in by_node["ours"]["message"]
    assert by_node["ours"]["severity"] == "warning"
    assert "unknown (no gpuops.nvidia/cordon annotation)" in by_node["theirs"]["message"]
    assert by_node["theirs"]["severity"] == "error"
    assert "recent" not in by_node


def test_xid_since_the_last_check_ecc_and_retired_pages():
    xid = {"code": 79, "pci_address": "0000:18:00.0", "time": "2026-12-03T03:10:00", "message": "fallen off the bus"}
    report = fh.judge([node("a")], [plugin_pod("a")], [DAEMONSET], NOW,
                      node_facts={"a": facts(xids=[xid], ecc_volatile_uncorrectable=2, retired_pages_pending=True)})
    assert "xid_79" in codes(report, "a") and "ecc_uncorrectable" in codes(report, "a")
    assert "retired_pages_pending" in codes(report, "a")
    again = fh.judge([node("a")], [plugin_pod("a")], [DAEMONSET], NOW, node_facts={"a": facts(xids=[xid])},
                     previous_report=report)
    assert "xid_79" not in codes(again, "a")


def test_mig_drift_and_time_slicing_not_applied():
    lost = node("lost", labels={"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.strategy": "mixed"})
    sliced = node("sliced", labels={"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.count": "8"})
    report = fh.judge([lost, sliced], [plugin_pod("lost"), plugin_pod("sliced")], [DAEMONSET], NOW)
    assert codes(report, "lost") == ["mig_layout_lost"]
    assert report["nodes"]["lost"]["cases"][0]["case"] == 6
    assert codes(report, "sliced") == ["time_slicing_not_applied"]


def test_pod_with_gpus_but_no_limit_is_case_2_and_vram_without_pod_is_case_5():
    env_pod = gpu_pod("envonly", node_name="a", gpus=0, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])
    report = fh.judge([node("a"), node("b")], [plugin_pod("a"), plugin_pod("b"), env_pod], [DAEMONSET], NOW,
                      node_facts={"b": facts(memory_used_mib=40000)})
    assert codes(report, "a") == ["gpu_pod_without_limit"]
    assert codes(report, "b") == ["vram_held_without_pod"]
    assert report["vram_top"][0] == {"node": "b", "gpu": 0, "uuid": None, "used_mib": 40000, "total_mib": 81559}


def test_worst_first_and_the_markdown_table():
    nodes = [node("warn", driver="535.161.08"), node("crit", 8, 0), node("a"), node("b")]
    report = fh.judge(nodes, [plugin_pod(name) for name in ("warn", "crit", "a", "b")], [DAEMONSET], NOW)
    assert [item["severity"] for item in report["findings"]] == ["critical", "warning"]
    report.update(generated_at="2026-12-03T04:00:00Z", api={"list_calls": 3})
    text = fh.markdown(report)
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ") and "|---" not in line
            and line.split("|")[1].strip() in ("warn", "crit")]
    assert rows == ["crit", "warn"]
    assert "2 node(s) without findings" in text and "3 API list call(s)" in text


def test_nodes_to_look_at():
    findings = [fh.finding("x", "ledger", "stale_ledger", "critical", "", ""),
                fh.finding("y", "driver", "info_only", "info", "", "")]
    views = dict((name, {}) for name in ("w", "x", "y", "z"))
    assert fh.nodes_to_look_at(findings, views) == ["x"]
    assert fh.nodes_to_look_at(findings, views, "all") == ["w", "x", "y", "z"]
    assert fh.nodes_to_look_at(findings, views, "none") == []
    sampled = fh.nodes_to_look_at(findings, views, sample=2, seed="2026-W49")
    assert sampled[0] == "x" and len(sampled) == 3
    assert sampled == fh.nodes_to_look_at(findings, views, sample=2, seed="2026-W49")


@pytest.mark.parametrize("text, minutes", [("30", 30), ("30m", 30), ("2h", 120), ("1d", 1440), (45, 45),
                                           ("1.5h", 90)])
def test_durations(text, minutes):
    assert fh.parse_duration_minutes(text, "t") == minutes


@pytest.mark.parametrize("text", ["soon", "", "-5m", "h", None, "nan", "infh"])
def test_malformed_durations(text):
    with pytest.raises(fh.HealthInputError, match="^t: "):
        fh.parse_duration_minutes(text, "t")
