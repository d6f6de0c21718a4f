"""`gpuops plan --out` / `gpuops apply PLAN` (plans.py): the plan file from the planner's own result, the policy
from the inventory, the applier's proven identity, and the refusals that need no cluster (real ssh-keygen, real
ansible-inventory, the real audit trail). The approved apply and the re-plan against a cluster are
lab/tests/test_runner_two_person.py's part."""
from __future__ import annotations

import datetime
import json
import os
import sys

import pytest

from gpuops_runner import approval, exitcodes, plans
from gpuops_runner.cli import main

NOW = datetime.datetime(2026, 12, 4, 12, 0, tzinfo=datetime.timezone.utc)
OLD, NEW = "595.91.07", "615.71.09"


@pytest.fixture(scope="module")
def planner(chain):  # the chain fixture puts this checkout's collection on sys.path
    import importlib
    return importlib.import_module("ansible_collections.gpuops.nvidia.plugins.module_utils.rollout.plan")


def gpu_node(name, driver=OLD):
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true",
                                                  "nvidia.com/cuda.driver-version.full": driver}},
            "spec": {}, "status": {"capacity": {"nvidia.com/gpu": "8"},
                                   "conditions": [{"type": "Ready", "status": "True"}]}}


def module_result(planner, nodes):
    """What gpuops.nvidia.driver_upgrade_plan returns (its `plan`), from the planner it calls."""
    names = [node["metadata"]["name"] for node in nodes]
    return {"changed": False, "plan": dict(planner.build_plan(names, nodes, NEW, [1, 1]),
                                           install={"requested": "auto", "method": "runfile"})}


def test_the_plan_file_holds_the_batches_and_each_node_s_driver_and_a_changed_node_means_replan(planner):
    batches, state = plans.driver_upgrade_plan(module_result(planner, [gpu_node("n1"), gpu_node("n2")]))
    assert batches == [{"index": 1, "kind": "canary", "nodes": ["n1"]}, {"index": 2, "kind": "batch", "nodes": ["n2"]}]
    assert state == {"target_version": NEW, "install_method": "runfile",
                     "nodes": {"n1": {"current_version": OLD, "action": "start"},
                               "n2": {"current_version": OLD, "action": "start"}}}
    plan = approval.make_plan("driver_upgrade", {"extra_vars": {}}, batches, "lab", "1.0.0", "alice@ops", NOW,
                              state=state)
    # n2 was upgraded by someone else after the plan: it leaves the batches, and its driver differs
    batches2, state2 = plans.driver_upgrade_plan(module_result(planner, [gpu_node("n1"), gpu_node("n2", NEW)]))
    fresh = approval.make_plan("driver_upgrade", {"extra_vars": {}}, batches2, "lab", "1.0.0", "alice@ops", NOW,
                               state=state2)
    assert plans.differences(plan, approval.cluster_view(fresh)) == ["batches", "state"]
    # planned again later, by someone else: the same plan as far as the apply check goes
    later = approval.make_plan("driver_upgrade", {"extra_vars": {}}, batches, "lab", "1.0.0", "bob@ops",
                               NOW + datetime.timedelta(hours=1), state=state)
    assert plans.differences(plan, approval.cluster_view(later)) == []
    assert plans.driver_upgrade_plan({"failed": True, "msg": "no API"}) is None


def listing(*policies):
    return {"_meta": {"hostvars": {"n%d" % index: {"gpuops_cluster_name": "lab", plans.POLICY_VAR: policy}
                                   for index, policy in enumerate(policies)}},
            "gpu_nodes": {"hosts": ["n%d" % index for index in range(len(policies))]}}


def test_the_policy_comes_from_the_inventory_over_the_risk_table():
    assert plans.policy_of("driver_upgrade", listing(None, None))["require_approval"] is False
    strict = {"driver_upgrade": {"require_approval": True, "allowed_signers": "/etc/gpuops/signers", "ttl_hours": 8}}
    assert plans.policy_of("driver_upgrade", listing(strict, strict)) == {
        "require_approval": True, "allowed_signers": "/etc/gpuops/signers", "ttl_hours": 8}
    assert plans.policy_of("node_labels", listing(strict))["require_approval"] is True
    for bad in (listing(strict, None), listing(["driver_upgrade"]), listing({"driver_upgrade": {"ttl_hours": "x"}})):
        with pytest.raises(approval.ApprovalRefused) as info:
            plans.policy_of("driver_upgrade", bad)
        assert info.value.exit_code == exitcodes.REFUSED and info.value.message.startswith("gpuops: refused: ")


def test_the_applier_proves_the_identity_it_claims(people):
    plan = approval.make_plan("driver_upgrade", {}, [], "lab", "1.0.0", "alice@ops", NOW)
    plans.prove_applier(plan, "alice@ops", people["alice"], people["signers"])
    with pytest.raises(approval.ApprovalRefused) as info:   # alice names bob as the applier: her key says no
        plans.prove_applier(plan, "bob@ops", people["alice"], people["signers"])
    assert info.value.exit_code == approval.EXIT_BAD_SIGNATURE and "--as bob@ops" in info.value.message
    with pytest.raises(approval.ApprovalRefused) as info:
        plans.prove_applier(plan, None, None, people["signers"])
    assert info.value.exit_code == exitcodes.REFUSED and "--as ID --key KEY" in info.value.message


@pytest.fixture
def planned(tmp_path, people, collections_path, monkeypatch):
    """A plan file of driver_upgrade over an inventory whose policy asks for approval (no cluster needed: the
    refusals come before the re-plan)."""
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all:\n  vars:\n    gpuops_cluster_name: lab\n    gpuops_approval_policy:\n"
                         "      driver_upgrade:\n        require_approval: true\n        allowed_signers: %s\n"
                         "  children:\n    gpu_nodes:\n      hosts:\n        n1:\n" % people["signers"])
    plan = approval.make_plan("driver_upgrade", {"inventory": str(inventory), "extra_vars": {
        "gpuops_driver_version": NEW}, "limit": None}, [{"index": 1, "kind": "canary", "nodes": ["n1"]}], "lab",
        "1.0.0", "alice@ops", datetime.datetime.now(datetime.timezone.utc))
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return {"plan": plan, "file": str(path), "data": str(tmp_path / "data"), "collections": collections_path}


def apply(planned, people, who, *more):
    lines, errors = [], []
    code = main(["apply", planned["file"], "--ticket", "CHG-24", "--as", who, "--key", people[who.split("@")[0]],
                 "--confirm", "lab", "--data-dir", planned["data"], "--collections-path", planned["collections"]]
                + list(more), out=lines.append, err=errors.append)
    return code, errors


def trail(planned):
    with open(planned["data"] + "/audit.jsonl") as stream:
        return [json.loads(line) for line in stream]


def test_apply_refuses_without_approval_with_the_applier_s_own_approval_and_an_edited_plan(planned, people):
    code, errors = apply(planned, people, "alice@ops")
    assert code == approval.EXIT_NO_APPROVAL and len(errors) == 1 and "second operator" in errors[0]
    main(["approve", planned["file"], "--key", people["alice"], "--as", "alice@ops"], out=lambda _: None,
         err=lambda _: None)
    code, errors = apply(planned, people, "alice@ops")
    assert code == approval.EXIT_SELF_APPROVED and len(errors) == 1 and "by the applier" in errors[0]
    with open(planned["file"], "w") as stream:
        json.dump(dict(planned["plan"], batches=[]), stream)
    code, errors = apply(planned, people, "alice@ops")
    assert code == approval.EXIT_REPLAN and len(errors) == 1 and "re-plan" in errors[0]
    refused = [record for record in trail(planned) if record["event"] == "apply_refused"]
    assert [record["exit_code"] for record in refused] == [3, 10, 11]
    assert all(record["applier"] == "alice@ops" and record["ticket"] == "CHG-24" for record in refused)
    assert not [record for record in trail(planned) if record["event"] == "runner_start"]   # nothing ran


def test_a_direct_apply_is_refused_where_the_policy_asks_for_approval(planned):
    """`gpuops upgrade --apply` would skip the rule: where the inventory's policy asks for approval it refuses."""
    errors = []
    code = main(["upgrade", "-i", planned["plan"]["inputs"]["inventory"], "-e", "gpuops_driver_version=" + NEW,
                 "--apply", "--ticket", "CHG-24", "--confirm", "lab", "--data-dir", planned["data"],
                 "--collections-path", planned["collections"]], out=lambda _: None, err=errors.append)
    assert code == exitcodes.REFUSED and len(errors) == 1 and "gpuops apply PLAN" in errors[0]
    assert [record["event"] for record in trail(planned)] == ["refused"]
