"""What a `gpuops repair` run did (or, in a dry run, would do), per node: the diagnose runbook's cases for the node
and every step that changed something (reported changed in --check: would change), read from ansible-runner's
events. The list goes into the run's `runner_end` line of the audit trail and the summary."""

from __future__ import annotations

RESULT_STATUS = {"runner_on_ok": "changed", "runner_on_failed": "failed", "runner_on_unreachable": "unreachable"}


def _diagnosis(result):
    """The node's diagnosis as the runbook shows it (a debug msg with its failing layer and cases), or None."""
    message = result.get("msg")
    if isinstance(message, dict) and "failing_layer" in message and isinstance(message.get("cases"), list):
        return message
    return None


def _acted_on(data, result):
    """The nodes a step acted on: a run-once step from the controller names them in its result's ``nodes``."""
    nodes = result.get("nodes")
    if isinstance(nodes, list) and nodes and all(isinstance(entry, dict) and entry.get("node") for entry in nodes):
        return [str(entry["node"]) for entry in nodes]
    return [str(data.get("host", "?"))]


def collect(events):
    """[{node, failing_layer, cases, actions: [{task, status}]}] for every node the run diagnosed, by node name.

    A step is an action when ansible reports it changed (ok) or it failed on the node; read-only steps report
    unchanged and are left out, so a node with cases but no action had no safe repair to run."""
    nodes = {}

    def node(name):
        return nodes.setdefault(name, {"node": name, "failing_layer": None, "cases": [], "actions": []})

    for event in sorted(events, key=lambda one: one.get("counter", 0)):
        kind = event.get("event")
        data = event.get("event_data") or {}
        result = data.get("res") if isinstance(data.get("res"), dict) else {}
        if kind not in RESULT_STATUS or not data.get("host"):
            continue
        diagnosis = _diagnosis(result) if kind == "runner_on_ok" else None
        if diagnosis is not None:
            entry = node(str(data["host"]))
            entry["failing_layer"] = diagnosis.get("failing_layer")
            entry["cases"] = sorted({case["case"] for case in diagnosis["cases"]
                                     if isinstance(case, dict) and case.get("case") is not None})
            continue
        if kind == "runner_on_ok" and not result.get("changed"):
            continue
        if data.get("ignore_errors"):
            continue
        for name in _acted_on(data, result):
            node(name)["actions"].append({"task": str(data.get("task", "?")), "status": RESULT_STATUS[kind]})
    return [nodes[name] for name in sorted(nodes)]


def summary_lines(repairs, mode):
    """The repair part of the summary: one line per node with its cases, then one per action."""
    verb = "would run (dry run, nothing changed)" if mode == "check" else "ran"
    lines = ["  repairs %s:" % verb]
    if not repairs:
        lines.append("    no node diagnosed")
    for entry in repairs:
        cases = ", ".join(str(case) for case in entry["cases"]) or "none"
        layer = entry["failing_layer"] or "-"
        if not entry["actions"]:
            what = "no repair" if not entry["cases"] else "no safe repair (see the diagnosis)"
            lines.append("    %-22s layer %-3s case(s) %s: %s" % (entry["node"], layer, cases, what))
            continue
        lines.append("    %-22s layer %-3s case(s) %s:" % (entry["node"], layer, cases))
        for action in entry["actions"]:
            status = action["status"]
            if mode == "check" and status == "changed":
                status = "would change"
            lines.append("      %s (%s)" % (action["task"], status))
    return lines
