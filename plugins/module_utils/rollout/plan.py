# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The driver upgrade runbook's decisions, as pure functions on plain data (no I/O, no AnsibleModule).

- input validation: every bad input named at once, before anything is touched;
- batches: the canary first, then counts or percentages of the targets, optionally spread over failure domains;
- the cluster-wide budget: GPU nodes cordoned or NotReady (whoever did it) count against ``max_unavailable``;
- the maintenance window;
- the per-node record (the ``gpuops.nvidia/driver-upgrade`` annotation) and what a re-run does with it;
- other upgraders active on the same nodes (the GPU Operator's upgrade state, a held kured lock).
"""

from __future__ import annotations

import datetime
import json
import math
import re

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.drain import budget_report, classify_pods
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.meta import json_annotation

RECORD_ANNOTATION = "gpuops.nvidia/driver-upgrade"
OPERATOR_STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
OPERATOR_IDLE_STATES = ("", "upgrade-done")
KURED_LOCK_ANNOTATION = "weave.works/kured-node-lock"

# NVIDIA driver versions: 595.91.07, 550.54.15, 470.74 (older releases have two parts).
DRIVER_VERSION_PATTERN = re.compile(r"^[0-9]{3}\.[0-9]{1,3}(\.[0-9]{1,3})?$")
# A Kubernetes node name is an RFC 1123 DNS subdomain; anything else (shell metacharacters included) is refused.
NODE_NAME_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
PERCENT_PATTERN = re.compile(r"^([0-9]{1,3})%$")
CLOCK_PATTERN = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")

# Record states in the order a node goes through them; a re-run reads where a node stopped.
STATES_BEFORE_REBOOT = ("planned", "draining", "installing")
STATE_REBOOTING = "rebooting"
STATE_VERIFYING = "verifying"
STATE_DONE = "done"
STATE_FAILED = "failed"
STATE_ROLLED_BACK = "rolled-back"
RECORD_STATES = STATES_BEFORE_REBOOT + (STATE_REBOOTING, STATE_VERIFYING, STATE_DONE, STATE_FAILED,
                                        STATE_ROLLED_BACK)


# --------------------------------------------------------------------------- counts and percentages

def is_count(value) -> bool:
    """A non-negative integer or a ``N%`` string with N in 0..100 (booleans are not counts)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    if isinstance(value, str):
        match = PERCENT_PATTERN.match(value.strip())
        if match:
            return int(match.group(1)) <= 100
        return value.strip().isdigit()
    return False


def scale_count(value, total: int, round_up: bool) -> int:
    """``value`` (count or percentage, see is_count) as a number of nodes out of ``total``."""
    if not is_count(value):
        raise ValueError("%r is neither a count nor a percentage" % (value,))
    text = str(value).strip()
    match = PERCENT_PATTERN.match(text)
    if not match:
        return int(text)
    exact = int(match.group(1)) * total / 100.0
    return int(math.ceil(exact)) if round_up else int(math.floor(exact))


def max_unavailable_nodes(value, gpu_node_count: int) -> int:
    """The budget: how many GPU nodes may be out at once. A percentage rounds down, but never below 1, so a
    small cluster can still be upgraded one node at a time."""
    return max(1, scale_count(value, gpu_node_count, round_up=False))


# --------------------------------------------------------------------------- validation

def validate_inputs(driver_version, cluster_name, targets, known_nodes, batches, canary_nodes=None,
                    max_unavailable=1, max_fail_percentage=0, soak_seconds=0, maintenance_window=None,
                    spread_label=None) -> list:
    """Every reason the inputs cannot be planned, [] when they can. ``known_nodes``: the cluster's node names
    (None when unknown, then unknown targets are not checked)."""
    errors = []
    if not isinstance(driver_version, str) or not DRIVER_VERSION_PATTERN.match(driver_version):
        errors.append("gpuops_driver_version %r is not a driver version such as 595.91.07" % (driver_version,))
    if not isinstance(cluster_name, str) or not NODE_NAME_PATTERN.match(cluster_name or ""):
        errors.append("gpuops_cluster_name %r must be set to the cluster's name (lower-case letters, digits, "
                      "'-' and '.')" % (cluster_name,))
    targets = list(targets or [])
    if not targets:
        errors.append("no target nodes: the group gpu_nodes is empty or every host was filtered out")
    bad_names = [name for name in targets if not isinstance(name, str) or not NODE_NAME_PATTERN.match(name)
                 or len(name) > 253]
    if bad_names:
        errors.append("node names that are not Kubernetes node names (RFC 1123): %s" % ", ".join(
            repr(name) for name in bad_names))
    duplicates = sorted(set(name for name in targets if targets.count(name) > 1))
    if duplicates:
        errors.append("nodes listed twice: %s" % ", ".join(duplicates))
    if known_nodes is not None:
        unknown = [name for name in targets if name not in set(known_nodes) and name not in bad_names]
        if unknown:
            errors.append("nodes the cluster does not have: %s" % ", ".join(unknown))
    if not isinstance(batches, list) or not batches:
        errors.append("gpuops_upgrade_batches must be a non-empty list of counts or percentages, e.g. "
                      "[1, '25%%'], not %r" % (batches,))
    else:
        bad_batches = [entry for entry in batches if not is_count(entry) or scale_count(entry, 100, True) == 0]
        if bad_batches:
            errors.append("gpuops_upgrade_batches entries must be counts >= 1 or percentages such as '25%%': %s"
                          % ", ".join(repr(entry) for entry in bad_batches))
    if canary_nodes:
        if not isinstance(canary_nodes, list):
            errors.append("gpuops_canary_nodes must be a list of node names, not %r" % (canary_nodes,))
        else:
            strangers = [name for name in canary_nodes if name not in targets]
            if strangers:
                errors.append("gpuops_canary_nodes are not among the target nodes: %s" % ", ".join(
                    str(name) for name in strangers))
    if not is_count(max_unavailable) or scale_count(max_unavailable, 100, True) == 0:
        errors.append("gpuops_max_unavailable must be a count >= 1 or a percentage, not %r" % (max_unavailable,))
    if isinstance(max_fail_percentage, bool) or not isinstance(max_fail_percentage, (int, float)) \
            or not 0 <= max_fail_percentage <= 100:
        errors.append("gpuops_max_fail_percentage must be a number from 0 to 100, not %r" % (max_fail_percentage,))
    errors.extend(_soak_errors(soak_seconds))
    if maintenance_window:
        errors.extend(maintenance_window_errors(maintenance_window))
    if spread_label is not None and (not isinstance(spread_label, str) or not spread_label.strip()):
        errors.append("gpuops_batch_spread_label must be a node label name, not %r" % (spread_label,))
    return errors


def _soak_errors(soak_seconds) -> list:
    values = soak_seconds.values() if isinstance(soak_seconds, dict) else [soak_seconds]
    if isinstance(soak_seconds, dict) and set(soak_seconds) - {"canary", "batch"}:
        return ["gpuops_soak_seconds takes the keys canary and batch, not %s" % ", ".join(
            sorted(set(soak_seconds) - {"canary", "batch"}))]
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            return ["gpuops_soak_seconds must be seconds >= 0 (or {canary: S, batch: S}), not %r" % (soak_seconds,)]
    return []


# --------------------------------------------------------------------------- batches

def plan_batches(targets, batches, canary_nodes=None, domain_of=None) -> list:
    """The rollout as a list of batches (lists of node names): the canary first, then the remaining targets in
    inventory order, each later batch sized by the next entry of ``batches`` (the last entry repeats; a
    percentage of all targets, rounded up).

    ``canary_nodes``: the first batch; default the first ``batches[0]`` targets.
    ``domain_of``: node -> failure domain (rack, NVLink domain). A batch then takes at most one node per domain,
    unless a single domain is all that is left to do.
    """
    targets = list(targets)
    total = len(targets)
    if not total:
        return []
    canary_size = max(1, scale_count(batches[0], total, round_up=True))
    canary = list(canary_nodes) if canary_nodes else _take(targets, canary_size, domain_of)
    remaining = [name for name in targets if name not in canary]
    planned = [canary]
    index = 1
    while remaining:
        entry = batches[min(index, len(batches) - 1)]
        size = max(1, scale_count(entry, total, round_up=True))
        batch = _take(remaining, size, domain_of)
        planned.append(batch)
        remaining = [name for name in remaining if name not in batch]
        index += 1
    return planned


def _take(pool, size, domain_of) -> list:
    if not domain_of:
        return list(pool[:size])
    domains_left = set(domain_of.get(name) for name in pool)
    taken, taken_domains = [], set()
    for name in pool:
        if len(taken) == size:
            break
        domain = domain_of.get(name)
        if domain in taken_domains and len(domains_left) > 1:
            continue
        taken.append(name)
        taken_domains.add(domain)
    return taken


# --------------------------------------------------------------------------- the cluster's state of a node

def node_is_ready(node: dict) -> bool:
    for condition in node.get("status", {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def node_is_cordoned(node: dict) -> bool:
    return bool(node.get("spec", {}).get("unschedulable"))


def unavailable_nodes(nodes) -> dict:
    """name -> why, for the nodes (Node JSON) that are out: cordoned or NotReady, whoever did it."""
    out = {}
    for node in nodes:
        reasons = []
        if node_is_cordoned(node):
            reasons.append("cordoned")
        if not node_is_ready(node):
            reasons.append("NotReady")
        if reasons:
            out[node["metadata"]["name"]] = " and ".join(reasons)
    return out


def other_upgraders(nodes, targets, kured_daemonsets=(), ours=()) -> list:
    """Blockers: another upgrader active on the targets. The GPU Operator's upgrade state label other than idle
    on a target node (unless ``ours``: a roll-out of this collection started it, a resume), and a kured lock
    (DaemonSet annotation) held by a target node."""
    targets = set(targets)
    found = []
    for node in nodes:
        name = node["metadata"]["name"]
        state = (node["metadata"].get("labels") or {}).get(OPERATOR_STATE_LABEL, "")
        if name in targets and state not in OPERATOR_IDLE_STATES and name not in ours:
            found.append({"node": name, "reason": "the GPU Operator's driver upgrade is in progress (%s=%s)"
                          % (OPERATOR_STATE_LABEL, state)})
    for daemonset in kured_daemonsets:
        for holder in _kured_holders(json_annotation(daemonset, KURED_LOCK_ANNOTATION)):
            if holder in targets:
                found.append({"node": holder, "reason": "kured holds its reboot lock for this node (%s/%s)"
                              % (daemonset["metadata"].get("namespace", ""), daemonset["metadata"]["name"])})
    return found


def _kured_holders(value) -> list:
    """Node names holding a kured lock: single-holder JSON {"nodeID": ...} or multi-lock {"locks": [...]}."""
    if not value:
        return []
    records = value.get("locks") if isinstance(value.get("locks"), list) else [value]
    return [record.get("nodeID") for record in records if isinstance(record, dict) and record.get("nodeID")]


# --------------------------------------------------------------------------- maintenance window

def maintenance_window_errors(window) -> list:
    if not isinstance(window, dict):
        return ["gpuops_maintenance_window must be a mapping {days, start, end, timezone}, not %r" % (window,)]
    errors = []
    unknown = set(window) - {"days", "start", "end", "timezone"}
    if unknown:
        errors.append("gpuops_maintenance_window has unknown keys: %s" % ", ".join(sorted(unknown)))
    days = window.get("days", list(WEEKDAYS))
    if not isinstance(days, list) or not days or any(str(day).lower()[:3] not in WEEKDAYS for day in days):
        errors.append("gpuops_maintenance_window.days must list weekdays (mon..sun), not %r" % (days,))
    for key in ("start", "end"):
        if not CLOCK_PATTERN.match(str(window.get(key, ""))):
            errors.append("gpuops_maintenance_window.%s must be HH:MM (24 h), not %r" % (key, window.get(key)))
    zone = window.get("timezone", "UTC")
    try:
        _zone(zone)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        errors.append("gpuops_maintenance_window.timezone %r is not a known time zone" % (zone,))
    return errors


def _zone(name):
    if name in ("UTC", "Etc/UTC", None):
        return datetime.timezone.utc
    return ZoneInfo(name)


def in_maintenance_window(window, now_utc: datetime.datetime) -> bool:
    """Whether ``now_utc`` (aware) falls in the window. A window whose end is before its start runs over
    midnight and belongs to the day it starts on. No window: always open."""
    if not window:
        return True
    local = now_utc.astimezone(_zone(window.get("timezone", "UTC")))
    days = [str(day).lower()[:3] for day in window.get("days", list(WEEKDAYS))]
    start = _minutes(window["start"])
    end = _minutes(window["end"])
    minute = local.hour * 60 + local.minute
    today = WEEKDAYS[local.weekday()]
    yesterday = WEEKDAYS[(local.weekday() - 1) % 7]
    if start < end:
        return today in days and start <= minute < end
    if start == end:
        return today in days
    return (today in days and minute >= start) or (yesterday in days and minute < end)


def _minutes(clock: str) -> int:
    hours, minutes = clock.split(":")
    return int(hours) * 60 + int(minutes)


# --------------------------------------------------------------------------- the per-node record and resume

def parse_record(node: dict):
    """The node's ``gpuops.nvidia/driver-upgrade`` record as a dict, None when absent or unreadable."""
    record = json_annotation(node, RECORD_ANNOTATION)
    return record if record is not None and record.get("state") in RECORD_STATES else None


def dump_record(record: dict) -> str:
    """The annotation value of a record: compact JSON with sorted keys (stable across runs, readable with
    kubectl)."""
    if record.get("state") not in RECORD_STATES:
        raise ValueError("record state must be one of %s, not %r" % (", ".join(RECORD_STATES), record.get("state")))
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def resume_action(record, target_version, loaded_version=None, boot_id=None, retry_failed=False) -> str:
    """What a run does with a node, from its record and what the node shows now:

    - ``skip``: already at the target (done, or loaded and no unfinished record);
    - ``start``: nothing recorded for this target;
    - ``continue``: stopped before the reboot: drain/install again (both idempotent), then reboot;
    - ``verify``: the reboot happened (boot ID changed) or was verified half-way: verify, never reboot again;
    - ``reboot``: recorded as rebooting but the boot ID is unchanged: the reboot never happened;
    - ``failed``: a previous run failed this node; an operator must look (or roll back) first. With
      ``retry_failed`` (GPU Operator mode: nothing on the host was changed, the driver pod is retried) the node is
      ``continue``d instead.
    """
    if not record or record.get("to") != target_version:
        return "skip" if loaded_version == target_version else "start"
    state = record.get("state")
    if state == STATE_DONE:
        return "skip" if loaded_version in (None, target_version) else "start"
    if state in STATES_BEFORE_REBOOT:
        return "continue"
    if state == STATE_REBOOTING:
        rebooted = boot_id is not None and boot_id != record.get("boot_id_before")
        return "verify" if rebooted else "reboot"
    if state == STATE_VERIFYING:
        return "verify"
    return "continue" if retry_failed else "failed"


# --------------------------------------------------------------------------- the plan

def build_plan(targets, nodes, target_version, batches, canary_nodes=None, max_unavailable=1,
               loaded_versions=None, spread_label=None, kured_daemonsets=(), operator_ours=None) -> dict:
    """The dry run's plan from the cluster's Node JSON: batches (canary first) of the nodes still to do, each
    node's current -> target version and resume action, and what blocks.

    ``loaded_versions``: node -> the driver version loaded now (from facts; else the GFD label is read).
    ``operator_ours``: GPU Operator mode: the nodes whose Operator upgrade a roll-out of ours started (not another
    upgrader); a node a previous run failed is retried there.
    """
    retry_failed = operator_ours is not None
    operator_ours = set(operator_ours or ())
    by_name = {node["metadata"]["name"]: node for node in nodes}
    loaded_versions = dict(loaded_versions or {})
    per_node, skipped, blockers = {}, [], []
    out = unavailable_nodes(by_name[name] for name in targets if name in by_name)
    for name in targets:
        node = by_name.get(name, {"metadata": {"name": name}})
        current = loaded_versions.get(name) or gfd_driver_version(node)
        record = parse_record(node)
        action = resume_action(record, target_version, current, retry_failed=retry_failed)
        per_node[name] = {"current_version": current, "action": action, "record": record}
        if action == "skip":
            skipped.append({"node": name, "reason": "already at %s" % target_version})
        elif action == "failed":
            blockers.append({"node": name, "reason": "a previous run failed this node: %s"
                             % (record.get("reason") or "no reason recorded")})
        elif name in out and action == "start":
            # a node mid-way (continue, reboot, verify) is out because of our own interrupted run
            blockers.append({"node": name, "reason": "already %s (not by this roll-out)" % out[name]})
    blockers.extend(other_upgraders(nodes, targets, kured_daemonsets, operator_ours))
    to_do = [name for name in targets if per_node[name]["action"] != "skip"]
    canary = [name for name in (canary_nodes or []) if name in to_do] or None
    domain_of = None
    if spread_label:
        domain_of = {name: (by_name.get(name, {}).get("metadata", {}).get("labels") or {}).get(spread_label)
                     for name in to_do}
    planned = plan_batches(to_do, batches, canary, domain_of) if to_do else []
    gpu_nodes = [node for node in nodes if is_gpu_node(node)]
    if not gpu_nodes:   # a cluster whose GPU nodes advertise nothing yet: the targets are its GPU nodes
        gpu_nodes = [by_name[name] for name in targets if name in by_name]
    return {
        "target_version": target_version,
        "batches": [{"index": index + 1, "kind": "canary" if index == 0 else "batch", "nodes": batch}
                    for index, batch in enumerate(planned)],
        "nodes": per_node,
        "skipped": skipped,
        "blockers": blockers,
        "max_unavailable": max_unavailable_nodes(max_unavailable, len(gpu_nodes)),
        "unavailable_now": unavailable_nodes(gpu_nodes),
    }


GFD_DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"
GPU_RESOURCE = "nvidia.com/gpu"


def gfd_driver_version(node: dict):
    return (node.get("metadata", {}).get("labels") or {}).get(GFD_DRIVER_LABEL)


def is_gpu_node(node: dict) -> bool:
    """A node that offers GPUs: an nvidia.com/gpu (or MIG) capacity, or GPU Feature Discovery's present label."""
    capacity = node.get("status", {}).get("capacity") or {}
    if any(key == GPU_RESOURCE or key.startswith("nvidia.com/mig-") for key in capacity):
        return True
    return (node.get("metadata", {}).get("labels") or {}).get("nvidia.com/gpu.present") == "true"


# --------------------------------------------------------------------------- the gate before each batch

PAUSE_ANNOTATION = "gpuops.nvidia/pause"


def pause_of(lease):
    """``(who, why)`` when the roll-out is paused: the lock Lease carries ``gpuops.nvidia/pause: "WHO: WHY"``
    (set from anywhere with ``kubectl annotate lease``); None when not paused."""
    value = ((lease or {}).get("metadata", {}).get("annotations") or {}).get(PAUSE_ANNOTATION)
    if not value:
        return None
    who, _colon, why = value.partition(":")
    return (who.strip() or "someone", why.strip() or "no reason given") if _colon else ("someone", value.strip())


def batch_gate(nodes, batch, max_unavailable, window=None, now_utc=None, lease=None) -> dict:
    """May this batch start now? Every reason it may not, from the cluster's Node JSON, the lock Lease and the
    clock. The batch's own nodes that are already out (an interrupted run) are not counted twice."""
    gpu_nodes = [node for node in nodes if is_gpu_node(node)]
    budget = max_unavailable_nodes(max_unavailable, len(gpu_nodes))
    out = unavailable_nodes(gpu_nodes)
    would_be_out = sorted(set(out) | set(batch))
    reasons = []
    paused = pause_of(lease)
    if paused:
        reasons.append("paused by %s: %s (remove the %s annotation of the lock Lease to resume)"
                       % (paused[0], paused[1], PAUSE_ANNOTATION))
    if window and now_utc is not None and not in_maintenance_window(window, now_utc):
        reasons.append("outside the maintenance window %s-%s %s on %s" % (
            window["start"], window["end"], window.get("timezone", "UTC"), ",".join(window.get("days", WEEKDAYS))))
    if len(would_be_out) > budget:
        others = ", ".join("%s (%s)" % (name, why) for name, why in sorted(out.items()) if name not in batch)
        reasons.append("budget spent: %d GPU node(s) would be out, max_unavailable allows %d%s" % (
            len(would_be_out), budget, "; out now: " + others if others else ""))
    return {"ok": not reasons, "reasons": reasons, "max_unavailable": budget, "out_now": out,
            "paused": {"by": paused[0], "reason": paused[1]} if paused else None}


# --------------------------------------------------------------------------- what the drains will meet

def drain_preview(node_names, pods, pdbs, delete_emptydir_data=False) -> dict:
    """A drain dry run of every node to do, from one list of pods and PDBs: the pods a drain would refuse (a
    blocker: the runbook never forces) and the disruption budgets that would hold evictions back now (a warning:
    the drain waits for them up to its timeout, then fails the node)."""
    on_node = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node in node_names:
            on_node.setdefault(node, []).append(pod)
    blockers, waits = [], []
    for name in node_names:
        plan = classify_pods(on_node.get(name, []), ignore_daemonsets=True,
                             delete_emptydir_data=delete_emptydir_data, force=False)
        for refused in plan["refused"]:
            reason = "a drain would refuse pod %s: %s" % (refused["pod"], refused["reason"])
            blockers.append({"node": name, "reason": reason})
        for pdb in budget_report(plan["evict"], pdbs)["pdbs"]:
            if pdb["would_block"]:
                waits.append({"node": name, "pdb": "%s/%s" % (pdb["namespace"], pdb["name"]),
                              "disruptions_allowed": pdb["disruptions_allowed"], "pods": pdb["pods"]})
    return {"blockers": blockers, "pdb_waits": waits}
