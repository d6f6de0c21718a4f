# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests for the change engine's planner (rollout/change.py), the kinds table and the change record."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout import change, change_kinds, plan
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout.record import record_patch

NODES = ["gpu-node-%02d" % number for number in range(1, 6)]
TIER = {"labels": {"gpu.example.com/tier": "batch"}}


def node(name, cordoned=False, labels=None, annotations=None, ready=True):
    return {"metadata": {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})},
            "spec": {"unschedulable": True} if cordoned else {},
            "status": {"capacity": {"nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def recorded(kind, state, change_id, **fields):
    return {change.record_annotation(kind): json.dumps(dict(fields, state=state, change=change_id))}


def test_the_change_id_is_the_kind_and_a_hash_of_the_inputs_whatever_their_order():
    first = change.change_id("node_labels", {"labels": {"a": "1", "b": "2"}})
    assert first.startswith("node-labels-") and len(first) == len("node-labels-") + 12
    assert first == change.change_id("node_labels", {"labels": {"b": "2", "a": "1"}})
    assert first != change.change_id("node_labels", {"labels": {"a": "1"}})
    assert first != change.change_id("device_plugin_config", {"labels": {"a": "1", "b": "2"}})


def test_each_kind_has_its_own_record_annotation():
    assert change.record_annotation("node_labels") == "gpuops.nvidia/change-node-labels"
    assert change.record_annotation("gpu_operator_uninstall") == "gpuops.nvidia/change-gpu-operator-uninstall"


def test_the_kinds_table_is_the_risk_table():
    assert set(change_kinds.KINDS) == {"node_labels", "device_plugin_config", "containerd_config", "kubelet_config",
                                       "mig_layout", "gpu_operator_uninstall"}
    assert all(kind.disruption in change_kinds.DISRUPTIONS for kind in change_kinds.KINDS.values())
    assert [name for name, kind in sorted(change_kinds.KINDS.items()) if kind.two_person] == [
        "gpu_operator_uninstall", "node_labels"]
    with pytest.raises(ValueError, match="unknown change kind 'relabel': one of containerd_config"):
        change_kinds.kind_of("relabel")


@pytest.mark.parametrize("labels,wanted,at_target", [
    ({"gpu.example.com/tier": "batch"}, {"gpu.example.com/tier": "batch"}, True),
    ({"gpu.example.com/tier": "train"}, {"gpu.example.com/tier": "batch"}, False),
    ({}, {"gpu.example.com/tier": "batch"}, False),
    ({"old": "x"}, {"old": None}, False),
    ({}, {"old": None}, True),
])
def test_a_node_that_already_carries_the_labels_is_at_the_target(labels, wanted, at_target):
    assert change_kinds.labels_at_target(node("n", labels=labels), {"labels": wanted}) is at_target


@pytest.mark.parametrize("record,at_target,action", [
    (None, False, "start"),
    (None, True, "skip"),
    ({"change": "c1", "state": "done"}, False, "skip"),
    ({"change": "c1", "state": "applying"}, True, "continue"),
    ({"change": "c1", "state": "verifying"}, False, "continue"),
    ({"change": "c1", "state": "failed"}, False, "failed"),
    ({"change": "c1", "state": "rolled-back"}, False, "start"),
    ({"change": "c0", "state": "failed"}, False, "start"),
    ({"change": "c0", "state": "done"}, True, "skip"),
])
def test_the_resume_action_comes_from_the_record_of_this_change(record, at_target, action):
    assert change.resume_action(record, "c1", at_target) == action


def test_the_plan_batches_the_nodes_to_do_with_the_kind_default_schedule_canary_first():
    this = change.change_id("node_labels", TIER)
    nodes = [node(NODES[0], labels=TIER["labels"]), node(NODES[1], annotations=recorded("node_labels", "done", this))]
    nodes += [node(name) for name in NODES[2:]]
    planned = change.build_change_plan("node_labels", TIER, NODES, nodes)
    assert planned["change_id"] == this
    assert [batch["nodes"] for batch in planned["batches"]] == [NODES[2:3], NODES[3:]]   # 1, then 100 %
    assert [batch["kind"] for batch in planned["batches"]] == ["canary", "batch"]
    assert [entry["node"] for entry in planned["skipped"]] == NODES[:2]
    assert planned["skipped"][0]["reason"] == "already changed (the node shows it)"
    assert planned["skipped"][1]["reason"] == "already changed (recorded done)"
    assert planned["blockers"] == []
    assert planned["change_kind"]["disruption"] == "none" and planned["change_kind"]["two_person"]
    # a kind that keeps its nodes in service takes nothing from the budget
    assert planned["max_unavailable"] == len(NODES)


def test_a_node_left_mid_way_goes_first_and_a_failed_one_blocks():
    this = change.change_id("containerd_config", {"x": 1})
    nodes = [node(name) for name in NODES]
    nodes[3] = node(NODES[3], cordoned=True, annotations=recorded("containerd_config", "applying", this))
    nodes[4] = node(NODES[4], annotations=recorded("containerd_config", "failed", this, reason="smoke test: boom"))
    planned = change.build_change_plan("containerd_config", {"x": 1}, NODES, nodes, batches=[1, 2], max_unavailable=2)
    assert planned["batches"][0]["nodes"] == [NODES[3]]
    assert planned["nodes"][NODES[3]]["action"] == "continue"
    assert planned["blockers"] == [{"node": NODES[4], "reason": "a previous run of this change failed the node: "
                                                                "smoke test: boom"}]
    assert planned["max_unavailable"] == 2
    # the record of another change of the kind is not this change's (its previous is not what this one captured)
    nodes[4] = node(NODES[4], annotations=recorded("containerd_config", "failed", "another", previous={"old": 1}))
    planned = change.build_change_plan("containerd_config", {"x": 1}, NODES, nodes, batches=[1, 2], max_unavailable=2)
    assert planned["nodes"][NODES[4]] == {"action": "start", "record": None, "labels": {}}


def test_another_change_or_a_driver_roll_out_in_progress_on_a_node_blocks_it():
    nodes = [node(name) for name in NODES]
    nodes[0]["metadata"]["annotations"].update(recorded("kubelet_config", "applying", "kubelet-config-1", run_id="r9"))
    nodes[1]["metadata"]["annotations"][plan.RECORD_ANNOTATION] = json.dumps({"state": "rebooting", "to": "615.71.09"})
    nodes[2]["metadata"]["annotations"].update(recorded("kubelet_config", "done", "kubelet-config-1"))
    planned = change.build_change_plan("node_labels", TIER, NODES, nodes)
    assert planned["blockers"] == [
        {"node": NODES[0], "reason": "another change is in progress on it "
                                     "(gpuops.nvidia/change-kubelet-config applying, run r9)"},
        {"node": NODES[1], "reason": "a driver roll-out is in progress on it (gpuops.nvidia/driver-upgrade rebooting)"}]


def test_a_kind_that_takes_nodes_out_is_blocked_by_a_node_someone_else_cordoned():
    nodes = [node(name) for name in NODES]
    nodes[2] = node(NODES[2], cordoned=True)
    assert change.build_change_plan("kubelet_config", {}, NODES, nodes)["blockers"] == [
        {"node": NODES[2], "reason": "already cordoned (not by this change)"}]
    assert change.build_change_plan("node_labels", TIER, NODES, nodes)["blockers"] == []


def test_the_change_record_is_keyed_by_the_change_id_and_keeps_the_fields_of_the_same_change():
    kind = change.record_kind("node_labels")
    first = node("n")
    patch, record = record_patch(first, {"state": "applying", "change": "c1", "run_id": "r1",
                                         "previous": {"tier": None}}, now="2026-12-05T01:00:00Z", kind=kind)
    assert record["state"] == "applying" and record["previous"] == {"tier": None}
    assert patch["remediation.medik8s.io/exclude-from-remediation"] == "true"
    first["metadata"]["annotations"].update(patch)
    patch, record = record_patch(first, {"state": "done", "change": "c1"}, now="2026-12-05T01:00:05Z", kind=kind)
    assert record["previous"] == {"tier": None} and record["run_id"] == "r1"
    assert set(record["steps"]) == {"applying", "done"}
    assert patch["remediation.medik8s.io/exclude-from-remediation"] is None
    first["metadata"]["annotations"].update(patch)
    _patch, record = record_patch(first, {"state": "applying", "change": "c2"}, kind=kind)
    assert "previous" not in record and "run_id" not in record      # another change starts over
    with pytest.raises(ValueError, match="record state must be one of applying"):
        record_patch(first, {"state": "draining", "change": "c2"}, kind=kind)


def test_the_batch_gate_counts_no_budget_for_a_change_that_keeps_its_nodes_in_service():
    nodes = [node(name, cordoned=index < 2) for index, name in enumerate(NODES)]
    assert not plan.batch_gate(nodes, NODES[2:], 1)["ok"]
    assert plan.batch_gate(nodes, NODES[2:], 1, count_budget=False)["ok"]
