# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests for the driver upgrade runbook's planner: validation, batches, budget, window, records, resume."""

from __future__ import annotations

import datetime
import json

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout import plan

NODES8 = ["gpu-node-%02d" % number for number in range(1, 9)]


def node(name, ready=True, cordoned=False, labels=None, annotations=None, gpus=8):
    return {
        "metadata": {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"capacity": {"nvidia.com/gpu": str(gpus)} if gpus else {},
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def valid(**overrides):
    """The planner's errors as ``option: message`` lines for good inputs with ``overrides``."""
    options = dict(driver_version="615.71.09", cluster_name="lab", nodes=list(NODES8), batches=[1, "25%"])
    options.update(overrides)
    return plan.error_lines(plan.validate_inputs(options))


# --------------------------------------------------------------------------- validation

def test_good_inputs_have_no_errors():
    assert valid() == []
    assert valid(canary_nodes=["gpu-node-03"], max_unavailable="25%", soak_seconds={"canary": 600, "batch": 60},
                 maintenance_window={"days": ["sat", "sun"], "start": "22:00", "end": "04:00",
                                     "timezone": "Europe/Berlin"},
                 wait_for_pods_selector="workload in (training, eval),!debug", validator_pod_selector="",
                 drain_timeout=900, reboot_timeout="1200", ready_timeout=900, wait_for_pods_timeout=3600,
                 budget_wait_timeout=0, lock_ttl=3600, silence_seconds=7800, lock_name="gpuops-nvidia-rollout",
                 run_id="20260101T000000Z-1a2b", prometheus_url="http://prometheus.monitoring:9090",
                 alertmanager_url="https://alertmanager.example.com/", pre_node_tasks=["/srv/hooks/drain-slurm.yml"],
                 post_node_tasks=[], spread_label="topology.kubernetes.io/zone") == []


def test_every_bad_input_is_named_at_once_by_its_option():
    errors = valid(driver_version="615.71.09; reboot", cluster_name="", nodes=["gpu-node-01", "node$(id)"],
                   batches=[1, "125%", 0, "x"], canary_nodes=["gpu-node-09"], max_unavailable=0,
                   max_fail_percentage=150, soak_seconds=-1)
    assert [line.split(":")[0] for line in errors] == [
        "driver_version", "cluster_name", "nodes", "batches", "canary_nodes", "max_unavailable",
        "max_fail_percentage", "soak_seconds"]
    text = "\n".join(errors)
    assert "driver_version: '615.71.09; reboot' is not a driver version" in text
    assert "'node$(id)'" in text
    assert "'125%', 0, 'x'" in text
    assert "canary_nodes: not among the target nodes: gpu-node-09" in text
    assert "gpuops_" not in text


@pytest.mark.parametrize("version", ["615.71.09", "550.54.15", "535.104.05", "470.74", "1000.1.1"])
def test_real_driver_versions_are_accepted(version):
    assert valid(driver_version=version) == []


def test_unknown_nodes_are_named_once_the_cluster_is_read():
    assert plan.error_lines(plan.unknown_node_errors(["gpu-node-01", "gpu-node-77", "x y"], NODES8)) == [
        "nodes: the cluster has no node gpu-node-77"]
    assert plan.unknown_node_errors(NODES8, NODES8) == []


def test_bad_maintenance_window_is_explained():
    errors = valid(maintenance_window={"days": ["someday"], "start": "25:00", "end": "4", "timezone": "Mars/Base",
                                       "every": 2})
    text = "\n".join(errors)
    for expected in ("unknown keys: every", "days must", "start must", "end must", "timezone 'Mars/Base'"):
        assert "maintenance_window: " + expected in text


# One row per bad input: (option, value, what the message must say). Each is refused by the option's name with the
# value and a remedy, never with a traceback.
BAD_INPUTS = [
    ("driver_version", "615", "not a driver version such as 595.91.07"),
    ("driver_version", "", "not a driver version"),
    ("driver_version", None, "not a driver version"),
    ("driver_version", "６15.71.09", "digits 0-9"),
    ("driver_version", "615.71.09\n", "not a driver version"),
    ("driver_version", "{{ lookup('env', 'HOME') }}", "not a driver version"),
    ("driver_version", 615.71, "not a driver version"),
    ("driver_version", ["615.71.09"], "not a driver version"),
    ("cluster_name", "", "must be the cluster's name"),
    ("cluster_name", "Prod East", "must be the cluster's name"),
    ("cluster_name", "{{ cluster }}", "must be the cluster's name"),
    ("nodes", [], "no target nodes"),
    ("nodes", "gpu-node-01", "no target nodes"),
    ("nodes", ["gpu-node-01", "gpu-node-01"], "listed twice: gpu-node-01"),
    ("nodes", ["gpu-node-01; reboot"], "not Kubernetes node names"),
    ("nodes", ["a" * 254], "not Kubernetes node names"),
    ("batches", [], "non-empty list"),
    ("batches", "25%", "non-empty list"),
    ("batches", [1, "２5%"], "counts >= 1 or percentages"),
    ("batches", [1, "²"], "counts >= 1 or percentages"),
    ("batches", [True], "counts >= 1 or percentages"),
    ("batches", [1, "0%"], "counts >= 1 or percentages"),
    ("batches", [1, "1000%"], "counts >= 1 or percentages"),
    ("batches", [1, None], "counts >= 1 or percentages"),
    ("batches", [1, {"size": 2}], "counts >= 1 or percentages"),
    ("batches", [1, "{{ n }}"], "counts >= 1 or percentages"),
    ("batches", [-1], "counts >= 1 or percentages"),
    ("canary_nodes", "gpu-node-01", "must be a list of node names"),
    ("canary_nodes", ["gpu-node-99"], "not among the target nodes: gpu-node-99"),
    ("max_unavailable", 0, "count >= 1 or a percentage"),
    ("max_unavailable", "x", "count >= 1 or a percentage"),
    ("max_unavailable", "１", "digits 0-9"),
    ("max_unavailable", [1], "count >= 1 or a percentage"),
    ("max_fail_percentage", 150, "from 0 to 100"),
    ("max_fail_percentage", -1, "from 0 to 100"),
    ("max_fail_percentage", float("nan"), "from 0 to 100"),
    ("max_fail_percentage", 10 ** 400, "from 0 to 100"),
    ("max_fail_percentage", "５0", "from 0 to 100"),
    ("soak_seconds", -1, "seconds from 0 to 604800"),
    ("soak_seconds", 10 ** 30, "seconds from 0 to 604800"),
    ("soak_seconds", float("inf"), "seconds from 0 to 604800"),
    ("soak_seconds", {"canary": 60, "after": 5}, "takes the keys canary and batch"),
    ("soak_seconds", {"canary": "６0"}, "seconds from 0 to 604800"),
    ("soak_seconds", "ten", "seconds from 0 to 604800"),
    ("maintenance_window", "sat 22:00-04:00", "must be a mapping"),
    ("maintenance_window", {"start": "２２:00", "end": "04:00"}, "start must be HH:MM"),
    ("maintenance_window", {"start": "22:00", "end": "04:00", "timezone": "../../etc/passwd"}, "not a known time"),
    ("maintenance_window", {"start": "22:00", "end": "04:00", "timezone": 5}, "not a known time zone"),
    ("spread_label", "", "must be a node label name"),
    ("spread_label", "rack id", "must be a node label name"),
    ("wait_for_pods_selector", "app=(x", "not a label selector"),
    ("wait_for_pods_selector", "app in training", "not a label selector"),
    ("wait_for_pods_selector", "workload=training,", "not a label selector"),
    ("wait_for_pods_selector", "job={{ name }}", "not a label selector"),
    ("wait_for_pods_selector", "team=ａ", "not a label selector"),
    ("wait_for_pods_selector", ["app=x"], "not a label selector"),
    ("validator_pod_selector", "app===x", "not a label selector"),
    ("drain_timeout", -5, "whole seconds from 1 to 604800"),
    ("drain_timeout", 0, "whole seconds from 1 to 604800"),
    ("drain_timeout", "２5", "digits 0-9"),
    ("drain_timeout", " 25", "whole seconds"),
    ("drain_timeout", "", "whole seconds"),
    ("drain_timeout", 10 ** 20, "whole seconds from 1 to 604800"),
    ("drain_timeout", 1.5, "whole seconds"),
    ("drain_timeout", True, "whole seconds"),
    ("reboot_timeout", "20m", "whole seconds"),
    ("ready_timeout", "{{ 900 }}", "whole seconds"),
    ("wait_for_pods_timeout", -3600, "whole seconds from 1 to 604800"),
    ("budget_wait_timeout", -1, "whole seconds from 0 to 604800"),
    ("lock_ttl", 0, "whole seconds from 1 to 604800"),
    ("silence_seconds", "9" * 40, "whole seconds"),
    ("lock_name", "Rollout Lock", "not a Lease name"),
    ("run_id", "../../etc", "letters, digits"),
    ("run_id", "", "letters, digits"),
    ("prometheus_url", "prometheus:9090", "not an http(s) URL"),
    ("prometheus_url", "http://prom metheus", "not an http(s) URL"),
    ("alertmanager_url", "ftp://alertmanager", "not an http(s) URL"),
    ("alertmanager_url", "http://{{ host }}", "not an http(s) URL"),
    ("pre_node_tasks", "hooks/drain.yml", "must be a list of task files"),
    ("pre_node_tasks", ["hooks/drain.sh"], "ending in .yml or .yaml"),
    ("post_node_tasks", ["{{ hook }}.yml"], "no templating"),
    ("post_node_tasks", [None], "ending in .yml or .yaml"),
]


@pytest.mark.parametrize("option,value,expected", BAD_INPUTS, ids=["%s-%d" % (row[0], index)
                                                                   for index, row in enumerate(BAD_INPUTS)])
def test_a_bad_input_is_refused_naming_its_option(option, value, expected):
    options = dict(driver_version="615.71.09", cluster_name="lab", nodes=list(NODES8), batches=[1, "25%"])
    options[option] = value
    errors = plan.validate_inputs(options)
    assert [error["option"] for error in errors] == [option], errors
    assert expected in errors[0]["message"], errors[0]["message"]


# --------------------------------------------------------------------------- counts and batches

@pytest.mark.parametrize("value,total,round_up,expected", [
    (3, 8, True, 3), ("3", 8, False, 3), ("25%", 8, True, 2), ("25%", 10, True, 3), ("25%", 10, False, 2),
    ("100%", 16, True, 16), ("0%", 16, True, 0),
])
def test_scale_count(value, total, round_up, expected):
    assert plan.scale_count(value, total, round_up) == expected


def test_budget_never_below_one():
    assert plan.max_unavailable_nodes("10%", 4) == 1
    assert plan.max_unavailable_nodes("25%", 16) == 4
    assert plan.max_unavailable_nodes(2, 16) == 2


def test_default_batches_are_the_canary_then_quarters():
    assert plan.plan_batches(NODES8, [1, "25%"]) == [
        ["gpu-node-01"], ["gpu-node-02", "gpu-node-03"], ["gpu-node-04", "gpu-node-05"],
        ["gpu-node-06", "gpu-node-07"], ["gpu-node-08"]]


def test_named_canary_goes_first_and_the_rest_keep_inventory_order():
    batches = plan.plan_batches(NODES8, [1, 3, 4], canary_nodes=["gpu-node-05"])
    assert batches == [["gpu-node-05"], ["gpu-node-01", "gpu-node-02", "gpu-node-03"],
                       ["gpu-node-04", "gpu-node-06", "gpu-node-07", "gpu-node-08"]]


def test_every_target_is_planned_exactly_once():
    for batches in ([1], [2, "50%"], [1, "10%", 3], ["100%"]):
        planned = plan.plan_batches(NODES8, batches)
        flat = [name for batch in planned for name in batch]
        assert sorted(flat) == NODES8 and len(flat) == len(set(flat))


def test_spread_takes_one_node_per_failure_domain_while_others_have_nodes_left():
    domain_of = {name: "rack-a" if index < 6 else "rack-b" for index, name in enumerate(NODES8)}
    batches = plan.plan_batches(NODES8, [1, 3], domain_of=domain_of)
    for batch in batches:
        domains = [domain_of[name] for name in batch]
        remaining_domains = set(domain_of[name] for later in batches[batches.index(batch):] for name in later)
        if len(remaining_domains) > 1:
            assert len(domains) == len(set(domains)), batch
    assert sorted(name for batch in batches for name in batch) == NODES8
    # once rack-b is done, rack-a's last nodes may share a batch
    assert batches == [["gpu-node-01"], ["gpu-node-02", "gpu-node-07"], ["gpu-node-03", "gpu-node-08"],
                       ["gpu-node-04", "gpu-node-05", "gpu-node-06"]]


# --------------------------------------------------------------------------- budget and blockers

def test_nodes_out_by_anyone_count_against_the_budget():
    nodes = [node("gpu-node-01"), node("gpu-node-02", cordoned=True), node("gpu-node-03", ready=False),
             node("gpu-node-04", cordoned=True, ready=False)]
    assert plan.unavailable_nodes(nodes) == {"gpu-node-02": "cordoned", "gpu-node-03": "NotReady",
                                             "gpu-node-04": "cordoned and NotReady"}


def test_operator_upgrade_and_kured_lock_on_targets_block():
    nodes = [node("gpu-node-01", labels={plan.OPERATOR_STATE_LABEL: "drain-required"}),
             node("gpu-node-02", labels={plan.OPERATOR_STATE_LABEL: "upgrade-done"}),
             node("cpu-node-01", labels={plan.OPERATOR_STATE_LABEL: "drain-required"})]
    kured = {"metadata": {"name": "kured", "namespace": "kube-system", "annotations": {
        plan.KURED_LOCK_ANNOTATION: json.dumps({"nodeID": "gpu-node-02", "unschedulable": False})}}}
    found = plan.other_upgraders(nodes, ["gpu-node-01", "gpu-node-02"], [kured])
    assert [(entry["node"], "GPU Operator" in entry["reason"], "kured" in entry["reason"]) for entry in found] == [
        ("gpu-node-01", True, False), ("gpu-node-02", False, True)]


def test_kured_multi_lock_and_garbage_annotations():
    multi = {"metadata": {"name": "kured", "annotations": {plan.KURED_LOCK_ANNOTATION: json.dumps(
        {"maxOwners": 2, "locks": [{"nodeID": "gpu-node-03"}, {"nodeID": "cpu-1"}]})}}}
    garbage = {"metadata": {"name": "kured2", "annotations": {plan.KURED_LOCK_ANNOTATION: "not json"}}}
    found = plan.other_upgraders([], ["gpu-node-03"], [multi, garbage])
    assert [entry["node"] for entry in found] == ["gpu-node-03"]


# --------------------------------------------------------------------------- maintenance window

def utc(*args):
    return datetime.datetime(*args, tzinfo=datetime.timezone.utc)


def test_window_over_midnight_belongs_to_the_day_it_starts():
    window = {"days": ["sat"], "start": "22:00", "end": "04:00", "timezone": "UTC"}
    assert plan.in_maintenance_window(window, utc(2026, 12, 5, 23, 0))      # Saturday 23:00
    assert plan.in_maintenance_window(window, utc(2026, 12, 6, 3, 59))      # Sunday 03:59, Saturday's window
    assert not plan.in_maintenance_window(window, utc(2026, 12, 6, 4, 0))
    assert not plan.in_maintenance_window(window, utc(2026, 12, 6, 23, 0))  # Sunday night is not listed


def test_window_honours_its_time_zone():
    window = {"days": ["thu"], "start": "09:00", "end": "17:00", "timezone": "America/New_York"}
    assert not plan.in_maintenance_window(window, utc(2026, 12, 3, 13, 0))  # 08:00 in New York
    assert plan.in_maintenance_window(window, utc(2026, 12, 3, 14, 0))      # 09:00 in New York


def test_no_window_is_always_open():
    assert plan.in_maintenance_window(None, utc(2026, 12, 3, 3, 0))


# --------------------------------------------------------------------------- records and resume

def test_record_round_trip_through_the_annotation():
    value = plan.dump_record({"state": "rebooting", "from": "595.91.07", "to": "615.71.09", "run_id": "run-1",
                              "boot_id_before": "b1", "cordoned_by_us": True})
    record = plan.parse_record(node("n", annotations={plan.RECORD_ANNOTATION: value}))
    assert record == {"state": "rebooting", "from": "595.91.07", "to": "615.71.09", "run_id": "run-1",
                      "boot_id_before": "b1", "cordoned_by_us": True}
    assert plan.parse_record(node("n", annotations={plan.RECORD_ANNOTATION: "{broken"})) is None
    with pytest.raises(ValueError):
        plan.dump_record({"state": "sleeping", "from": "1", "to": "2", "run_id": "r"})


@pytest.mark.parametrize("state,loaded,boot_id,expected", [
    (None, "595.91.07", "b1", "start"),
    (None, "615.71.09", "b1", "skip"),
    ("draining", "595.91.07", "b1", "continue"),
    ("installing", "595.91.07", "b1", "continue"),
    ("rebooting", "595.91.07", "b1", "reboot"),       # the reboot never happened
    ("rebooting", "615.71.09", "b2", "verify"),       # rebooted: never reboot twice
    ("verifying", "615.71.09", "b2", "verify"),
    ("done", "615.71.09", "b2", "skip"),
    ("failed", "595.91.07", "b2", "failed"),
])
def test_resume_continues_from_the_record(state, loaded, boot_id, expected):
    record = None
    if state:
        record = {"state": state, "from": "595.91.07", "to": "615.71.09", "run_id": "run-1", "boot_id_before": "b1"}
    assert plan.resume_action(record, "615.71.09", loaded, boot_id) == expected


def test_a_record_for_another_target_starts_over():
    record = {"state": "done", "from": "580.1.1", "to": "595.91.07", "run_id": "run-0"}
    assert plan.resume_action(record, "615.71.09", "595.91.07", "b") == "start"


def test_plan_skips_nodes_at_target_and_names_blockers():
    gfd = plan.GFD_DRIVER_LABEL
    nodes = [node(name, labels={gfd: "595.91.07"}) for name in NODES8[:4]]
    nodes[1]["metadata"]["labels"][gfd] = "615.71.09"
    nodes[2]["spec"]["unschedulable"] = True
    nodes.append(node("cpu-node-01", gpus=0))
    result = plan.build_plan(NODES8[:4], nodes, "615.71.09", [1, "50%"], max_unavailable="50%")
    assert result["skipped"] == [{"node": "gpu-node-02", "reason": "already at 615.71.09"}]
    assert result["blockers"] == [{"node": "gpu-node-03", "reason": "already cordoned (not by this roll-out)"}]
    assert [batch["nodes"] for batch in result["batches"]] == [["gpu-node-01"], ["gpu-node-03", "gpu-node-04"]]
    assert result["batches"][0]["kind"] == "canary"
    assert result["max_unavailable"] == 2
    assert result["unavailable_now"] == {"gpu-node-03": "cordoned"}
    assert result["nodes"]["gpu-node-01"]["current_version"] == "595.91.07"
    assert not any(entry["mid_maintenance"] for entry in result["nodes"].values())


def test_a_node_whose_record_is_mid_upgrade_is_mid_maintenance_and_one_done_or_failed_is_not():
    nodes = [node(name, labels={plan.GFD_DRIVER_LABEL: "595.91.07"}) for name in NODES8[:3]]
    for index, state in enumerate(("rebooting", "done", "failed")):
        nodes[index]["metadata"]["annotations"] = {plan.RECORD_ANNOTATION: json.dumps(
            {"state": state, "from": "595.91.07", "to": "615.71.09", "run_id": "run-1", "boot_id_before": "b1"})}
    result = plan.build_plan(NODES8[:3], nodes, "615.71.09", [1, "50%"])
    assert {name: entry["mid_maintenance"] for name, entry in result["nodes"].items()} == \
        {"gpu-node-01": True, "gpu-node-02": False, "gpu-node-03": False}


# --------------------------------------------------------------------------- the gate before each batch

def lease(pause=None):
    return {"metadata": {"name": "gpuops-nvidia-rollout", "annotations": {plan.PAUSE_ANNOTATION: pause} if pause
                         else {}}}


def test_batch_gate_passes_within_budget():
    nodes = [node(name) for name in NODES8]
    verdict = plan.batch_gate(nodes, ["gpu-node-01", "gpu-node-02"], "25%", lease=lease())
    assert verdict["ok"] and verdict["max_unavailable"] == 2 and verdict["reasons"] == []


def test_batch_gate_counts_nodes_out_by_others_but_not_our_own_twice():
    nodes = [node(name) for name in NODES8]
    nodes[7]["spec"]["unschedulable"] = True            # someone else's cordon
    nodes[0]["spec"]["unschedulable"] = True            # ours, from an interrupted run
    verdict = plan.batch_gate(nodes, ["gpu-node-01"], 2)
    assert verdict["ok"]
    verdict = plan.batch_gate(nodes, ["gpu-node-01", "gpu-node-02"], 2)
    assert not verdict["ok"]
    assert verdict["reasons"] == ["budget spent: 3 GPU node(s) would be out, max_unavailable allows 2; "
                                  "out now: gpu-node-08 (cordoned)"]


def test_cpu_nodes_do_not_count():
    nodes = [node("gpu-node-01"), node("cpu-node-01", gpus=0, cordoned=True)]
    assert plan.batch_gate(nodes, ["gpu-node-01"], 1)["ok"]


def test_pause_and_window_are_reasons_too():
    nodes = [node("gpu-node-01")]
    window = {"days": ["sat"], "start": "22:00", "end": "04:00"}
    verdict = plan.batch_gate(nodes, ["gpu-node-01"], 1, window, utc(2026, 12, 3, 12, 0),
                              lease("alice: waiting for the quarterly training run"))
    assert not verdict["ok"]
    assert verdict["paused"] == {"by": "alice", "reason": "waiting for the quarterly training run"}
    assert verdict["reasons"][0].startswith("paused by alice: waiting for the quarterly training run")
    assert verdict["reasons"][1] == "outside the maintenance window 22:00-04:00 UTC on sat"
    assert plan.pause_of(lease("stop")) == ("someone", "stop")


def test_a_node_left_cordoned_by_our_interrupted_run_is_resumed_not_blocked():
    record = json.dumps({"state": "verifying", "from": "595.91.07", "to": "615.71.09", "run_id": "r",
                         "boot_id_before": "b1"})
    nodes = [node("gpu-node-01", cordoned=True, annotations={plan.RECORD_ANNOTATION: record},
                  labels={plan.GFD_DRIVER_LABEL: "615.71.09"}), node("gpu-node-02")]
    result = plan.build_plan(["gpu-node-01", "gpu-node-02"], nodes, "615.71.09", [1, 1])
    assert result["blockers"] == []
    assert result["nodes"]["gpu-node-01"]["action"] == "verify"
    assert [batch["nodes"] for batch in result["batches"]] == [["gpu-node-01"], ["gpu-node-02"]]


def test_a_node_killed_during_its_reboot_is_verified_once_its_boot_id_changed_and_rebooted_if_not():
    record = json.dumps({"state": "rebooting", "from": "595.91.07", "to": "615.71.09", "run_id": "r",
                         "boot_id_before": "b1", "mig_layout": [{"index": 0, "uuid": "GPU-0", "profiles": ["7g.80gb"]}]})
    nodes = [node(name, cordoned=True, annotations={plan.RECORD_ANNOTATION: record}) for name in NODES8[:3]]
    nodes[0]["status"]["nodeInfo"] = {"bootID": "b2"}      # came back: the kubelet reports its new boot
    nodes[1]["status"]["nodeInfo"] = {"bootID": "b1"}      # the reboot never happened
    result = plan.build_plan(NODES8[:3], nodes, "615.71.09", [3])
    assert [result["nodes"][name]["action"] for name in NODES8[:3]] == ["verify", "reboot", "reboot"]
    # the record travels with the plan: a resume re-creates the MIG layout the reboot dropped from it
    assert result["nodes"]["gpu-node-01"]["record"]["mig_layout"][0]["profiles"] == ["7g.80gb"]


def test_every_node_an_interrupted_run_left_mid_way_goes_in_the_resumed_plans_first_batch():
    """Chaos seed 130: a batch of two killed mid-drain must not be split by the resume's canary size."""
    draining = json.dumps({"state": "draining", "from": "595.91.07", "to": "615.71.09", "run_id": "r"})
    nodes = [node("gpu-node-%02d" % index, cordoned=index in (2, 3),
                  annotations={plan.RECORD_ANNOTATION: draining} if index in (2, 3) else None)
             for index in (1, 2, 3, 4)]
    names = [item["metadata"]["name"] for item in nodes]
    result = plan.build_plan(names, nodes, "615.71.09", [1, "50%"], max_unavailable="50%")
    assert result["blockers"] == []
    assert [batch["nodes"] for batch in result["batches"]] == [
        ["gpu-node-02", "gpu-node-03"], ["gpu-node-01", "gpu-node-04"]]


# --------------------------------------------------------------------------- what the drains will meet

def pod(name, node_name, labels=None, owner="ReplicaSet", empty_dir=False, namespace="ml"):
    spec = {"nodeName": node_name, "containers": [{"name": "c"}]}
    if empty_dir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    metadata = {"name": name, "namespace": namespace, "labels": dict(labels or {}), "uid": "uid-" + name}
    if owner:
        metadata["ownerReferences"] = [{"kind": owner, "name": "owner", "controller": True}]
    return {"metadata": metadata, "spec": spec,
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def test_drain_preview_names_refused_pods_and_pdbs_that_would_wait():
    pods = [pod("train-0", "gpu-node-01", labels={"app": "train"}),
            pod("scratch", "gpu-node-01", empty_dir=True),
            pod("bare", "gpu-node-02", owner=None),
            pod("elsewhere", "cpu-node-01", owner=None)]
    pdbs = [{"metadata": {"name": "train", "namespace": "ml"},
             "spec": {"selector": {"matchLabels": {"app": "train"}}}, "status": {"disruptionsAllowed": 0}}]
    preview = plan.drain_preview(["gpu-node-01", "gpu-node-02"], pods, pdbs)
    reasons = [(entry["node"], entry["reason"].split(":")[0]) for entry in preview["blockers"]]
    assert reasons == [("gpu-node-01", "a drain would refuse pod ml/scratch"),
                       ("gpu-node-02", "a drain would refuse pod ml/bare")]
    assert preview["pdb_waits"] == [{"node": "gpu-node-01", "pdb": "ml/train", "disruptions_allowed": 0,
                                     "pods": ["ml/train-0"]}]
    allowed = plan.drain_preview(["gpu-node-01"], pods, pdbs, delete_emptydir_data=True)
    assert allowed["blockers"] == []


def test_each_node_of_the_plan_carries_its_mig_strategy_and_mig_manager_config():
    mig = {"metadata": {"name": "gpu-node-01", "labels": {"nvidia.com/mig.strategy": "mixed",
                                                          "nvidia.com/mig.config": "all-3g.40gb"}}}
    plain = {"metadata": {"name": "gpu-node-02", "labels": {}}}
    assert plan.mig_labels(mig) == {"strategy": "mixed", "config": "all-3g.40gb"}
    assert plan.mig_labels(plain) == {"strategy": None, "config": None}
