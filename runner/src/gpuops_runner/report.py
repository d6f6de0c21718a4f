"""The report of one run, built from its lines of the audit trail: per-node rows, the one-screen summary and the
self-contained HTML page (with the timeline picture)."""

from __future__ import annotations

import datetime
import html

from gpuops_runner import repairs, timeline


def parse_ts(text):
    if not text:
        return None
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def steps(records):
    """task and gate records, each with start/end seconds from the run's first record."""
    origin = min((parse_ts(record["ts"]) for record in records if record.get("ts")), default=None)
    found = []
    for record in records:
        if record.get("event") not in ("task", "gate"):
            continue
        end = parse_ts(record.get("ts"))
        start = parse_ts(record.get("started")) or end
        found.append(dict(record, start_s=(start - origin).total_seconds(), end_s=(end - origin).total_seconds()))
    return found


def node_rows(records):
    """One row per host: batch, counts, the first failure (step or gate) and its message, time spent."""
    rows = {}
    for step in steps(records):
        row = rows.setdefault(step["host"], {"host": step["host"], "batch": step.get("batch"), "ok": 0,
                                             "changed": 0, "failed": 0, "skipped": 0, "unreachable": 0,
                                             "gates_passed": [], "gates_failed": [], "first_failure": None,
                                             "start_s": step["start_s"], "end_s": step["end_s"]})
        row["start_s"], row["end_s"] = min(row["start_s"], step["start_s"]), max(row["end_s"], step["end_s"])
        failed = step["status"] in ("failed", "unreachable") and not step.get("ignored")
        row[step["status"]] += 1
        if step["event"] == "gate":
            row["gates_passed" if step.get("passed") else "gates_failed"].append(step["gate"])
        if failed and row["first_failure"] is None:
            row["first_failure"] = {"task": step["task"], "gate": step.get("gate"), "msg": step.get("msg", "")}
    for row in rows.values():
        row["result"] = ("unreachable" if row["unreachable"] else "failed" if row["first_failure"]
                         else "changed" if row["changed"] else "ok")
    return [rows[host] for host in sorted(rows, key=lambda name: (rows[name]["batch"] or 0, name))]


def first_of(records, event):
    return next((record for record in records if record.get("event") == event), {})


def summary_text(records, run_dir, audit_log, head):
    """What `gpuops` prints at the end of a run: fits one screen for a batch of a few dozen nodes."""
    start, end = first_of(records, "run_start"), first_of(records, "runner_end")
    refused = first_of(records, "refused")
    about = end or refused
    lines = ["gpuops %s  run %s" % (about.get("runbook", "?"), about.get("run_id"))]
    operator = start.get("operator") or refused.get("operator") or {}
    lines.append("  mode %s  ticket %s  cluster %s  operator %s" % (
        end.get("mode") or refused.get("mode"), start.get("ticket") or refused.get("ticket") or "-",
        end.get("cluster") or refused.get("cluster") or "-", describe_operator(operator)))
    lines.append("  collection %s" % (describe_collection(start.get("collection") or refused.get("collection")) or "-"))
    if refused:
        lines.append("  REFUSED: %s" % refused.get("reason"))
    rows = node_rows(records)
    if rows:
        lines.append("")
        header = ("node", "batch", "result", "ok", "chg", "fail", "skip", "time_s", "first failure")
        lines.append("  %-22s %5s %-11s %4s %4s %4s %4s %8s  %s" % header)
        for row in rows:
            why = describe_failure(row["first_failure"])
            lines.append("  %-22s %5s %-11s %4d %4d %4d %4d %8.1f  %s" % (
                row["host"], row["batch"] if row["batch"] is not None else "-", row["result"], row["ok"],
                row["changed"], row["failed"] + row["unreachable"], row["skipped"], row["end_s"] - row["start_s"],
                why[:70]))
    gates = [step for step in steps(records) if step["event"] == "gate"]
    if gates:
        passed = sum(1 for gate in gates if gate.get("passed"))
        lines.append("  gates: %d passed, %d failed" % (passed, len(gates) - passed))
    if end.get("repairs") is not None:
        lines.append("")
        lines += repairs.summary_lines(end["repairs"], end.get("mode"))
    lines.append("")
    if end:
        lines.append("  exit %s (%s)  ansible-runner status %s"
                     % (end.get("exit_code"), end.get("outcome"), end.get("runner_status")))
    elif refused:
        lines.append("  exit %s (refused)" % refused.get("exit_code"))
    lines.append("  report   %s/report.html" % run_dir)
    lines.append("  audit    %s  (head %s)" % (audit_log, head))
    return "\n".join(lines)


def describe_operator(identity):
    if not identity:
        return None
    text = "%s on %s" % (identity.get("user"), identity.get("host"))
    if identity.get("sudo_user"):
        text += ", sudo by %s" % identity["sudo_user"]
    if identity.get("login") and identity.get("login") != identity.get("sudo_user"):
        text += ", login %s" % identity["login"]
    return text


def describe_collection(info):
    if not info:
        return None
    return "%s %s%s" % (info.get("name"), info.get("version"),
                        " (git %s)" % info["git_commit"][:12] if info.get("git_commit") else "")


def describe_failure(failure):
    if not failure:
        return ""
    where = "gate %s" % failure["gate"] if failure["gate"] else failure["task"]
    return "%s: %s" % (where, failure["msg"]) if failure["msg"] else where


def _cell(value):
    return "<td>%s</td>" % html.escape("" if value is None else str(value))


def html_page(records, head):
    """A self-contained page (no script, no external resource): run facts, per-node table, timeline."""
    start = first_of(records, "run_start")
    end = first_of(records, "runner_end") or first_of(records, "refused")
    title = "gpuops %s %s" % (end.get("runbook", "run"), end.get("run_id", ""))
    facts = [("run id", end.get("run_id")), ("runbook", end.get("runbook")), ("mode", end.get("mode")),
             ("outcome", "%s (exit %s)" % (end.get("outcome") or end.get("event"), end.get("exit_code"))),
             ("refused because", end.get("reason")),
             ("ticket", start.get("ticket") or end.get("ticket")), ("cluster", end.get("cluster")),
             ("operator", describe_operator(start.get("operator") or end.get("operator"))),
             ("collection", describe_collection(start.get("collection") or end.get("collection"))),
             ("inventory sha256", (start.get("inventory") or {}).get("sha256")),
             ("extra vars sha256", (start.get("extra_vars") or {}).get("sha256")),
             ("started", start.get("ts") or end.get("ts")), ("audit head", head)]
    fact_rows = "".join("<tr><th>%s</th>%s</tr>" % (html.escape(name), _cell(value))
                        for name, value in facts if value not in (None, "", {}))
    node_table = "".join(
        "<tr class='%s'>%s%s%s%s%s%s%s%s</tr>" % (
            html.escape(row["result"]), _cell(row["host"]), _cell(row["batch"]), _cell(row["result"]),
            _cell(row["ok"]), _cell(row["changed"]), _cell(row["failed"] + row["unreachable"]),
            _cell(", ".join(row["gates_passed"])),
            _cell(describe_failure(row["first_failure"])))
        for row in node_rows(records))
    repairs_part = ""
    if end.get("repairs") is not None:
        repair_rows = "".join(
            "<tr>%s%s%s%s%s</tr>" % (_cell(entry["node"]), _cell(entry["failing_layer"]),
                                     _cell(", ".join(str(case) for case in entry["cases"])),
                                     _cell(action["task"]), _cell(action["status"]))
            for entry in end["repairs"] for action in entry["actions"] or [{"task": "", "status": "no repair"}])
        repairs_part = ("<h2>Repairs (%s)</h2>\n<table id=\"repairs\"><tr><th>node</th><th>layer</th><th>cases</th>"
                        "<th>step</th><th>status</th></tr>%s</table>\n"
                        % ("dry run: would change" if end.get("mode") == "check" else "applied", repair_rows))
    return """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>%(title)s</title>
<style>
body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:13px}
#nodes td:first-child{white-space:nowrap}
tr.failed td,tr.unreachable td{background:#fde2e2}
tr.changed td{background:#fff6da}
</style></head><body>
<h1>%(title)s</h1>
<table id="run">%(facts)s</table>
<h2>Nodes</h2>
<table id="nodes"><tr><th>node</th><th>batch</th><th>result</th><th>ok</th><th>changed</th><th>failed</th>
<th>gates passed</th><th>first failure</th></tr>%(nodes)s</table>
%(repairs)s<h2>Timeline</h2>
%(svg)s
</body></html>
""" % {"title": html.escape(title), "facts": fact_rows, "nodes": node_table,
       "svg": timeline.svg(steps(records), inline=True), "repairs": repairs_part}
