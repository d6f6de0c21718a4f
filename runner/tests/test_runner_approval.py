"""The two-person rule's core: plan hash, SSH-signed approvals (real ssh-keygen), the apply check."""
from __future__ import annotations

import datetime

import pytest

from gpuops_runner import approval

NOW = datetime.datetime(2026, 12, 4, 12, 0, tzinfo=datetime.timezone.utc)
BATCHES = [["gpu-node-1"], ["gpu-node-2"]]


def a_plan(kind="node_labels"):
    return approval.make_plan(kind, {"labels": {"a": "b"}}, BATCHES, "lab", "1.0.0", "alice@ops", NOW)


def policy(people, **rule):
    return approval.policy_for("node_labels", {"node_labels": dict(allowed_signers=people["signers"], **rule)})


def approve(plan, who, key, hours=24, at=NOW):
    return approval.sign(approval.approval_statement(plan, who, "ok", at, hours), key)


def refused(plan, approvals, applier, pol, now=NOW, view=None):
    with pytest.raises(approval.ApprovalRefused) as info:
        approval.check_apply(plan, approvals, applier, pol, now, view)
    assert info.value.message.startswith("gpuops: ") and "\n" not in info.value.message
    return info.value


def test_risk_table_defaults_and_inventory_override():
    assert approval.policy_for("driver_upgrade")["require_approval"] is False
    assert approval.policy_for("node_labels")["require_approval"] is True
    assert approval.policy_for("gpu_operator_uninstall")["require_approval"] is True
    assert approval.policy_for("something_new")["require_approval"] is True
    assert approval.policy_for("driver_upgrade", {"driver_upgrade": {"require_approval": True}})["require_approval"]


def test_plan_hash_covers_every_field():
    plan = a_plan()
    assert plan["sha256"] == approval.plan_hash(plan)
    for field, value in (("batches", [["gpu-node-1", "gpu-node-2"]]), ("cluster", "other"), ("inputs", {})):
        assert approval.plan_hash(dict(plan, **{field: value})) != plan["sha256"]


def test_driver_upgrade_needs_no_approval_by_default():
    plan = a_plan("driver_upgrade")
    assert approval.check_apply(plan, [], "alice@ops", approval.policy_for("driver_upgrade"), NOW) is None


def test_no_approval_refused(people):
    assert refused(a_plan(), [], "alice@ops", policy(people)).exit_code == approval.EXIT_NO_APPROVAL


def test_approval_by_the_applier_refused(people):
    plan = a_plan()
    refusal = refused(plan, [approve(plan, "alice@ops", people["alice"])], "alice@ops", policy(people))
    assert refusal.exit_code == approval.EXIT_SELF_APPROVED


def test_second_person_approval_accepted(people):
    plan = a_plan()
    good = approve(plan, "bob@ops", people["bob"])
    assert approval.check_apply(plan, [good], "alice@ops", policy(people), NOW) is good


def test_applier_cannot_forge_the_second_person(people):
    plan = a_plan()
    forged = approve(plan, "bob@ops", people["alice"])  # alice signs, claims to be bob
    assert refused(plan, [forged], "alice@ops", policy(people)).exit_code == approval.EXIT_BAD_SIGNATURE
    edited = approve(plan, "bob@ops", people["bob"])
    edited["statement"]["expires_at"] = "2099-01-01T00:00:00Z"
    assert refused(plan, [edited], "alice@ops", policy(people)).exit_code == approval.EXIT_BAD_SIGNATURE


def test_expired_refused(people):
    plan = a_plan()
    old = approve(plan, "bob@ops", people["bob"], hours=1)
    later = NOW + datetime.timedelta(hours=2)
    assert refused(plan, [old], "alice@ops", policy(people), now=later).exit_code == approval.EXIT_EXPIRED


def test_changed_cluster_or_plan_says_replan(people):
    plan = a_plan()
    good = approve(plan, "bob@ops", people["bob"])
    now_view = dict(approval.cluster_view(plan), batches=[["gpu-node-1"], ["gpu-node-2"], ["gpu-node-3"]])
    refusal = refused(plan, [good], "alice@ops", policy(people), view=now_view)
    assert refusal.exit_code == approval.EXIT_REPLAN and "re-plan" in refusal.message
    edited = dict(plan, inputs={"labels": {"a": "c"}})
    refusal = refused(edited, [good], "alice@ops", policy(people))
    assert refusal.exit_code == approval.EXIT_REPLAN and "re-plan" in refusal.message
    replanned = approval.make_plan("node_labels", {"labels": {"a": "c"}}, BATCHES, "lab", "1.0.0", "alice@ops", NOW)
    refusal = refused(replanned, [good], "alice@ops", policy(people))
    assert refusal.exit_code == approval.EXIT_REPLAN


def test_gpuops_approve_writes_a_verifiable_approval(people, tmp_path):
    from gpuops_runner.cli import main
    plan = a_plan()
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(__import__("json").dumps(plan))
    lines, errors = [], []
    code = main(["approve", str(plan_file), "--key", people["bob"], "--as", "bob@ops", "--comment", "looks fine"],
                out=lines.append, err=errors.append)
    assert code == 0 and not errors and "approved by bob@ops" in lines[0]
    signed = __import__("json").loads((tmp_path / "plan.json.approval.json").read_text())
    now = datetime.datetime.now(datetime.timezone.utc)
    assert approval.check_apply(plan, [signed], "alice@ops", policy(people), now)["statement"]["comment"] == "looks fine"
    plan_file.write_text(__import__("json").dumps(dict(plan, cluster="other")))
    errors.clear()
    code = main(["approve", str(plan_file), "--key", people["bob"], "--as", "bob@ops"], out=lines.append,
                err=errors.append)
    assert code == approval.EXIT_REPLAN and len(errors) == 1 and "re-plan" in errors[0]
