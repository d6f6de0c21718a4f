# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import copy
import json
import os

import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.timestamps import format_micro_time, format_time, parse_time
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.node_readiness import (
    NodeTracker, check_node, diagnosis, dra_api_version, dra_gpu_count, gfd_label_problems, gfd_product_name, summary)

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "k8s")


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as stream:
        return json.load(stream) if name.endswith(".json") else yaml.safe_load(stream)


TWIN_NODE = fixture("node_gpulab-twin_h100x8_ready.json")
READY_AT = parse_time(next(c for c in TWIN_NODE["status"]["conditions"] if c["type"] == "Ready")["lastTransitionTime"])
BOOT_ID = TWIN_NODE["status"]["nodeInfo"]["bootID"]
LATER = READY_AT + 3600


def expectation(**given):
    wanted = dict(resource="nvidia.com/gpu", count=None, labels={}, boot_id_before=None, require_ready=True)
    wanted.update(given)
    return wanted


def codes(state):
    return [problem["code"] for problem in state["problems"]]


def with_status(node, **status):
    node = copy.deepcopy(node)
    node["status"].update(status)
    return node


def set_ready(node, status, when, reason="KubeletReady"):
    node = copy.deepcopy(node)
    for condition in node["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition.update(status=status, lastTransitionTime=format_time(when), reason=reason)
    return node


def test_healthy_twin_node_passes_every_check():
    state = check_node(TWIN_NODE, expectation(count=8, labels={"nvidia.com/cuda.driver-version.full": "615.71.09"}),
                       LATER)
    assert state["problems"] == []
    assert (state["ready"], state["capacity"], state["allocatable"], state["labels_matched"]) == (True, 8, 8, True)
    assert state["boot_id"] == BOOT_ID and state["rebooted"] is None


def test_stale_ledger_of_issue_58_is_diagnosed_with_the_remedy():
    status = fixture("node-status_k8s-device-plugin-issue58_allocatable-zero.PARTIAL.yaml")["status"]
    node = dict(TWIN_NODE, status=dict(status, conditions=TWIN_NODE["status"]["conditions"]))   # a Ready node
    state = check_node(node, expectation(), LATER)
    assert codes(state) == ["stale_device_plugin"]
    assert "capacity 16 but allocatable 0" in state["problems"][0]["message"]
    assert "device_plugin_restart" in state["problems"][0]["message"]


def test_capacity_zero_of_issue_1228_is_no_capacity_not_a_stale_ledger():
    node = dict(TWIN_NODE, status=dict(TWIN_NODE["status"], **fixture(
        "node-status_k8s-device-plugin-issue1228_capacity-zero.PARTIAL.yaml")["status"]))
    assert codes(check_node(node, expectation(), LATER)) == ["no_gpu_capacity"]


def test_single_gpu_node_of_issue_213_needs_no_count():
    node = dict(TWIN_NODE, status=dict(TWIN_NODE["status"], **fixture(
        "node-status_k8s-device-plugin-issue213_one-gpu.PARTIAL.yaml")["status"]))
    assert check_node(node, expectation(), LATER)["problems"] == []
    assert codes(check_node(node, expectation(count=2), LATER)) == ["fewer_devices"]


def test_a_gpu_lost_to_xid_79_is_fewer_devices_with_the_xid_hint():
    node = copy.deepcopy(TWIN_NODE)
    node["status"]["allocatable"]["nvidia.com/gpu"] = "7"
    state = check_node(node, expectation(), LATER)
    assert codes(state) == ["fewer_devices"]
    assert "allocatable 7, expected 8 (capacity 8)" in state["problems"][0]["message"]
    assert "Xid" in state["problems"][0]["message"]


def test_not_ready_says_since_when_and_why():
    node = set_ready(TWIN_NODE, "Unknown", READY_AT + 60, reason="NodeStatusUnknown")
    state = check_node(node, expectation(), LATER)
    assert codes(state) == ["not_ready"]
    assert "Ready=Unknown, NodeStatusUnknown" in state["problems"][0]["message"]
    assert format_time(READY_AT + 60) in state["problems"][0]["message"]
    assert check_node(node, expectation(require_ready=False), LATER)["problems"] == []


def test_unchanged_boot_id_is_never_rebooted():
    state = check_node(TWIN_NODE, expectation(boot_id_before=BOOT_ID), LATER)
    assert codes(state) == ["not_rebooted"] and state["rebooted"] is False
    state = check_node(TWIN_NODE, expectation(boot_id_before="an-older-boot"), LATER)
    assert state["problems"] == [] and state["rebooted"] is True


def test_label_mismatch_names_the_value_the_node_shows():
    state = check_node(TWIN_NODE, expectation(labels={"nvidia.com/cuda.driver-version.full": "620.1.2",
                                                      "example.com/absent": "x"}), LATER)
    assert codes(state) == ["label_mismatch", "label_mismatch"]
    assert state["label_mismatches"] == {"nvidia.com/cuda.driver-version.full": "615.71.09",
                                         "example.com/absent": None}
    assert "is '615.71.09', expected '620.1.2'" in " ".join(p["message"] for p in state["problems"])


def test_problems_of_one_node_come_worst_first():
    node = set_ready(TWIN_NODE, "False", READY_AT)
    node["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    state = check_node(node, expectation(boot_id_before=BOOT_ID, labels={"nvidia.com/gpu.count": "4"}), LATER)
    assert codes(state) == ["not_ready", "not_rebooted", "stale_device_plugin", "label_mismatch"]


def test_missing_node():
    assert codes(check_node(None, expectation(), LATER)) == ["node_missing"]


def test_diagnosis_orders_nodes_by_their_worst_problem():
    stale = copy.deepcopy(TWIN_NODE)
    stale["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    states = {"gpu-a": check_node(stale, expectation(), LATER),
              "gpu-b": check_node(set_ready(TWIN_NODE, "False", READY_AT), expectation(), LATER),
              "gpu-c": check_node(TWIN_NODE, expectation(), LATER)}
    rows = diagnosis(states)
    assert [(row["node"], row["code"]) for row in rows] == [("gpu-b", "not_ready"), ("gpu-a", "stale_device_plugin")]
    assert summary(rows).startswith("gpu-b: NotReady")


def test_tracker_waits_stable_seconds_from_the_later_of_ready_and_first_pass():
    tracker = NodeTracker("gpu-node-01", expectation(), stable_seconds=10)
    first = tracker.observe(TWIN_NODE, READY_AT + 2)
    assert not first["satisfied"] and codes(first) == ["not_stable"]
    assert tracker.due_at(READY_AT + 2) == READY_AT + 12
    assert not tracker.observe(TWIN_NODE, READY_AT + 11)["satisfied"]
    done = tracker.observe(TWIN_NODE, READY_AT + 12)
    assert done["satisfied"] and done["satisfied_at"] == format_micro_time(READY_AT + 12) and done["problems"] == []


def test_tracker_restarts_the_stable_clock_when_a_check_fails_meanwhile():
    tracker = NodeTracker("gpu-node-01", expectation(), stable_seconds=5)
    tracker.observe(TWIN_NODE, LATER)
    stale = copy.deepcopy(TWIN_NODE)
    stale["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    assert codes(tracker.observe(stale, LATER + 3)) == ["stale_device_plugin"]
    assert not tracker.observe(TWIN_NODE, LATER + 6)["satisfied"]
    assert tracker.observe(TWIN_NODE, LATER + 11)["satisfied"]


def test_ready_from_before_the_reboot_does_not_count_once_the_old_boot_was_seen():
    tracker = NodeTracker("gpu-node-01", expectation(boot_id_before=BOOT_ID), stable_seconds=0)
    assert codes(tracker.observe(TWIN_NODE, LATER)) == ["not_rebooted"]
    rebooted_fast = copy.deepcopy(TWIN_NODE)      # new boot, but Ready never changed (a fast reboot)
    rebooted_fast["status"]["nodeInfo"]["bootID"] = "new-boot"
    assert codes(tracker.observe(rebooted_fast, LATER + 30)) == ["ready_before_reboot"]
    fresh = set_ready(rebooted_fast, "True", LATER + 40)
    state = tracker.observe(fresh, LATER + 41)
    assert state["satisfied"] and state["rebooted"] is True


def test_dra_counts_whole_gpus_of_the_newest_pool_generation():
    v1_slice = fixture("resourceslice_v1_gpu-nvidia-com_CONSTRUCTED.json")
    assert dra_gpu_count([v1_slice], "gpu-node-07") == 2
    older = copy.deepcopy(v1_slice)
    older["spec"]["pool"]["generation"] = 1
    older["spec"]["devices"] = older["spec"]["devices"][:1]
    assert dra_gpu_count([older, v1_slice], "gpu-node-07") == 2
    v1beta1 = copy.deepcopy(v1_slice)
    v1beta1["spec"]["devices"] = [{"name": d["name"], "basic": {"attributes": d["attributes"]}}
                                  for d in v1_slice["spec"]["devices"]]
    assert dra_gpu_count([v1beta1], "gpu-node-07") == 2
    assert dra_gpu_count([v1_slice], "another-node") is None
    other_driver = copy.deepcopy(v1_slice)
    other_driver["spec"]["driver"] = "gpu.example.com"
    assert dra_gpu_count([other_driver], "gpu-node-07") is None


def test_dra_node_diagnosis():
    assert check_node(TWIN_NODE, expectation(resource="dra"), LATER, dra_devices=8)["problems"] == []
    assert codes(check_node(TWIN_NODE, expectation(resource="dra"), LATER, dra_devices=None)) == ["no_gpu_capacity"]
    assert codes(check_node(TWIN_NODE, expectation(resource="dra", count=8), LATER, dra_devices=7)) == [
        "fewer_devices"]


def test_dra_version_prefers_ga():
    assert dra_api_version(["v1beta1", "v1", "v1beta2"]) == "v1"
    assert dra_api_version(["v1beta1", "v1beta2"]) == "v1beta2"
    assert dra_api_version(["v1beta1"]) == "v1beta1"
    assert dra_api_version(["v1alpha3"]) is None


# ------------------------------------------------------------------ GFD's product and count labels against NVML

H100 = "NVIDIA H100 80GB HBM3"


def with_labels(node, **labels):
    node = copy.deepcopy(node)
    node["metadata"]["labels"].update(labels)
    for key in [key for key, value in node["metadata"]["labels"].items() if value is None]:
        del node["metadata"]["labels"][key]
    return node


def gfd_problems(node, names):
    return [problem["message"] for problem in gfd_label_problems(node, names)]


def test_gfd_product_name_joins_the_nvml_words_with_dashes():
    assert gfd_product_name(H100) == "NVIDIA-H100-80GB-HBM3"
    assert gfd_product_name("  Tesla  V100-SXM2-16GB ") == "Tesla-V100-SXM2-16GB"


def test_labels_that_agree_with_nvml_raise_nothing_and_the_node_is_back():
    assert gfd_problems(TWIN_NODE, [H100] * 8) == []
    state = check_node(TWIN_NODE, expectation(nvml_gpu_names=[H100] * 8), LATER)
    assert codes(state) == []


def test_a_product_label_left_from_another_gpu_model_is_named_with_what_nvml_sees():
    stale = with_labels(TWIN_NODE, **{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})
    assert gfd_problems(stale, [H100] * 8) == [
        "label nvidia.com/gpu.product is 'NVIDIA-A100-SXM4-80GB', but NVML on the node sees 'NVIDIA-H100-80GB-HBM3': "
        "GPU Feature Discovery has not relabelled the node (is its pod running there?)"]
    assert codes(check_node(stale, expectation(nvml_gpu_names=[H100] * 8), LATER)) == ["gfd_label_mismatch"]


def test_a_count_label_that_misses_a_gpu_nvml_sees_or_absent_labels_fail():
    assert gfd_problems(TWIN_NODE, [H100] * 7) == [
        "label nvidia.com/gpu.count is '8', but NVML on the node sees 7 GPUs"]
    bare = with_labels(TWIN_NODE, **{"nvidia.com/gpu.product": None, "nvidia.com/gpu.count": None})
    assert [message.split(",")[0] for message in gfd_problems(bare, [H100] * 8)] == [
        "label nvidia.com/gpu.product is absent", "label nvidia.com/gpu.count is absent"]


def test_gfd_suffixes_for_mig_and_sharing_are_accepted_and_the_mig_single_count_is_not_checked():
    # GFD README: the MIG single strategy labels the MIG profile's product and counts MIG devices
    mig_single = with_labels(TWIN_NODE, **{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
                                           "nvidia.com/gpu.count": "56"})
    assert gfd_problems(mig_single, [H100] * 8) == []
    shared = with_labels(TWIN_NODE, **{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED"})
    assert gfd_problems(shared, [H100] * 8) == []
    # a longer model name is not a suffix of the expected one
    longer = with_labels(TWIN_NODE, **{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3e"})
    assert len(gfd_problems(longer, [H100] * 8)) == 1


def test_mixed_models_get_the_count_check_alone_and_no_names_means_no_check():
    assert gfd_problems(TWIN_NODE, [H100] * 4 + ["NVIDIA L40S"] * 4) == []
    assert gfd_problems(TWIN_NODE, [H100] * 4 + ["NVIDIA L40S"] * 3) == [
        "label nvidia.com/gpu.count is '8', but NVML on the node sees 7 GPUs"]
    assert gfd_problems(TWIN_NODE, []) == [] and gfd_problems(TWIN_NODE, None) == []
