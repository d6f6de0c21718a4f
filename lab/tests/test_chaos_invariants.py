"""The chaos harness's judgement (benchmarks/chaos_invariants.py) and its seeded schedule
(benchmarks/chaos_schedule.py) on small hand-made records: each invariant holds on a good history and names the
break in a bad one. No twin needed."""
from __future__ import annotations

import json
import os
import sys

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          "benchmarks")
if BENCHMARKS not in sys.path:
    sys.path.insert(0, BENCHMARKS)

from chaos_invariants import (audit_names_actions, budget_at_own_cordons, lock_at_end, node_end_state,  # noqa: E402
                              reboots_per_upgrade, run_agrees, silences_left, summary_results, twin_actions,
                              untouched_after_a_stop)
from chaos_schedule import FAULT_KINDS, budget_of, plan_round  # noqa: E402

OLD, NEW = "595.91.07", "615.71.09"


def node(name, cordoned=False, ours=False, ready=True, record=None, label=NEW, gpus="8"):
    annotations = {}
    if ours:
        annotations["gpuops.nvidia/cordon"] = "true"
    if record is not None:
        annotations["gpuops.nvidia/driver-upgrade"] = json.dumps(record)
    return {"metadata": {"name": name, "annotations": annotations,
                         "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/cuda.driver-version.full": label}},
            "spec": {"unschedulable": True} if cordoned else {},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       "capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": gpus}}}


def change(ts, obj, event="MODIFIED"):
    return {"record": "change", "ts": ts, "resource": "nodes", "name": obj["metadata"]["name"], "event": event,
            "object": obj}


def audit_line(event, ts, **fields):
    return dict({"event": event, "ts": ts}, **fields)


# --------------------------------------------------------------------------- schedule

def test_a_round_is_the_same_from_the_same_seed_and_draws_valid_inputs():
    assert plan_round(1234) == plan_round(1234)
    assert plan_round(1234) != plan_round(1235)
    for seed in range(200):
        plan = plan_round(seed)
        assert 4 <= plan["nodes"] <= 8 and 1 <= len(plan["faults"]) <= 3
        assert sum(1 for fault in plan["faults"] if fault["kind"] == "controller-kill") <= 1
        budget = budget_of(plan["inputs"]["gpuops_max_unavailable"], plan["nodes"])
        later = plan["inputs"]["gpuops_upgrade_batches"][1]
        size = later if isinstance(later, int) else -(-int(later[:-1]) * plan["nodes"] // 100)
        assert 1 <= size <= budget, plan
    drawn = {fault["kind"] for seed in range(200) for fault in plan_round(seed)["faults"]}
    assert drawn == set(FAULT_KINDS)


def test_the_budget_is_computed_as_the_plan_does():
    assert budget_of("25%", 4) == 1 and budget_of("25%", 8) == 2 and budget_of("50%", 5) == 2
    assert budget_of("25%", 3) == 1 and budget_of(2, 8) == 2


# --------------------------------------------------------------------------- budget

def test_a_cordon_of_ours_while_another_node_is_notready_past_the_budget_is_a_violation():
    history = [change(1, node("a")), change(1, node("b")),
               change(2, node("b", ready=False)),                    # a fault: b NotReady
               change(3, node("a", cordoned=True, ours=True))]       # then we cordon a, budget 1
    found = budget_at_own_cordons(history, 1)
    assert [(item["node"], item["out"]) for item in found] == [("a", ["a", "b"])]
    assert budget_at_own_cordons(history, 2) == []


def test_someone_elses_cordon_and_our_node_going_notready_are_not_a_new_cordon():
    history = [change(1, node("a")), change(1, node("b")),
               change(2, node("a", cordoned=True, ours=True)),
               change(3, node("a", cordoned=True, ours=True, ready=False)),   # our reboot
               change(4, node("b", cordoned=True))]                           # a person's cordon
    assert budget_at_own_cordons(history, 1) == []


# --------------------------------------------------------------------------- reboots

def test_one_boot_per_upgrade_and_one_more_for_a_rollback():
    records = {"a": {"state": "done", "steps": {"draining": 1}},
               "b": {"state": "rolled-back", "rollback_to": OLD}, "c": None,
               # chaos seed 2008: a rollback that failed at its verify rebooted the node a second time
               "d": {"state": "failed", "rollback_to": OLD, "reason": "...; rollback to %s failed: ..." % OLD},
               "e": {"state": "failed", "reason": "no GPUs after boot"}}
    assert reboots_per_upgrade({"a": 1, "b": 2, "d": 2, "e": 1}, records) == []
    found = reboots_per_upgrade({"a": 2, "b": 3, "c": 1, "d": 3, "e": 2}, records)
    assert [item["node"] for item in found] == ["a", "b", "c", "d", "e"]


# --------------------------------------------------------------------------- end state

def test_a_fault_after_the_runs_last_look_at_a_done_node_leaves_its_health_out_of_the_judgement():
    # chaos seed 2013: the device plugin of gpu-node-02 crash-looped from 24 s after the run's last gate on it (the
    # batch's nodes still offer all their GPUs, after the soak); the round's end found it done, GPUs not allocatable
    from chaos_invariants import faults_after_last_look
    audit = [{"event": "gate", "host": "gpu-node-02", "ts": "2026-12-05T08:36:01.313Z"},
             {"event": "task", "host": "gpu-node-02", "ts": "2026-12-05T08:36:30.000Z"},
             {"event": "gate", "host": "gpu-node-03", "ts": "2026-12-05T08:36:40.000Z"}]
    last_look = 1796459761.313
    crash = {"kind": "fault", "node": "gpu-node-02", "fault": "device-plugin-crash", "ts": last_look + 24.4}
    early = dict(crash, ts=last_look - 5)
    assert faults_after_last_look("gpu-node-02", audit, [crash]) == [
        {"fault": "device-plugin-crash", "fired": crash["ts"], "last_look": last_look}]
    assert faults_after_last_look("gpu-node-02", audit, [early]) == []
    assert faults_after_last_look("gpu-node-02", audit, [dict(crash, fault="dkms-fail")]) == []
    assert faults_after_last_look("gpu-node-04", audit, [dict(crash, node="gpu-node-04")]) == []    # never looked at
    crashed = node("a", record={"state": "done", "from": OLD}, gpus="0")
    assert node_end_state("a", crashed, NEW, NEW) != []
    assert node_end_state("a", crashed, NEW, NEW, health_unseen=True) == []
    assert node_end_state("a", node("a", cordoned=True, record={"state": "done", "from": OLD}), NEW, NEW,
                          health_unseen=True) != []


def test_done_rolled_back_and_failed_nodes_in_the_state_the_docs_describe_pass():
    assert node_end_state("a", node("a", record={"state": "done", "from": OLD}), NEW, NEW) == []
    assert node_end_state("b", node("b", label=OLD, record={"state": "rolled-back", "from": OLD}), OLD, NEW) == []
    assert node_end_state("c", node("c", cordoned=True, record={"state": "failed", "reason": "dkms"}), OLD, NEW) == []
    assert node_end_state("d", node("d", label=OLD), OLD, NEW) == []


def test_a_node_left_cordoned_mid_step_or_unhealthy_is_named():
    def whats(name, obj, loaded):
        return [item["what"] for item in node_end_state(name, obj, loaded, NEW)]

    assert whats("a", node("a", cordoned=True, record={"state": "rebooting"}), OLD) == [
        "a was left mid-upgrade (rebooting)"]
    assert whats("b", node("b", cordoned=True), OLD) == ["b is cordoned without a record saying why"]
    assert whats("c", node("c", record={"state": "failed", "reason": "x"}), OLD) == ["c failed but is not cordoned"]
    assert whats("d", node("d", gpus="7", record={"state": "done"}), OLD) == [
        "d is done but GPUs not all allocatable, loads 595.91.07 (expected on 615.71.09)"]


# --------------------------------------------------------------------------- nothing touched after a stop

def test_a_node_of_a_later_batch_drained_after_a_failure_in_the_same_run_is_a_violation():
    audit = [audit_line("run_start", "2026-01-01T00:00:00.000Z"),
             audit_line("batch_start", "2026-01-01T00:00:01.000Z", play="Upgrade the GPU nodes", hosts=["a"]),
             audit_line("batch_start", "2026-01-01T00:00:20.000Z", play="Upgrade the GPU nodes", hosts=["b"]),
             audit_line("run_start", "2026-01-01T00:01:00.000Z")]
    t0 = audit_line("x", "2026-01-01T00:00:00.000Z")
    from chaos_invariants import audit_ts
    base = audit_ts(t0["ts"])
    history = [change(base + 2, node("a", record={"state": "draining"})),
               change(base + 10, node("a", record={"state": "failed"})),
               change(base + 21, node("b", record={"state": "draining"}))]
    found = untouched_after_a_stop(history, audit)
    assert [(item["node"], item["invariant"]) for item in found] == [("b", "after-stop")]
    # the same drain in the next run (a resume) is allowed
    later = history[:2] + [change(base + 61, node("b", record={"state": "draining"}))]
    assert untouched_after_a_stop(later, audit) == []


def test_a_drain_after_a_failed_batch_gate_is_a_violation():
    from chaos_invariants import audit_ts
    audit = [audit_line("run_start", "2026-01-01T00:00:00.000Z"),
             audit_line("gate", "2026-01-01T00:00:05.000Z", gate="batch", passed=False)]
    base = audit_ts("2026-01-01T00:00:00.000Z")
    assert untouched_after_a_stop([change(base + 4, node("a", record={"state": "draining"}))], audit) == []
    found = untouched_after_a_stop([change(base + 6, node("a", record={"state": "draining"}))], audit)
    assert [item["what"] for item in found] == ["a drained after a failed batch gate"]


# --------------------------------------------------------------------------- lock, silences

def test_the_lock_is_free_or_held_by_a_live_run():
    assert lock_at_end(None) == [] and lock_at_end("me/run-1", ["me/run-1"]) == []
    assert [item["invariant"] for item in lock_at_end("me/run-1")] == ["lock"]


def test_an_active_silence_is_allowed_only_for_a_node_still_mid_upgrade():
    def silence(node_name, state="active"):
        return {"id": node_name, "comment": "driver 615 [gpuops.nvidia node=%s run=r1]" % node_name,
                "status": {"state": state}}
    records = {"a": {"state": "done"}, "b": {"state": "rebooting"}, "c": None}
    found = silences_left([silence("a"), silence("b"), silence("c", "expired"), {"comment": "someone's"}], records)
    assert [item["node"] for item in found] == ["a"]


# --------------------------------------------------------------------------- the run's word

SUMMARY = """        "Driver roll-out r1 on gpulab: stopped after batch 1",
        "NODE                     FROM -> TO             RESULT        DURATION REASON",
        "gpu-node-01              595.91.07 -> 615.71.09 failed            28 s Reboot the node",
        "gpu-node-02              595.91.07 -> 615.71.09 not started        - ",
"""


def test_the_summary_table_is_read_back_per_node():
    assert summary_results(SUMMARY) == {"gpu-node-01": "failed", "gpu-node-02": "not started"}


def test_exit_code_run_record_and_summary_must_agree_with_the_nodes():
    run_record = {"outcome": "stopped after batch 1",
                  "nodes": {"gpu-node-01": {"action": "upgrade", "record": {"state": "failed"}},
                            "gpu-node-02": {"action": "upgrade", "record": None}}}
    finals = {"gpu-node-01": {"state": "failed"}, "gpu-node-02": None}
    assert run_agrees(2, SUMMARY, run_record, finals) == []
    assert [item["invariant"] for item in run_agrees(0, SUMMARY, run_record, finals)] == ["run-record"]
    moved = dict(finals, **{"gpu-node-02": {"state": "draining"}})
    assert sorted(item["invariant"] for item in run_agrees(2, SUMMARY, run_record, moved)) == ["run-record",
                                                                                           "summary"]
    assert run_agrees(2, "", None, finals) == []
    assert [item["invariant"] for item in run_agrees(0, "", None, finals)] == ["run-record"]


# --------------------------------------------------------------------------- the audit trail

def test_every_action_the_twin_saw_is_named_by_an_audit_line_of_its_node():
    from chaos_invariants import audit_ts
    base = audit_ts("2026-01-01T00:00:00.000Z")
    history = [change(base, node("a")), change(base + 10, node("a", cordoned=True, ours=True,
                                                                record={"state": "draining"}))]
    events = [{"kind": "power-request", "node": "a", "ts": base + 30}]
    actions = twin_actions(history, events)
    assert [action for _ts, _node, action in actions] == ["cordon", "record", "reboot"]
    audit = [{"event": "task", "host": "a", "started": "2026-01-01T00:00:09.500Z", "duration_s": 1.0},
             {"event": "task", "host": "a", "started": "2026-01-01T00:00:25.000Z", "duration_s": 10.0}]
    assert audit_names_actions(actions, audit) == []
    found = audit_names_actions(actions, audit[:1])
    assert [item["what"].split(" at ")[0] for item in found] == ["reboot of a"]
    # killed before the reboot task's result was written: excused
    assert audit_names_actions(actions, audit[:1], [(base + 12, base + 40)]) == []
