"""`gpuops repair`: the diagnose runbook with its remediation on, for the nodes named with --limit only; what it
repaired (or would repair) per node and case, read from ansible-runner's events into runner_end and the summary."""
from __future__ import annotations

import os
import sys

import pytest

from gpuops_runner import repairs, report, runbook
from gpuops_runner.cli import build_parser

SHOW = "Show the node summary, the failing layer, the cases and their fix"
CASE_1 = "Case 1, stale ledger: restart the device-plugin pod on these nodes and wait for allocatable"


def event(counter, kind, host, task, **res):
    """An ansible-runner event as its event_handler gets it (the fields collect reads)."""
    return {"counter": counter, "event": kind,
            "event_data": {"host": host, "task": task, "res": res}}


def shown(counter, host, layer, *cases):
    return event(counter, "runner_on_ok", host, SHOW, changed=False,
                 msg={"summary": "8 GPU(s)", "failing_layer": layer, "findings": [],
                      "cases": [{"case": case, "title": "t", "runbook": "docs/alerts.md"} for case in cases]})


# a --limit of two nodes: gpu-node-01 has the stale ledger (case 1), gpu-node-02 is healthy; the case 1 step runs
# once from the controller for both stale nodes' list and reports per node in its result's "nodes"
DRY_RUN = [
    event(1, "runner_on_ok", "gpu-node-01", "Gather the NVIDIA driver facts", changed=False),
    event(2, "runner_on_ok", "gpu-node-02", "Gather the NVIDIA driver facts", changed=False),
    shown(3, "gpu-node-01", "L5", 1),
    shown(4, "gpu-node-02", None),
    event(5, "runner_on_skipped", "gpu-node-02", "Case 4, hardware: cordon the node with the reason"),
    event(6, "runner_on_ok", "gpu-node-01", CASE_1, changed=True,
          nodes=[{"node": "gpu-node-01", "deleted_pod": "nvidia-device-plugin-daemonset-abc12", "restored": False}]),
    event(7, "runner_on_failed", "gpu-node-02", "Read a log (errors ignored)", changed=False),
]
DRY_RUN[-1]["event_data"]["ignore_errors"] = True


def test_each_node_gets_its_layer_cases_and_the_steps_that_changed_it():
    found = repairs.collect(DRY_RUN)
    assert found == [
        {"node": "gpu-node-01", "failing_layer": "L5", "cases": [1],
         "actions": [{"task": CASE_1, "status": "changed"}]},
        {"node": "gpu-node-02", "failing_layer": None, "cases": [], "actions": []},
    ]


def test_a_failed_step_is_an_action_of_its_node_and_a_run_once_step_counts_for_the_nodes_it_names():
    events = DRY_RUN[:4] + [
        event(8, "runner_on_ok", "gpu-node-01", CASE_1, changed=True,
              nodes=[{"node": "gpu-node-01"}, {"node": "gpu-node-02"}]),
        event(9, "runner_on_failed", "gpu-node-02", "Record what was fixed and what the cluster says now",
              msg="not fixed"),
        event(10, "runner_on_unreachable", "gpu-node-01", "Delete the stale socket"),
    ]
    found = {entry["node"]: entry["actions"] for entry in repairs.collect(events)}
    assert found["gpu-node-01"] == [{"task": CASE_1, "status": "changed"},
                                    {"task": "Delete the stale socket", "status": "unreachable"}]
    assert found["gpu-node-02"] == [{"task": CASE_1, "status": "changed"},
                                    {"task": "Record what was fixed and what the cluster says now",
                                     "status": "failed"}]


def test_the_summary_says_would_in_a_dry_run_and_names_nodes_without_a_repair():
    found = repairs.collect(DRY_RUN)
    dry = "\n".join(repairs.summary_lines(found, "check"))
    assert "repairs would run (dry run, nothing changed):" in dry
    assert "gpu-node-01            layer L5  case(s) 1:" in dry and "(would change)" in dry
    assert "gpu-node-02            layer -   case(s) none: no repair" in dry
    applied = "\n".join(repairs.summary_lines(found, "apply"))
    assert "repairs ran:" in applied and "(changed)" in applied and "would" not in applied
    no_safe = [{"node": "gpu-node-03", "failing_layer": "L0", "cases": [4], "actions": []}]
    assert "no safe repair" in "\n".join(repairs.summary_lines(no_safe, "apply"))


def test_the_run_summary_and_report_show_the_repairs_of_runner_end_only_for_a_repair_run(tmp_path):
    end = {"event": "runner_end", "run_id": "r1", "ts": "2026-12-04T22:00:00.000Z", "runbook": "repair",
           "mode": "check", "exit_code": 0, "outcome": "done", "repairs": repairs.collect(DRY_RUN)}
    text = report.summary_text([end], str(tmp_path), "audit.jsonl", "0" * 64)
    assert "repairs would run" in text and CASE_1[:60] in text
    page = report.html_page([end], "0" * 64)
    assert "<h2>Repairs (dry run: would change)</h2>" in page and "<td>gpu-node-01</td><td>L5</td><td>1</td>" in page
    assert "<td>gpu-node-02</td><td></td><td></td><td></td><td>no repair</td>" in page
    del end["repairs"]
    assert "repairs" not in report.summary_text([end], str(tmp_path), "audit.jsonl", "0" * 64)
    assert "Repairs" not in report.html_page([end], "0" * 64)


def args_for(tmp_path, collections_path, *more):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all:\n  vars:\n    gpuops_cluster_name: lab\n  children:\n    gpu_nodes:\n      hosts:\n"
                         "        n1:\n        n2:\n")
    return build_parser().parse_args(["repair", "-i", str(inventory), "--data-dir", str(tmp_path / "data"),
                                      "--collections-path", collections_path] + list(more))


@pytest.mark.parametrize("limit", [[], ["--limit", "all"], ["--limit", "*"]])
def test_a_repair_must_name_its_nodes(tmp_path, collections_path, limit):
    with pytest.raises(runbook.Refused, match=r"^gpuops repair names its nodes: pass --limit NODES"):
        runbook.RunbookRun(args_for(tmp_path, collections_path, *limit))._check({})


def test_the_repair_turns_remediation_on_and_only_gpuops_sets_it(tmp_path, collections_path, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    run = runbook.RunbookRun(args_for(tmp_path, collections_path, "--limit", "n1"))
    extra_vars = run._check({})
    assert extra_vars == {"gpuops_remediate": True}       # a dry run: no gpuops_confirm
    assert run.runbook.playbook == "diagnose" and run._playbook_arguments() == ["--check"]
    with pytest.raises(runbook.Refused, match="-e gpuops_remediate is set by gpuops repair"):
        runbook.RunbookRun(args_for(tmp_path, collections_path, "--limit", "n1",
                                    "-e", "gpuops_remediate=false"))._check({})
    applied = runbook.RunbookRun(args_for(tmp_path, collections_path, "--limit", "n1", "--apply", "--ticket",
                                          "INC-1", "--confirm", "lab"))
    assert applied._check({}) == {"gpuops_remediate": True, "gpuops_confirm": "lab"}
    assert applied._playbook_arguments() == []
    with pytest.raises(runbook.Refused, match="--apply needs --ticket"):
        runbook.RunbookRun(args_for(tmp_path, collections_path, "--limit", "n1", "--apply",
                                    "--confirm", "lab"))._check({})
