"""gpuops over the change engine (docs/change_engine.md): every kind of the collection's kinds table is planned
(`gpuops plan KIND`), run (`gpuops change KIND`) and applied under the two-person rule (`gpuops apply PLAN`) like the
driver upgrade; the kind's default policy comes from the table. The refusals here need no cluster (real
ansible-inventory, real ssh-keygen, the real trail); the approved apply and the re-plan on a cluster are
lab/tests/test_runner_change_two_person.py's part."""
from __future__ import annotations

import datetime
import json
import os
import sys

import pytest

from gpuops_runner import approval, collection, exitcodes, plans
from gpuops_runner.cli import build_parser, main
from gpuops_runner.runbook import RUNBOOKS, runbook_for

LABELS = {"gpuops_change_inputs": {"labels": {"gpu.example.com/tier": "batch"}}}


@pytest.fixture(scope="module")
def engine(chain):  # the chain fixture puts this checkout's collection on sys.path
    import importlib
    return importlib.import_module("ansible_collections.gpuops.nvidia.plugins.module_utils.rollout.change")


def gpu_node(name, **labels):
    return {"metadata": {"name": name, "labels": dict({"nvidia.com/gpu.present": "true"}, **labels)},
            "spec": {}, "status": {"capacity": {"nvidia.com/gpu": "8"},
                                   "conditions": [{"type": "Ready", "status": "True"}]}}


def change_plan_result(engine, nodes):
    """What gpuops.nvidia.change_plan returns (its `plan`) for node_labels, from the planner it calls."""
    names = [node["metadata"]["name"] for node in nodes]
    return {"changed": False, "plan": dict(engine.build_change_plan(
        "node_labels", LABELS["gpuops_change_inputs"], names, nodes, batches=[1, 1]), window_open=True)}


def test_the_plan_file_holds_the_change_id_and_each_node_s_action_and_a_node_labelled_by_hand_means_replan(engine):
    batches, state = plans.change_plan(change_plan_result(engine, [gpu_node("n1"), gpu_node("n2")]))
    assert batches == [{"index": 1, "kind": "canary", "nodes": ["n1"]}, {"index": 2, "kind": "batch", "nodes": ["n2"]}]
    assert state == {"change_id": engine.change_id("node_labels", LABELS["gpuops_change_inputs"]),
                     "kind": "node_labels", "max_unavailable": 2, "blockers": [],
                     "nodes": {"n1": {"action": "start"}, "n2": {"action": "start"}}}
    plan = approval.make_plan("node_labels", {"extra_vars": LABELS}, batches, "lab", "1.0.0", "alice@ops",
                              datetime.datetime(2026, 12, 5, tzinfo=datetime.timezone.utc), state=state)
    # someone labelled n2 by hand after the plan: it has the change already, and leaves the batches
    batches2, state2 = plans.change_plan(change_plan_result(engine, [gpu_node("n1"), gpu_node(
        "n2", **LABELS["gpuops_change_inputs"]["labels"])]))
    assert state2["nodes"]["n2"] == {"action": "skip"} and batches2 == [batches[0]]
    fresh = approval.make_plan("node_labels", {"extra_vars": LABELS}, batches2, "lab", "1.0.0", "bob@ops",
                               datetime.datetime(2026, 12, 5, 1, tzinfo=datetime.timezone.utc), state=state2)
    assert plans.differences(plan, approval.cluster_view(fresh)) == ["batches", "state"]
    assert plans.change_plan({"failed": True, "msg": "no API"}) is None
    assert plans.blocked(plan) is None


def test_no_plan_file_for_a_change_the_runbook_would_refuse(engine):
    failed = gpu_node("n2")
    failed["metadata"]["annotations"] = {engine.record_annotation("node_labels"): json.dumps({
        "kind": "node_labels", "change": engine.change_id("node_labels", LABELS["gpuops_change_inputs"]),
        "state": "failed", "reason": "verify: label not set"})}
    batches, state = plans.change_plan(change_plan_result(engine, [gpu_node("n1"), failed]))
    assert state["nodes"]["n2"] == {"action": "failed"}
    plan = approval.make_plan("node_labels", {}, batches, "lab", "1.0.0", "alice@ops",
                              datetime.datetime(2026, 12, 5, tzinfo=datetime.timezone.utc), state=state)
    assert plans.blocked(plan) == ("the plan is blocked (n2: a previous run of this change failed the node: "
                                   "verify: label not set)")


def test_each_command_names_its_runbook_and_its_change_kind():
    parse = build_parser().parse_args
    assert runbook_for(parse(["plan", "-i", "x"])) == (RUNBOOKS["plan"], "driver_upgrade")
    assert runbook_for(parse(["plan", "driver_upgrade", "-i", "x"])) == (RUNBOOKS["plan"], "driver_upgrade")
    engine, kind = runbook_for(parse(["plan", "node_labels", "-i", "x"]))
    assert (engine.playbook, engine.apply_allowed, engine.fixed_vars, kind) == (
        "change", False, (("gpuops_change_kind", "node_labels"),), "node_labels")
    engine, kind = runbook_for(parse(["change", "mig_layout", "-i", "x", "--apply"]))
    assert (engine.playbook, engine.apply_allowed, engine.fixed_vars, kind) == (
        "change", True, (("gpuops_change_kind", "mig_layout"),), "mig_layout")
    assert runbook_for(parse(["upgrade", "-i", "x"])) == (RUNBOOKS["upgrade"], "driver_upgrade")
    for name in ("diagnose", "bootstrap", "repair"):
        assert runbook_for(parse([name, "-i", "x"])) == (RUNBOOKS[name], None)


@pytest.mark.parametrize("argv", [["change", "-i", "x"], ["change", "Node-Labels", "-i", "x"],
                                  ["plan", "node labels", "-i", "x"]])
def test_a_change_kind_is_a_name_and_gpuops_change_needs_one(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == exitcodes.USAGE and "CHANGE_KIND" in capsys.readouterr().err


def test_the_collection_s_kinds_table_gives_each_kind_its_default_policy(collections_path):
    kinds = collection.change_kinds(collections_path)
    assert {"node_labels", "device_plugin_config", "containerd_config", "kubelet_config", "mig_layout",
            "gpu_operator_uninstall"} <= set(kinds)
    assert kinds["node_labels"] is True and kinds["gpu_operator_uninstall"] is True
    listing = {"_meta": {"hostvars": {"n1": {"gpuops_cluster_name": "lab"}}}, "gpu_nodes": {"hosts": ["n1"]}}
    for kind, two_people in kinds.items():
        assert plans.policy_of(kind, listing, kinds)["require_approval"] is two_people
    relaxed = {"node_labels": {"require_approval": False}}
    listing["_meta"]["hostvars"]["n1"][plans.POLICY_VAR] = relaxed
    assert plans.policy_of("node_labels", listing, kinds)["require_approval"] is False
    assert approval.policy_for("not_in_the_table", None, kinds)["require_approval"] is True


@pytest.fixture
def place(tmp_path, collections_path, monkeypatch, people):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all:\n  vars:\n    gpuops_cluster_name: lab\n    gpuops_approval_policy:\n"
                         "      node_labels:\n        allowed_signers: %s\n"
                         "  children:\n    gpu_nodes:\n      hosts:\n        n1:\n" % people["signers"])
    return {"inventory": str(inventory), "data": str(tmp_path / "data"), "collections": collections_path,
            "dir": tmp_path}


def run(place, *argv):
    lines, errors = [], []
    code = main(list(argv) + ["--data-dir", place["data"], "--collections-path", place["collections"]],
                out=lines.append, err=errors.append)
    return code, errors


def trail(place):
    with open(place["data"] + "/audit.jsonl") as stream:
        return [json.loads(line) for line in stream]


def test_a_kind_the_collection_does_not_know_is_a_usage_error_that_names_the_known_ones(place):
    for argv in (["plan", "no_such_kind"], ["change", "no_such_kind"]):
        code, errors = run(place, *argv, "-i", place["inventory"])
        assert code == exitcodes.USAGE and len(errors) == 1, errors
        assert errors[0].startswith("gpuops: CHANGE_KIND: 'no_such_kind' is not a change kind") \
            and "node_labels" in errors[0] and "driver_upgrade" in errors[0]
    assert not os.path.exists(place["data"])   # nothing written


def test_gpuops_change_apply_is_refused_where_the_kind_needs_two_people_and_gpuops_sets_the_kind(place):
    code, errors = run(place, "change", "node_labels", "-i", place["inventory"], "-e", json.dumps(LABELS),
                       "--apply", "--ticket", "CHG-24", "--confirm", "lab")
    assert code == exitcodes.REFUSED and len(errors) == 1, errors
    assert "node_labels needs the approval of a second operator: gpuops plan node_labels --out PLAN" in errors[0]
    code, errors = run(place, "change", "node_labels", "-i", place["inventory"], "-e", "gpuops_change_kind=mig_layout")
    assert code == exitcodes.REFUSED and errors == ["gpuops: refused: -e gpuops_change_kind is set by gpuops change"]
    code, errors = run(place, "change", "node_labels", "-i", place["inventory"], "-e", "gpuops_approved_plan=0123")
    assert code == exitcodes.REFUSED and len(errors) == 1 and "-e gpuops_approved_plan is reserved" in errors[0]
    assert [(record["event"], record["playbook"]) for record in trail(place)] == [
        ("refused", "gpuops.nvidia.change")] * 3


def a_plan_file(place, kind="node_labels"):
    body = approval.make_plan(kind, {"inventory": place["inventory"], "extra_vars": LABELS, "limit": None},
                              [{"index": 1, "kind": "canary", "nodes": ["n1"]}], "lab", "1.0.0", "alice@ops",
                              datetime.datetime.now(datetime.timezone.utc),
                              state={"change_id": "node_labels-0123abcd", "nodes": {"n1": {"action": "start"}}})
    path = place["dir"] / ("%s.plan.json" % kind)
    path.write_text(json.dumps(body))
    return str(path)


def test_the_apply_of_a_change_kind_s_plan_checks_the_rule_before_anything_runs(place, people):
    plan_file = a_plan_file(place)
    apply = ("apply", plan_file, "--ticket", "CHG-24", "--as", "alice@ops", "--key", people["alice"],
             "--confirm", "lab")
    code, errors = run(place, *apply)
    assert code == approval.EXIT_NO_APPROVAL and "node_labels needs the approval of a second operator" in errors[0]
    assert main(["approve", plan_file, "--key", people["alice"], "--as", "alice@ops"], out=lambda _: None,
                err=lambda _: None) == exitcodes.DONE
    code, errors = run(place, *apply)
    assert code == approval.EXIT_SELF_APPROVED and len(errors) == 1 and "by the applier" in errors[0]
    refused = [record for record in trail(place) if record["event"] == "apply_refused"]
    assert [(record["exit_code"], record["change_kind"], record["playbook"]) for record in refused] == [
        (3, "node_labels", "gpuops.nvidia.change"), (10, "node_labels", "gpuops.nvidia.change")]
    assert not [record for record in trail(place) if record["event"] == "runner_start"]   # nothing ran
    code, errors = run(place, "apply", a_plan_file(place, "no_such_kind"), "--ticket", "CHG-24")
    assert code == exitcodes.USAGE and "'no_such_kind' is not a change kind" in errors[0]
