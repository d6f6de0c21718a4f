"""The twin's metrics exposition (pure rendering, no lab): dcgm-exporter 4.x and kube-state-metrics names and
labels, checked by promtool's own linter and against the names the collection's alert rules use."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from gpulab.exporters import dcgm_bus_id, dcgm_exposition, ksm_exposition
from gpulab.nvidia.boot import apply_xid
from gpulab.nvidia.profiles import make_hw

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DCGM_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]


def series(text: str, name: str) -> list:
    """[(labels dict, value)] of one metric in an exposition."""
    found = []
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels_text, value = line[len(name) + 1:].rsplit("} ", 1)
            found.append((dict(re.findall(r'(\w+)="([^"]*)"', labels_text)), float(value)))
    return found


def test_dcgm_series_names_labels_and_values_of_a_healthy_h100_node():
    hw = make_hw("gpu-node-01", "h100-sxm-80gb-x8")
    text = dcgm_exposition("gpu-node-01", hw["gpus"], "595.91.07", {})
    temps = series(text, "DCGM_FI_DEV_GPU_TEMP")
    assert len(temps) == 8
    labels, value = temps[3]
    assert list(labels) == DCGM_LABELS
    assert labels == {"gpu": "3", "UUID": hw["gpus"][3]["uuid"], "pci_bus_id": dcgm_bus_id(hw["gpus"][3]["pci_address"]),
                      "device": "nvidia3", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "gpu-node-01",
                      "DCGM_FI_DRIVER_VERSION": "595.91.07"}
    assert value == hw["gpus"][3]["temperature_c"]
    free = series(text, "DCGM_FI_DEV_FB_FREE")[0][1]
    assert free == 81559 - 479 and series(text, "DCGM_FI_DEV_FB_USED")[0][1] == 0
    for name in ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_RETIRED_PENDING",
                 "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_UTIL"):
        assert [value for _labels, value in series(text, name)] == [0.0] * 8, name
    assert dcgm_bus_id("0000:18:00.0") == "00000000:18:00.0"
    assert dcgm_bus_id("10000:1a:00.0") == "00010000:1A:00.0"


def test_xid_ecc_and_a_gpu_off_the_bus_show_as_dcgm_shows_them():
    hw = make_hw("gpu-node-02", "h100-sxm-80gb-x8")
    hw, _lines = apply_xid(hw, 48, 2)   # double-bit ECC: counter and pending retirement/remap
    hw, _lines = apply_xid(hw, 79, 5)   # off the bus
    text = dcgm_exposition("gpu-node-02", hw["gpus"], "595.91.07", {2: 48, 5: 79})
    xid = {labels["gpu"]: value for labels, value in series(text, "DCGM_FI_DEV_XID_ERRORS")}
    assert xid["2"] == 48 and xid["5"] == 79 and len(xid) == 8
    assert {labels["gpu"]: value for labels, value in series(text, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")}["2"] == 1
    assert {labels["gpu"]: value for labels, value in series(text, "DCGM_FI_DEV_RETIRED_PENDING")}["2"] == 1
    # the GPU off the bus keeps its recorded Xid and nothing else: DCGM cannot read it
    assert "5" not in {labels["gpu"] for labels, _value in series(text, "DCGM_FI_DEV_GPU_TEMP")}
    assert len(series(text, "DCGM_FI_DEV_FB_USED")) == 7


def test_no_driver_no_series():
    hw = make_hw("gpu-node-03", "h100-sxm-80gb-x8")
    assert dcgm_exposition("gpu-node-03", hw["gpus"], None, {}) == ""


def node_object(name, capacity, allocatable, unschedulable=False, ready="True"):
    return {"metadata": {"name": name}, "spec": {"unschedulable": True} if unschedulable else {},
            "status": {"capacity": {"cpu": "64", "nvidia.com/gpu": capacity},
                       "allocatable": {"cpu": "63", "nvidia.com/gpu": allocatable},
                       "conditions": [{"type": "Ready", "status": ready}]}}


def test_kube_state_metrics_node_series():
    text = ksm_exposition([node_object("gpu-node-02", "8", "0", unschedulable=True, ready="False"),
                           node_object("gpu-node-01", "8", "8"),
                           {"metadata": {"name": "cpu-1"}, "status": {"capacity": {"cpu": "4"}}}])
    capacity = series(text, "kube_node_status_capacity")
    assert capacity == [({"node": "gpu-node-01", "resource": "nvidia_com_gpu", "unit": "integer"}, 8.0),
                        ({"node": "gpu-node-02", "resource": "nvidia_com_gpu", "unit": "integer"}, 8.0)]
    assert [value for _labels, value in series(text, "kube_node_status_allocatable")] == [8.0, 0.0]
    assert series(text, "kube_node_spec_unschedulable") == [({"node": "cpu-1"}, 0.0), ({"node": "gpu-node-01"}, 0.0),
                                                            ({"node": "gpu-node-02"}, 1.0)]
    ready = {(labels["node"], labels["status"]): value for labels, value in series(text, "kube_node_status_condition")}
    assert ready[("gpu-node-02", "false")] == 1 and ready[("gpu-node-02", "true")] == 0
    assert ready[("cpu-1", "unknown")] == 1


def test_names_are_those_the_alert_rules_use():
    with open(os.path.join(REPO_DIR, "files", "prometheus", "gpu-alerts.yml")) as stream:
        rules = stream.read()
    used = set(re.findall(r"\b(DCGM_FI_\w+|kube_node_\w+)\b", rules))
    hw = make_hw("gpu-node-01", "h100-sxm-80gb-x8")
    served = dcgm_exposition("gpu-node-01", hw["gpus"], "595.91.07", {}) + ksm_exposition(
        [node_object("gpu-node-01", "8", "8")])
    assert used and all(re.search(r"^%s\{" % name, served, re.M) for name in used), sorted(used)
    # the rules' label matchers on those series
    assert 'resource="nvidia_com_gpu"' in rules and "$labels.Hostname" in rules and "$labels.gpu" in rules


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)")
def test_promtool_lints_the_expositions_clean():
    hw = make_hw("gpu-node-01", "h100-sxm-80gb-x8")
    for text in (dcgm_exposition("gpu-node-01", hw["gpus"], "595.91.07", {0: 79}),
                 ksm_exposition([node_object("gpu-node-01", "8", "8")])):
        done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                              timeout=30)
        # promtool's style lints (snake_case, counters ending in _total) flag dcgm-exporter's own names
        # (modelName, DCGM_FI_DEV_PCIE_REPLAY_COUNTER), as they flag the real exporter's: only errors count here
        style = ("should be written in 'snake_case'", 'should have "_total" suffix', "should not include type")
        problems = [line for line in (done.stdout + done.stderr).splitlines()
                    if line.strip() and not any(lint in line for lint in style)]
        assert not problems, problems
