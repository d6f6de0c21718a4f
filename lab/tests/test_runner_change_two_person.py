"""The two-person rule over the change engine on the fleet twin (issue 24): `gpuops plan node_labels --out`,
`gpuops approve`, `gpuops apply PLAN` on two node twins and the Kubernetes API twin. node_labels needs a second
operator by default (its entry in the kinds table); the inventory's policy only names the allowed-signers file
(real ssh-keygen signatures, the real audit trail, real SSH).

- an apply without approval is refused, and so is one approved by the applier, `gpuops change node_labels --apply`
  and the runbook run by hand: nothing changes;
- a plan whose cluster changed after the approval (a node's label set by hand) is refused with "re-plan";
- an approved plan is applied: the labels are on both nodes, and the trail names the planner, approver and applier.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import yaml

from conftest import start_lab, stop_lab
from gpuops_cli import collection_path, gpuops, records

pytest.importorskip("ansible_runner")

TICKET = "CHG-2425"
NAMESPACE = "gpuops-approval"
LABEL, VALUE = "gpu.example.com/tier", "batch"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    work = tmp_path_factory.mktemp("change-two-person")
    lab = start_lab(str(work / "state"), "--nodes", "2", "--boot-delay", "0.5")
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
        with open(os.path.join(lab.state_dir, "inventory.yml")) as stream:
            inventory = yaml.safe_load(stream)
        # node_labels needs approval by default: the policy names only where the approvers' keys are
        inventory["all"]["vars"]["gpuops_approval_policy"] = {
            "node_labels": {"allowed_signers": str(work / "allowed_signers"), "ttl_hours": 2}}
        with open(work / "inventory.yml", "w") as stream:
            yaml.safe_dump(inventory, stream)
        yield {"lab": lab, "work": work, "people": people, "data": str(work / "data"),
               "inventory": str(work / "inventory.yml")}
    finally:
        stop_lab(lab)
        shutil.rmtree(str(work), ignore_errors=True)


def change_vars(fleet) -> dict:
    """The kind's inputs and the engine's settings for a short run: a canary of one, then the other node."""
    return {"gpuops_change_inputs": {"labels": {LABEL: VALUE}}, "gpuops_change_batches": [1, 1],
            "gpuops_soak_seconds": 0, "gpuops_run_record_dir": fleet["data"] + "/records",
            "gpuops_ready_timeout": 120, "gpuops_budget_wait_timeout": 0}


def kubectl(fleet, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["kubectl", "--kubeconfig", os.path.join(fleet["lab"].state_dir, "kubeconfig")]
                          + list(args), capture_output=True, text=True, check=True, timeout=60)


def nodes(fleet) -> dict:
    return {node["metadata"]["name"]: node for node in json.loads(kubectl(fleet, "get", "nodes", "-o",
                                                                          "json").stdout)["items"]}


def labelled(fleet) -> list:
    return sorted(name for name, node in nodes(fleet).items() if node["metadata"]["labels"].get(LABEL) == VALUE)


def plan(fleet, out):
    done = gpuops("plan", "node_labels", "-i", fleet["inventory"], "-e", json.dumps(change_vars(fleet)),
                  "--out", str(out), "--data-dir", fleet["data"], timeout=900)
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


def refused_cleanly(done, code, words):
    assert done.returncode == code, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuops: ") and words in lines[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def full_plan(fleet):
    return {"file": fleet["work"] / "plan.json", "plan": plan(fleet, fleet["work"] / "plan.json")}


def test_the_plan_file_names_the_change_each_node_s_action_the_cluster_and_its_hash(fleet, full_plan):
    body = full_plan["plan"]
    names = fleet["lab"].node_names
    assert body["change_kind"] == "node_labels" and body["cluster"] == "gpulab"
    assert [batch["nodes"] for batch in body["batches"]] == [[name] for name in names]
    assert body["state"]["change_id"].startswith("node-labels-") and body["state"]["blockers"] == []
    assert {name: node["action"] for name, node in body["state"]["nodes"].items()} == {name: "start" for name in names}
    assert body["inputs"]["extra_vars"]["gpuops_change_inputs"] == {"labels": {LABEL: VALUE}}
    written = [record for record in records(fleet["data"] + "/audit.jsonl") if record["event"] == "plan"]
    assert written[-1]["plan_sha256"] == body["sha256"] and written[-1]["change_kind"] == "node_labels"
    assert labelled(fleet) == []


def test_without_a_second_operator_nothing_changes_the_cluster(fleet, full_plan):
    before = len(records(fleet["data"] + "/audit.jsonl"))
    refused_cleanly(apply(fleet, full_plan["file"], "alice"), 3, "needs the approval of a second operator")
    approve(fleet, full_plan["file"], "alice")
    refused_cleanly(apply(fleet, full_plan["file"], "alice"), 10, "a second operator must approve")
    os.unlink(str(full_plan["file"]) + ".approval.json")
    # the runbook's own command would skip the rule: refused where the kind's policy asks for approval
    direct = gpuops("change", "node_labels", "-i", fleet["inventory"], "-e", json.dumps(change_vars(fleet)),
                    "--apply", "--ticket", TICKET, "--confirm", "gpulab", "--data-dir", fleet["data"])
    refused_cleanly(direct, 3, "gpuops plan node_labels --out PLAN")
    trail = records(fleet["data"] + "/audit.jsonl")[before:]
    assert [(record["event"], record["exit_code"]) for record in trail] == [
        ("apply_refused", 3), ("apply_refused", 10), ("refused", 3)]
    assert [record["applier"] for record in trail[:2]] == ["alice@ops", "alice@ops"]
    assert labelled(fleet) == []


def test_by_hand_the_runbook_refuses_a_kind_that_needs_two_people(fleet):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collection_path())
    done = subprocess.run(["ansible-playbook", "-i", fleet["inventory"], "gpuops.nvidia.change",
                           "-e", "gpuops_change_kind=node_labels", "-e", json.dumps(change_vars(fleet)),
                           "-e", "gpuops_confirm=gpulab"], capture_output=True, text=True, env=env, timeout=600,
                          stdin=subprocess.DEVNULL)
    assert done.returncode != 0 and "gpuops apply PLAN" in done.stdout, done.stdout[-3000:]
    assert labelled(fleet) == []


def test_a_plan_whose_cluster_changed_after_the_approval_is_refused_with_replan(fleet, full_plan):
    first = fleet["lab"].node_names[0]
    approve(fleet, full_plan["file"], "bob")
    kubectl(fleet, "label", "node", first, "%s=%s" % (LABEL, VALUE))   # by hand, after the approval
    try:
        done = apply(fleet, full_plan["file"], "alice")
    finally:
        kubectl(fleet, "label", "node", first, LABEL + "-")
    assert done.returncode == 11, done.stdout[-3000:] + done.stderr[-3000:]
    assert "gpuops: the cluster or the inputs differ from the plan (" in done.stderr and "re-plan" in done.stderr
    last = records(fleet["data"] + "/audit.jsonl")[-1]
    assert last["event"] == "apply_refused" and last["approver"] == "bob@ops" and "state" in last["changed"]
    assert labelled(fleet) == []


def test_an_approved_plan_is_applied_and_the_trail_names_both_operators(fleet, full_plan):
    approve(fleet, full_plan["file"], "bob")
    done = apply(fleet, full_plan["file"], "alice")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert labelled(fleet) == sorted(fleet["lab"].node_names)
    assert not [name for name, node in nodes(fleet).items() if node["spec"].get("unschedulable")]
    trail = records(fleet["data"] + "/audit.jsonl")
    sha = full_plan["plan"]["sha256"]
    approved = [record for record in trail if record["event"] == "approval" and record["plan_sha256"] == sha]
    applied = [record for record in trail if record["event"] == "apply" and record["plan_sha256"] == sha]
    assert approved[-1]["approver"] == "bob@ops" and approved[-1]["applier"] == "alice@ops"
    assert applied[-1]["approver"] == "bob@ops" and applied[-1]["planned_by"] == full_plan["plan"]["created_by"]
    run = [record for record in trail if record["run_id"] == applied[-1]["run_id"]]
    start = next(record for record in run if record["event"] == "runner_start")
    assert (start["mode"], start["ticket"], start["applier"], start["approver"], start["plan_sha256"],
            start["playbook"]) == ("apply", TICKET, "alice@ops", "bob@ops", sha, "gpuops.nvidia.change")
    assert run[-1]["event"] == "runner_end" and run[-1]["exit_code"] == 0
    assert gpuops("audit", "verify", fleet["data"] + "/audit.jsonl").returncode == 0
