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
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.selectors import LABEL_KEY_PATTERN, parse_label_selector
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.gpu_support import is_driver_version

RECORD_ANNOTATION = "gpuops.nvidia/driver-upgrade"
OPERATOR_STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
OPERATOR_IDLE_STATES = ("", "upgrade-done")
KURED_LOCK_ANNOTATION = "weave.works/kured-node-lock"

# A Kubernetes node name is an RFC 1123 DNS subdomain; anything else (shell metacharacters included) is refused.
NODE_NAME_PATTERN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
PERCENT_PATTERN = re.compile(r"([0-9]{1,3})%")
COUNT_PATTERN = re.compile(r"[0-9]{1,9}")
CLOCK_PATTERN = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")
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
# Record states during which the node is in maintenance: excluded from remediation, its silences held.
MAINTENANCE_STATES = STATES_BEFORE_REBOOT + (STATE_REBOOTING, STATE_VERIFYING)


# --------------------------------------------------------------------------- counts and percentages

def is_count(value) -> bool:
    """A non-negative integer or a ``N%`` string with N in 0..100 (booleans are not counts)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    if isinstance(value, str):
        match = PERCENT_PATTERN.fullmatch(value.strip())
        if match:
            return int(match.group(1)) <= 100
        # str.isdigit() is true for '²' and '２', which int() then refuses or reads: ASCII digits only
        return COUNT_PATTERN.fullmatch(value.strip()) is not None
    return False


def scale_count(value, total: int, round_up: bool) -> int:
    """``value`` (count or percentage, see is_count) as a number of nodes out of ``total``."""
    if not is_count(value):
        raise ValueError("%r is neither a count nor a percentage" % (value,))
    text = str(value).strip()
    match = PERCENT_PATTERN.fullmatch(text)
    if not match:
        return int(text)
    exact = int(match.group(1)) * total / 100.0
    return int(math.ceil(exact)) if round_up else int(math.floor(exact))


def max_unavailable_nodes(value, gpu_node_count: int) -> int:
    """The budget: how many GPU nodes may be out at once. A percentage rounds down, but never below 1, so a
    small cluster can still be upgraded one node at a time."""
    return max(1, scale_count(value, gpu_node_count, round_up=False))


# --------------------------------------------------------------------------- validation

# The longest wait any timeout may ask for (a week): a larger one is a typo, and ansible's int would take it.
MAX_SECONDS = 7 * 24 * 3600
# Seconds options: name -> the smallest value allowed (0: the step may be skipped).
SECONDS_OPTIONS = {"drain_timeout": 1, "reboot_timeout": 1, "ready_timeout": 1, "wait_for_pods_timeout": 1,
                   "budget_wait_timeout": 0, "lock_ttl": 1, "silence_seconds": 1}
URL_PATTERN = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[-A-Za-z0-9._~/%]*)?", re.ASCII)
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.]{0,62}", re.ASCII)
REQUIRED_OPTIONS = ("driver_version", "cluster_name", "nodes", "batches")
HOOK_PATTERN = re.compile(r"[^{}%#\x00-\x1f]+\.ya?ml")


def validate_inputs(options, required=REQUIRED_OPTIONS) -> list:
    """Every reason the inputs cannot be planned, [] when they can: ``{"option": name, "message": why}`` in a fixed
    order, each message with the value and what would do. ``options``: the driver_upgrade_plan module's options
    by name (those absent or None are not checked, but for the required ones). Needs no cluster; never raises, whatever the values."""
    errors = []
    for option, check in _CHECKS:
        if option in required or options.get(option) is not None:
            errors.extend({"option": option, "message": message} for message in check(options[option], options))
    return errors


def unknown_node_errors(targets, known_nodes) -> list:
    """validate_inputs' errors for the targets the cluster does not have (``known_nodes``: its node names)."""
    known = set(known_nodes)
    unknown = [name for name in targets or [] if _is_node_name(name) and name not in known]
    return [{"option": "nodes", "message": "the cluster has no node %s" % ", ".join(unknown)}] if unknown else []


def error_lines(errors) -> list:
    """validate_inputs' errors as ``option: message`` lines."""
    return ["%s: %s" % (error["option"], error["message"]) for error in errors]


def refuse_invalid(module, errors) -> None:
    """Fail the planning module, naming every bad option (``errors``: validate_inputs'), when there are any; the
    runbook maps ``invalid`` to its own variables."""
    if errors:
        lines = error_lines(errors)
        module.fail_json(msg="refused before anything was touched: " + "; ".join(lines), errors=lines, invalid=errors)


def _is_node_name(name) -> bool:
    return isinstance(name, str) and len(name) <= 253 and NODE_NAME_PATTERN.fullmatch(name) is not None


def _driver_version_errors(value, _options):
    if is_driver_version(value):
        return []
    return ["%r is not a driver version such as 595.91.07 (branch.minor.patch, digits 0-9)" % (value,)]


def _cluster_name_errors(value, _options):
    if _is_node_name(value):
        return []
    return ["%r must be the cluster's name (lower-case letters, digits, '-' and '.')" % (value,)]


def _nodes_errors(value, _options):
    if not isinstance(value, list) or not value:
        return ["no target nodes: the list is empty (is the inventory group empty, or every host filtered out?)"]
    errors = []
    bad_names = [name for name in value if not _is_node_name(name)]
    if bad_names:
        errors.append("names that are not Kubernetes node names (RFC 1123): %s" % ", ".join(
            repr(name) for name in bad_names))
    duplicates = sorted(set(name for name in value if _is_node_name(name) and value.count(name) > 1))
    if duplicates:
        errors.append("listed twice: %s" % ", ".join(duplicates))
    return errors


def _batches_errors(value, _options):
    if not isinstance(value, list) or not value:
        return ["must be a non-empty list of counts or percentages, e.g. [1, '25%%'], not %r" % (value,)]
    bad = [entry for entry in value if not is_count(entry) or scale_count(entry, 100, True) == 0]
    if bad:
        return ["entries must be counts >= 1 or percentages such as '25%%' (digits 0-9): %s" % ", ".join(
            repr(entry) for entry in bad)]
    return []


def _canary_nodes_errors(value, options):
    if value in (None, []):
        return []
    if not isinstance(value, list):
        return ["must be a list of node names, not %r" % (value,)]
    targets = options.get("nodes") if isinstance(options.get("nodes"), list) else []
    strangers = [name for name in value if name not in targets]
    if strangers:
        return ["not among the target nodes: %s" % ", ".join(str(name) for name in strangers)]
    return []


def _max_unavailable_errors(value, _options):
    if is_count(value) and scale_count(value, 100, True) > 0:
        return []
    return ["must be a count >= 1 or a percentage such as '25%%' (digits 0-9), not %r" % (value,)]


def _max_fail_percentage_errors(value, _options):
    number = _number(value)
    if number is not None and 0 <= number <= 100:
        return []
    return ["must be a number from 0 to 100, not %r" % (value,)]


def _soak_seconds_errors(value, _options):
    if isinstance(value, dict):
        unknown = sorted(str(key) for key in value if key not in ("canary", "batch"))
        if unknown:
            return ["takes the keys canary and batch, not %s" % ", ".join(unknown)]
        values = list(value.values())
    else:
        values = [value]
    for one in values:
        number = _number(one)
        if number is None or not 0 <= number <= MAX_SECONDS:
            return ["must be seconds from 0 to %d (or {canary: S, batch: S}), not %r" % (MAX_SECONDS, value)]
    return []


def _window_errors(value, _options):
    return maintenance_window_errors(value) if value else []


def _spread_label_errors(value, _options):
    if value is None:
        return []
    if isinstance(value, str) and LABEL_KEY_PATTERN.fullmatch(value):
        return []
    return ["must be a node label name such as topology.kubernetes.io/zone, not %r" % (value,)]


def _selector_errors(value, _options):
    if value in (None, ""):
        return []
    try:
        parse_label_selector(value)
    except ValueError as error:
        return ["not a label selector: %s" % (error,)]
    return []


def _seconds_errors(option):
    minimum = SECONDS_OPTIONS[option]

    def check(value, _options):
        if value is None:
            return []
        number = _whole_number(value)
        if number is None or not minimum <= number <= MAX_SECONDS:
            return ["must be whole seconds from %d to %d (digits 0-9), not %r" % (minimum, MAX_SECONDS, value)]
        return []
    return check


def _url_errors(value, _options):
    if value in (None, "") or (isinstance(value, str) and URL_PATTERN.fullmatch(value)):
        return []
    return ["%r is not an http(s) URL such as http://prometheus.monitoring:9090" % (value,)]


def _hooks_errors(value, _options):
    if value in (None, []):
        return []
    if not isinstance(value, list):
        return ["must be a list of task files, not %r" % (value,)]
    bad = [hook for hook in value if not isinstance(hook, str) or not HOOK_PATTERN.fullmatch(hook)]
    if bad:
        return ["entries must be paths of task files ending in .yml or .yaml (no templating): %s" % ", ".join(
            repr(hook) for hook in bad)]
    return []


def _lock_name_errors(value, _options):
    if value is None or (_is_node_name(value) and len(value) <= 63):
        return []
    return ["%r is not a Lease name (lower-case letters, digits, '-' and '.', at most 63)" % (value,)]


def _run_id_errors(value, _options):
    if value is None or (isinstance(value, str) and RUN_ID_PATTERN.fullmatch(value)):
        return []
    return ["%r must be letters, digits, '-', '_' and '.' (at most 63), such as 20260101T000000Z-1a2b" % (value,)]


def _number(value):
    """An int or float (not a bool, not NaN), or a string of ASCII digits with one optional dot; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return None if isinstance(value, float) and math.isnan(value) else value
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,12}(\.[0-9]{1,6})?", value.strip(), re.ASCII):
        return float(value)
    return None


def _whole_number(value):
    """An int (not a bool) or a string of ASCII digits; else None (int() would take '２5' and ' 25 ')."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,12}", value, re.ASCII):
        return int(value)
    return None


_CHECKS = (
    ("driver_version", _driver_version_errors),
    ("cluster_name", _cluster_name_errors),
    ("nodes", _nodes_errors),
    ("batches", _batches_errors),
    ("canary_nodes", _canary_nodes_errors),
    ("max_unavailable", _max_unavailable_errors),
    ("max_fail_percentage", _max_fail_percentage_errors),
    ("soak_seconds", _soak_seconds_errors),
    ("maintenance_window", _window_errors),
    ("spread_label", _spread_label_errors),
    ("wait_for_pods_selector", _selector_errors),
    ("validator_pod_selector", _selector_errors),
    ("prometheus_url", _url_errors),
    ("alertmanager_url", _url_errors),
    ("pre_node_tasks", _hooks_errors),
    ("post_node_tasks", _hooks_errors),
    ("lock_name", _lock_name_errors),
    ("run_id", _run_id_errors),
) + tuple((option, _seconds_errors(option)) for option in SECONDS_OPTIONS)


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
    """What is wrong with a maintenance window, each message naming its key ([] when it is fine)."""
    if not isinstance(window, dict):
        return ["must be a mapping {days, start, end, timezone}, such as {days: [sat, sun], start: '22:00', "
                "end: '04:00'}, not %r" % (window,)]
    errors = []
    unknown = sorted(str(key) for key in window if key not in ("days", "start", "end", "timezone"))
    if unknown:
        errors.append("unknown keys: %s (it takes days, start, end, timezone)" % ", ".join(unknown))
    days = window.get("days", list(WEEKDAYS))
    if not isinstance(days, list) or not days or any(str(day).lower()[:3] not in WEEKDAYS for day in days):
        errors.append("days must list weekdays (mon..sun), not %r" % (days,))
    for key in ("start", "end"):
        if not CLOCK_PATTERN.fullmatch(str(window.get(key, ""))):
            errors.append("%s must be HH:MM (24 h, digits 0-9), not %r" % (key, window.get(key)))
    zone = window.get("timezone", "UTC")
    try:
        _zone(zone)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        errors.append("timezone %r is not a known time zone such as Europe/Berlin" % (zone,))
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


def dump_record(record: dict, states=RECORD_STATES) -> str:
    """The annotation value of a record: compact JSON with sorted keys (stable across runs, readable with
    kubectl). ``states``: those the record may be in (the driver roll-out's by default)."""
    if record.get("state") not in states:
        raise ValueError("record state must be one of %s, not %r" % (", ".join(states), record.get("state")))
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

# resume actions of a node an interrupted run of ours left mid-way (cordoned, maybe drained or rebooted)
IN_FLIGHT_ACTIONS = ("continue", "reboot", "verify")


MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"


def mig_labels(node) -> dict:
    """The node's MIG strategy (GPU Feature Discovery's label) and the MIG Manager's config label, None when
    absent: the upgrade re-creates a MIG layout itself only where no MIG Manager owns it."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return {"strategy": labels.get(MIG_STRATEGY_LABEL), "config": labels.get(MIG_CONFIG_LABEL)}


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
        # the boot ID the kubelet reports tells a node rebooted since its record (verify, never reboot again) from
        # one whose reboot never happened
        boot_id = ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID")
        action = resume_action(record, target_version, current, boot_id, retry_failed=retry_failed)
        per_node[name] = {"current_version": current, "action": action, "record": record, "mig": mig_labels(node),
                          "mid_maintenance": isinstance(record, dict) and record.get("state") in MAINTENANCE_STATES}
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
    # Nodes an interrupted run left mid-way are out already: they go together, first, so a stop after the first
    # batch of the resume never leaves one of them cordoned half-done (chaos seed 130).
    in_flight = [name for name in to_do if per_node[name]["action"] in IN_FLIGHT_ACTIONS]
    if in_flight:
        canary = in_flight + [name for name in (canary or []) if name not in in_flight]
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


def batch_gate(nodes, batch, max_unavailable, window=None, now_utc=None, lease=None, count_budget=True) -> dict:
    """May this batch start now? Every reason it may not, from the cluster's Node JSON, the lock Lease and the
    clock. The batch's own nodes that are already out (an interrupted run) are not counted twice. Without
    ``count_budget`` (a change that keeps its nodes in service) the budget is not checked."""
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
    if count_budget and len(would_be_out) > budget:
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
