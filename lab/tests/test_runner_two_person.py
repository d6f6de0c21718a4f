"""The two-person rule on the fleet twin (issue 24): `gpuops plan --out`, `gpuops approve`, `gpuops apply PLAN` on
two node twins and the Kubernetes API twin, with an inventory whose gpuops_approval_policy makes the driver upgrade
need a second operator (real ssh-keygen signatures, the real audit trail).

- an apply without approval is refused, and so is one approved by the applier or a direct `gpuops upgrade --apply`:
  nothing runs;
- a plan whose cluster changed after the approval (a node joined the inventory) is refused with "re-plan";
- an approved plan is applied: both nodes end on the target, and the trail names the planner, approver and applier.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import yaml

from conftest import start_lab, stop_lab
from gpuops_cli import gpuops, records
from test_runner_upgrade_bastion import NEW, OLD, upgrade_vars

pytest.importorskip("ansible_runner")

TICKET = "CHG-2424"
NAMESPACE = "gpuops-approval"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    work = tmp_path_factory.mktemp("two-person")
    lab = start_lab(str(work / "state"), "--nodes", "2", "--driver", OLD, "--runfile", OLD, "--boot-delay", "0.5")
    try:
        people = {}
        for who in ("alice", "bob"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", who, "-f", str(work / who)],
                           check=True, timeout=30)
            people[who] = str(work / who)
        with open(work / "allowed_signers", "w") as stream:
            for who in ("alice", "bob"):
                kind, key = open(people[who] + ".pub").read().split()[:2]
                stream.write('%s@ops namespaces="%s" %s %s\n' % (who, NAMESPACE, kind, key))
        yield {"lab": lab, "work": work, "people": people, "data": str(work / "data"),
               "signers": str(work / "allowed_signers")}
    finally:
        stop_lab(lab)
        shutil.rmtree(str(work), ignore_errors=True)


def write_inventory(fleet, path, nodes) -> str:
    """The twin's inventory with `nodes` in gpu_nodes and a policy that makes the driver upgrade need approval."""
    with open(os.path.join(fleet["lab"].state_dir, "inventory.yml")) as stream:
        inventory = yaml.safe_load(stream)
    inventory["all"]["vars"]["gpuops_approval_policy"] = {
        "driver_upgrade": {"require_approval": True, "allowed_signers": fleet["signers"], "ttl_hours": 2}}
    hosts = inventory["all"]["children"]["gpu_nodes"]["hosts"]
    inventory["all"]["children"]["gpu_nodes"]["hosts"] = {name: hosts[name] for name in nodes}
    with open(path, "w") as stream:
        yaml.safe_dump(inventory, stream)
    return str(path)


def plan(fleet, inventory, out):
    done = gpuops("plan", "driver_upgrade", "-i", inventory, "-e", "gpuops_driver_version=" + NEW,
                  "-e", json.dumps(upgrade_vars(fleet["lab"], fleet["data"] + "/records")), "--out", str(out),
                  "--data-dir", fleet["data"], timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with open(out) as stream:
        return json.load(stream)


def approve(fleet, plan_file, who):
    done = gpuops("approve", str(plan_file), "--key", fleet["people"][who], "--as", who + "@ops", "--comment",
                  "reviewed in " + TICKET)
    assert done.returncode == 0, done.stderr


def apply(fleet, plan_file, who):
    return gpuops("apply", str(plan_file), "--ticket", TICKET, "--as", who + "@ops", "--key", fleet["people"][who],
                  "--confirm", "gpulab", "--data-dir", fleet["data"], timeout=1800)


def cordoned(fleet) -> list:
    done = subprocess.run(["kubectl", "--kubeconfig", os.path.join(fleet["lab"].state_dir, "kubeconfig"), "get",
                           "nodes", "-o", "json"], capture_output=True, text=True, check=True, timeout=60)
    return [node["metadata"]["name"] for node in json.loads(done.stdout)["items"] if node["spec"].get("unschedulable")]


def refused_cleanly(done, code, words):
    assert done.returncode == code, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuops: ") and words in lines[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def full_plan(fleet):
    inventory = write_inventory(fleet, fleet["work"] / "inventory.yml", fleet["lab"].node_names)
    return {"file": fleet["work"] / "plan.json", "plan": plan(fleet, inventory, fleet["work"] / "plan.json")}


def test_the_plan_file_names_the_batches_each_node_s_driver_the_cluster_and_its_hash(fleet, full_plan):
    body = full_plan["plan"]
    assert body["change_kind"] == "driver_upgrade" and body["cluster"] == "gpulab"
    assert [batch["nodes"] for batch in body["batches"]] == [[name] for name in fleet["lab"].node_names]
    assert {name: node["current_version"] for name, node in body["state"]["nodes"].items()} == {
        name: OLD for name in fleet["lab"].node_names}
    assert body["inputs"]["extra_vars"]["gpuops_driver_version"] == NEW and body["collection_version"]
    written = [record for record in records(fleet["data"] + "/audit.jsonl") if record["event"] == "plan"]
    assert written[-1]["plan_sha256"] == body["sha256"] and written[-1]["created_by"] == body["created_by"]


def test_an_apply_without_approval_and_one_approved_by_the_applier_are_refused_and_run_nothing(fleet, full_plan):
    before = len(records(fleet["data"] + "/audit.jsonl"))
    refused_cleanly(apply(fleet, full_plan["file"], "alice"), 3, "needs the approval of a second operator")
    approve(fleet, full_plan["file"], "alice")
    refused_cleanly(apply(fleet, full_plan["file"], "alice"), 10, "a second operator must approve")
    os.unlink(str(full_plan["file"]) + ".approval.json")
    # the runbook run directly would skip the rule: refused where the policy asks for approval
    direct = gpuops("upgrade", "-i", full_plan["plan"]["inputs"]["inventory"], "-e", "gpuops_driver_version=" + NEW,
                    "--apply", "--ticket", TICKET, "--confirm", "gpulab", "--data-dir", fleet["data"])
    assert direct.returncode == 3 and "gpuops apply PLAN" in direct.stderr, direct.stderr
    trail = records(fleet["data"] + "/audit.jsonl")[before:]
    assert [(record["event"], record["exit_code"]) for record in trail] == [
        ("apply_refused", 3), ("apply_refused", 10), ("refused", 3)]
    assert [record["applier"] for record in trail[:2]] == ["alice@ops", "alice@ops"]
    assert cordoned(fleet) == []


def test_a_plan_whose_cluster_changed_after_the_approval_is_refused_with_replan(fleet):
    first, second = fleet["lab"].node_names
    inventory = write_inventory(fleet, fleet["work"] / "one-node.yml", [first])
    plan_file = fleet["work"] / "one-node-plan.json"
    plan(fleet, inventory, plan_file)
    approve(fleet, plan_file, "bob")
    write_inventory(fleet, fleet["work"] / "one-node.yml", [first, second])   # a node joined since
    done = apply(fleet, plan_file, "alice")
    assert done.returncode == 11, done.stdout[-3000:] + done.stderr[-3000:]
    assert "gpuops: the cluster or the inputs differ from the plan (batches, state): re-plan" in done.stderr
    last = records(fleet["data"] + "/audit.jsonl")[-1]
    assert last["event"] == "apply_refused" and last["approver"] == "bob@ops" and last["changed"] == [
        "batches", "state"]
    assert cordoned(fleet) == []


def test_an_approved_plan_is_applied_and_the_trail_names_both_operators(fleet, full_plan):
    approve(fleet, full_plan["file"], "bob")
    done = apply(fleet, full_plan["file"], "alice")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    for name in fleet["lab"].node_names:
        smi = fleet["lab"].ssh(name, "nvidia-smi --query-gpu=driver_version --format=csv,noheader | sort -u")
        assert smi.stdout.split() == [NEW]
    trail = records(fleet["data"] + "/audit.jsonl")
    sha = full_plan["plan"]["sha256"]
    approved = [record for record in trail if record["event"] == "approval" and record["plan_sha256"] == sha]
    applied = [record for record in trail if record["event"] == "apply" and record["plan_sha256"] == sha]
    assert approved[-1]["approver"] == "bob@ops" and approved[-1]["applier"] == "alice@ops"
    assert approved[-1]["comment"] == "reviewed in " + TICKET
    assert applied[-1]["approver"] == "bob@ops" and applied[-1]["planned_by"] == full_plan["plan"]["created_by"]
    run = [record for record in trail if record["run_id"] == applied[-1]["run_id"]]
    start = next(record for record in run if record["event"] == "runner_start")
    assert (start["mode"], start["ticket"], start["applier"], start["approver"], start["plan_sha256"]) == (
        "apply", TICKET, "alice@ops", "bob@ops", sha)
    assert run[-1]["event"] == "runner_end" and run[-1]["exit_code"] == 0
    assert gpuops("audit", "verify", fleet["data"] + "/audit.jsonl").returncode == 0
