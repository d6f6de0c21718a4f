# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The change engine's plan (playbooks/change.yml): which nodes a change still has to reach, in batches (canary
first), each node's resume action from its record, and what blocks the run. The batching, the budget and the
window are the driver roll-out's (rollout/plan.py); what differs is the record (one per change kind, for one change
id) and what the kind takes out of service.
"""

from __future__ import annotations

import hashlib
import json

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.meta import json_annotation
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout import plan as rollout
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout.change_kinds import kind_of, kind_summary, node_labels
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout.record import RecordKind

ANNOTATION_PREFIX = "gpuops.nvidia/change-"
STATE_APPLYING = "applying"
STATE_VERIFYING = "verifying"
STATE_DONE = "done"
STATE_FAILED = "failed"
STATE_ROLLED_BACK = "rolled-back"
STATES = (STATE_APPLYING, STATE_VERIFYING, STATE_DONE, STATE_FAILED, STATE_ROLLED_BACK)
IN_FLIGHT_STATES = (STATE_APPLYING, STATE_VERIFYING)


def record_annotation(kind_name: str) -> str:
    """The node annotation holding a kind's record: ``gpuops.nvidia/change-node-labels`` for ``node_labels``."""
    return ANNOTATION_PREFIX + kind_name.replace("_", "-")


def record_kind(kind_name: str) -> RecordKind:
    """How rollout/record.py writes a kind's record: keyed by the change id; applying and verifying keep the node
    out of the auto-remediators' reach, done and rolled-back give it back."""
    return RecordKind(record_annotation(kind_name), "change", STATES, IN_FLIGHT_STATES,
                      (STATE_DONE, STATE_ROLLED_BACK))


def change_id(kind_name: str, inputs) -> str:
    """The change's identity: its kind and a hash of its inputs (canonical JSON). A re-run of the same change finds
    its records by it; other inputs are another change."""
    canonical = json.dumps(inputs or {}, sort_keys=True, separators=(",", ":"), default=str)
    return "%s-%s" % (kind_name.replace("_", "-"), hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12])


def parse_record(node: dict, kind_name: str):
    record = json_annotation(node, record_annotation(kind_name))
    return record if isinstance(record, dict) and record.get("state") in STATES else None


def resume_action(record, this_change: str, at_target: bool) -> str:
    """``skip`` (done for this change, or the node shows it already), ``continue`` (a run of this change stopped
    mid-way on the node: apply again, idempotent), ``failed`` (a run of this change failed the node: a person looks
    first) or ``start``. A rolled-back node is started again: the re-run of a change is a new try."""
    if record and record.get("change") == this_change:
        state = record.get("state")
        if state == STATE_DONE:
            return "skip"
        if state in IN_FLIGHT_STATES:
            return "continue"
        if state == STATE_FAILED:
            return "failed"
    return "skip" if at_target else "start"


def other_changes_in_flight(node: dict, kind_name: str) -> list:
    """Reasons another change holds the node now: a driver roll-out record in maintenance, or another change kind's
    record applying or verifying (two changes on one node at once would each verify the other's half)."""
    reasons = []
    driver = rollout.parse_record(node)
    if driver and driver.get("state") in rollout.MAINTENANCE_STATES:
        reasons.append("a driver roll-out is in progress on it (%s %s)" % (rollout.RECORD_ANNOTATION,
                                                                           driver.get("state")))
    for key in sorted(((node.get("metadata") or {}).get("annotations") or {})):
        if key.startswith(ANNOTATION_PREFIX) and key != record_annotation(kind_name):
            record = json_annotation(node, key)
            if isinstance(record, dict) and record.get("state") in IN_FLIGHT_STATES:
                reasons.append("another change is in progress on it (%s %s, run %s)"
                               % (key, record.get("state"), record.get("run_id", "?")))
    return reasons


def build_change_plan(kind_name, inputs, targets, nodes, batches=None, canary_nodes=None, max_unavailable=1,
                      spread_label=None, kured_daemonsets=()) -> dict:
    """The dry run's plan of a change from the cluster's Node JSON: the change id, batches (canary first; the kind's
    default schedule unless ``batches``) of the nodes still to do, each node's action, record and labels, and what
    blocks the run."""
    kind = kind_of(kind_name)
    this_change = change_id(kind_name, inputs)
    by_name = dict((node["metadata"]["name"], node) for node in nodes)
    out = rollout.unavailable_nodes(by_name[name] for name in targets if name in by_name)
    per_node, skipped, blockers = {}, [], []
    for name in targets:
        node = by_name.get(name, {"metadata": {"name": name}})
        record = parse_record(node, kind_name)
        at_target = bool(kind.node_at_target and kind.node_at_target(node, inputs))
        action = resume_action(record, this_change, at_target)
        # a record of another change of this kind is history: this change starts over on the node
        ours = record if record and record.get("change") == this_change else None
        per_node[name] = {"action": action, "record": ours, "labels": node_labels(node)}
        if action == "skip":
            skipped.append({"node": name, "reason": "already changed (%s)" % (
                "recorded done" if record and record.get("change") == this_change else "the node shows it")})
            continue
        if action == "failed":
            blockers.append({"node": name, "reason": "a previous run of this change failed the node: %s"
                             % (record.get("reason") or "no reason recorded")})
        blockers.extend({"node": name, "reason": reason} for reason in other_changes_in_flight(node, kind_name))
        if kind.disruption != "none" and name in out and action == "start":
            blockers.append({"node": name, "reason": "already %s (not by this change)" % out[name]})
    blockers.extend(rollout.other_upgraders(nodes, targets, kured_daemonsets))
    to_do = [name for name in targets if per_node[name]["action"] != "skip"]
    canary = [name for name in (canary_nodes or []) if name in to_do] or None
    in_flight = [name for name in to_do if per_node[name]["action"] == "continue"]
    if in_flight:   # nodes a stopped run left mid-way go first, together (as the driver roll-out's)
        canary = in_flight + [name for name in (canary or []) if name not in in_flight]
    domain_of = None
    if spread_label:
        domain_of = dict((name, node_labels(by_name.get(name, {})).get(spread_label)) for name in to_do)
    planned = rollout.plan_batches(to_do, list(batches or kind.batches), canary, domain_of) if to_do else []
    gpu_nodes = [node for node in nodes if rollout.is_gpu_node(node)]
    if not gpu_nodes:   # a cluster whose GPU nodes advertise nothing yet: the targets are its GPU nodes
        gpu_nodes = [by_name[name] for name in targets if name in by_name]
    return {
        "kind": kind_name,
        "change_id": this_change,
        "change_kind": kind_summary(kind),
        "inputs": inputs or {},
        "batches": [{"index": index + 1, "kind": "canary" if index == 0 else "batch", "nodes": batch}
                    for index, batch in enumerate(planned)],
        "nodes": per_node,
        "skipped": skipped,
        "blockers": blockers,
        # a kind that leaves its nodes in service takes nothing from the budget
        "max_unavailable": (len(gpu_nodes) if kind.disruption == "none"
                            else rollout.max_unavailable_nodes(max_unavailable, len(gpu_nodes))),
        "unavailable_now": rollout.unavailable_nodes(gpu_nodes),
    }
