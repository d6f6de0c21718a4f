"""The invariants a chaos round is judged by, beyond what `gpulab.kube.sim.checker` replays (PDBs, GPU nodes out,
reboots): pure functions over plain data (the API twin's change records, the node twin's events, the nodes'
end state, the audit trail's lines, the runs' results), each returning a list of violations (dicts with `invariant`
and `what`); empty when the invariant holds.
"""
from __future__ import annotations

import datetime
import json
import re

from gpulab.kube.sim.checker import is_gpu_node, node_is_unavailable

RECORD = "gpuops.nvidia/driver-upgrade"
CORDON = "gpuops.nvidia/cordon"
DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"
# record states a node may end a round in: the run left it there on purpose
FINAL_STATES = ("done", "failed", "rolled-back")
SILENCE_TAG = re.compile(r"\[gpuops\.nvidia node=(\S+) run=(\S+)\]")


def violation(invariant: str, what: str, **details) -> dict:
    return dict({"invariant": invariant, "what": what}, **details)


def record_of(node: dict):
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(RECORD)
    return json.loads(raw) if raw else None


def audit_ts(text: str) -> float:
    """Epoch seconds of an audit line's `ts` (RFC 3339 UTC with milliseconds)."""
    return datetime.datetime.strptime(text.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


# --------------------------------------------------------------------------- the budget, counting others

def budget_at_own_cordons(changes: list, budget: int) -> list:
    """At every cordon this collection made (the node gains `gpuops.nvidia/cordon`), the GPU nodes out (cordoned or
    not Ready, whoever did it) must be within the budget, the new one included."""
    nodes, found = {}, []
    for change in changes:
        if change.get("resource") != "nodes":
            continue
        name, node = change.get("name"), change.get("object") or {}
        before = nodes.get(name)
        if change.get("event") == "DELETED":
            nodes.pop(name, None)
            continue
        nodes[name] = node
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        was_ours = before is not None and CORDON in ((before.get("metadata") or {}).get("annotations") or {}) \
            and (before.get("spec") or {}).get("unschedulable")
        if CORDON not in annotations or not (node.get("spec") or {}).get("unschedulable") or was_ours:
            continue
        out = sorted(other for other, obj in nodes.items() if is_gpu_node(obj) and node_is_unavailable(obj))
        if len(out) > budget:
            found.append(violation("budget", "%s cordoned while %d GPU nodes were out (budget %d)" % (
                name, len(out), budget), ts=change.get("ts"), node=name, out=out))
    return found


# --------------------------------------------------------------------------- reboots

def reboots_per_upgrade(boots: dict, final_records: dict) -> list:
    """At most one boot per node for its upgrade, one more for a rollback; none for a node without a record.
    `boots`: node -> boots the node twin logged during the round; `final_records`: node -> its record or None."""
    found = []
    for name, count in sorted(boots.items()):
        record = final_records.get(name)
        # a rollback (rolled back, or failed after `rollback_to` was recorded at its start) reboots once more
        allowed = 0 if record is None else 1 + (1 if record.get("rollback_to")
                                                or record.get("state") == "rolled-back" else 0)
        if count > allowed:
            found.append(violation("reboots", "%s booted %d times, %d allowed (record %s)" % (
                name, count, allowed, (record or {}).get("state")), node=name))
    return found


# --------------------------------------------------------------------------- the nodes' end state

# node faults that take a node's health (Ready, allocatable GPUs) after the run last checked it: the run cannot
# see them, so a done node they hit is judged on the rest (cordon, driver, label); the round reports them
HEALTH_FAULTS = ("device-plugin-crash", "kubelet-down", "kubelet-restart", "stale-device-plugin", "xid:48", "xid:79")


def faults_after_last_look(name: str, audit: list, events: list) -> list:
    """The twin's faults on node ``name`` that fired after the run's last gate on it (audit lines with event
    `gate` and host ``name``): {fault, fired, last_look} (epoch seconds), [] when it had no gate."""
    looks = [audit_ts(line["ts"]) for line in audit if line.get("event") == "gate" and line.get("host") == name]
    if not looks:
        return []
    return [{"fault": event["fault"], "fired": event["ts"], "last_look": max(looks)} for event in events
            if event.get("kind") == "fault" and event.get("node") == name and event.get("fault") in HEALTH_FAULTS
            and event.get("ts", 0) > max(looks)]


def node_end_state(name: str, node: dict, loaded_version, target: str, health_unseen: bool = False) -> list:
    """A node with a record ends done (uncordoned, Ready, every GPU allocatable, the target loaded and labelled),
    rolled back (the same on its previous version) or failed (cordoned, with the reason); a node without one is
    not left cordoned. ``health_unseen``: a fault took the node's health after the run last checked it
    (`faults_after_last_look`), so Ready and allocatable are not the run's to answer for."""
    record = record_of(node)
    cordoned = bool((node.get("spec") or {}).get("unschedulable"))
    status = node.get("status") or {}
    ready = not node_is_unavailable(dict(node, spec={}))
    gpus_back = (status.get("allocatable") or {}).get("nvidia.com/gpu") == (status.get("capacity") or {}).get(
        "nvidia.com/gpu")
    label = ((node.get("metadata") or {}).get("labels") or {}).get(DRIVER_LABEL)
    if record is None:
        return [violation("end-state", "%s is cordoned without a record saying why" % name, node=name)] \
            if cordoned else []
    state = record.get("state")
    if state == "failed":
        if cordoned and record.get("reason"):
            return []
        return [violation("end-state", "%s failed but is %s" % (
            name, "not cordoned" if not cordoned else "without a reason"), node=name, record=record)]
    if state in ("done", "rolled-back"):
        driver = target if state == "done" else record.get("from")
        problems = [what for what, bad in (("cordoned", cordoned), ("not Ready", not ready and not health_unseen),
                                          ("GPUs not all allocatable", not gpus_back and not health_unseen),
                                          ("labelled %s" % label, label != driver),
                                          ("loads %s" % loaded_version, loaded_version != driver)) if bad]
        if problems:
            return [violation("end-state", "%s is %s but %s (expected on %s)" % (
                name, state, ", ".join(problems), driver), node=name, record=record)]
        return []
    return [violation("end-state", "%s was left mid-upgrade (%s)" % (name, state), node=name, record=record)]


# --------------------------------------------------------------------------- nothing touched after a stop

def record_starts(changes: list) -> list:
    """(ts, node) of every change that puts a node's record into `draining` from no record or another state."""
    states, starts = {}, []
    for change in changes:
        if change.get("resource") != "nodes" or change.get("event") == "DELETED":
            continue
        record = record_of(change.get("object") or {})
        state = (record or {}).get("state")
        if state == "draining" and states.get(change.get("name")) != "draining":
            starts.append((change.get("ts"), change.get("name")))
        states[change.get("name")] = state
    return starts


def failures(changes: list) -> list:
    """(ts, node) of every change that puts a node's record into `failed` or `rolling-back`."""
    states, found = {}, []
    for change in changes:
        if change.get("resource") != "nodes" or change.get("event") == "DELETED":
            continue
        state = (record_of(change.get("object") or {}) or {}).get("state")
        if state in ("failed", "rolling-back") and states.get(change.get("name")) not in ("failed", "rolling-back"):
            found.append((change.get("ts"), change.get("name")))
        states[change.get("name")] = state
    return found


def untouched_after_a_stop(changes: list, audit: list, upgrade_play_prefix="Upgrade the GPU nodes") -> list:
    """Within one run (audit `run_start` to the next), after a failed batch gate no node is drained any more,
    and after a node failed no node of a later batch is. Batches are the upgrade play's `batch_start` lines."""
    run_starts = sorted(audit_ts(line["ts"]) for line in audit if line.get("event") == "run_start")
    batches = sorted((audit_ts(line["ts"]), tuple(line.get("hosts") or ())) for line in audit
                     if line.get("event") == "batch_start" and (line.get("play") or "").startswith(upgrade_play_prefix))
    gate_stops = [audit_ts(line["ts"]) for line in audit if line.get("event") == "gate"
                  and line.get("gate") == "batch" and not line.get("passed")]

    def run_end(ts):
        return min([start for start in run_starts if start > ts] + [float("inf")])

    def batch_started(ts, node):
        return max([start for start, hosts in batches if start <= ts and node in hosts] + [float("-inf")])

    found = []
    starts = record_starts(changes)
    for stop in gate_stops:
        for ts, node in starts:
            if stop < ts < run_end(stop):
                found.append(violation("after-stop", "%s drained after a failed batch gate" % node, ts=ts,
                                       node=node, stopped=stop))
    for stop, failed_node in failures(changes):
        failed_batch = batch_started(stop, failed_node)
        for ts, node in starts:
            if stop < ts < run_end(stop) and batch_started(ts, node) > failed_batch:
                found.append(violation("after-stop", "%s of a later batch drained after %s failed" % (
                    node, failed_node), ts=ts, node=node, stopped=stop))
    return found


# --------------------------------------------------------------------------- lock, silences

def lock_at_end(holder, live_holders=()) -> list:
    if holder is None or holder in live_holders:
        return []
    return [violation("lock", "the roll-out lock is still held by %s, no run of it alive" % holder)]


def silences_left(silences: list, final_records: dict) -> list:
    """The runbook's silences (comment tag `[gpuops.nvidia node=... run=...]`) are expired unless their node is
    still mid-upgrade (a killed run's, bounded by their end time)."""
    found = []
    for silence in silences:
        match = SILENCE_TAG.search(silence.get("comment") or "")
        if not match or (silence.get("status") or {}).get("state") != "active":
            continue
        node = match.group(1)
        state = (final_records.get(node) or {}).get("state")
        if state is None or state in FINAL_STATES:
            found.append(violation("silences", "a silence of %s is still active (record %s)" % (node, state),
                                   node=node, silence=silence.get("id")))
    return found


# --------------------------------------------------------------------------- the run's word against the twin

SUMMARY_LINE = re.compile(r"^\s*\"?(gpu-node-\d+)\s+\S+ -> \S+\s+(\S+(?: started)?)")


def summary_results(output: str) -> dict:
    """node -> RESULT from the summary table the run printed last."""
    results = {}
    for line in output.splitlines():
        match = SUMMARY_LINE.match(line)
        if match:
            results[match.group(1)] = match.group(2)
    return results


def run_agrees(rc: int, output: str, run_record, final_records: dict) -> list:
    """The last run's exit code, summary and run record say what the twin shows: exit 0 exactly when the run record
    says completed, each node's record in the run record and result in the summary as on the node."""
    if run_record is None:
        return [] if rc != 0 else [violation("run-record", "exit 0 but no run record written")]
    found = []
    completed = run_record.get("outcome") == "completed"
    if (rc == 0) != completed:
        found.append(violation("run-record", "exit %d but the run record says %r" % (rc, run_record.get("outcome"))))
    summary = summary_results(output)
    for name, entry in sorted((run_record.get("nodes") or {}).items()):
        said = (entry.get("record") or {}).get("state")
        actual = (final_records.get(name) or {}).get("state")
        if said != actual:
            found.append(violation("run-record", "the run record says %s is %s, the node says %s" % (
                name, said, actual), node=name))
        expected = actual or ("skipped" if entry.get("action") == "skip" else "not started")
        if summary and summary.get(name) != expected:
            found.append(violation("summary", "the summary says %s is %s, the node says %s" % (
                name, summary.get(name), expected), node=name))
        if completed and actual not in ("done", None):
            found.append(violation("run-record", "completed, but %s is %s" % (name, actual), node=name))
    return found


# --------------------------------------------------------------------------- the audit trail

def twin_actions(changes: list, node_events: list) -> list:
    """(ts, node, action) of what the twin saw done to the nodes: record moves, cordons, uncordons, reboot
    requests."""
    actions, before = [], {}
    for change in changes:
        if change.get("resource") != "nodes" or change.get("event") == "DELETED":
            continue
        name, node = change.get("name"), change.get("object") or {}
        previous = before.get(name)
        before[name] = node
        if previous is None:
            continue
        if record_of(previous) != record_of(node):
            actions.append((change.get("ts"), name, "record"))
        if bool((previous.get("spec") or {}).get("unschedulable")) != bool((node.get("spec") or {}).get(
                "unschedulable")):
            actions.append((change.get("ts"), name, "cordon"))
    for event in node_events:
        if event.get("kind") == "power-request":
            actions.append((event.get("ts"), event.get("node"), "reboot"))
    return sorted(actions)


def audit_names_actions(actions: list, audit: list, killed_runs_end=()) -> list:
    """Every action of `twin_actions` has an audit `task` line for its node (its host, or one of a batch step's
    `nodes`) whose task ran when it happened
    (`started` to `started + duration_s`, 2 s of slack). An action after the last line of a run that was killed
    (`killed_runs_end`: (last line's ts, kill ts)) had its result never written: it is excused."""
    spans = {}
    for line in audit:
        if line.get("event") in ("task", "gate") and line.get("host") and line.get("started"):
            start = audit_ts(line["started"])
            span = (start - 2.0, start + float(line.get("duration_s") or 0) + 2.0)
            # a batch step's line names the nodes it acted on besides the host it ran from
            for node in set([line["host"]] + list(line.get("nodes") or ())):
                spans.setdefault(node, []).append(span)
    found = []
    for ts, node, action in actions:
        if any(start <= ts <= end for start, end in spans.get(node, ())):
            continue
        if any(last <= ts <= killed for last, killed in killed_runs_end):
            continue
        found.append(violation("audit", "%s of %s at %.3f is named by no audit line" % (action, node, ts), ts=ts,
                               node=node))
    return found
