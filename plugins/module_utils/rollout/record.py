# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The node annotations a driver roll-out sets, as one merge patch: its record (the resume point) and the
exclusions from auto-remediators during the maintenance, whose previous values are kept in the record so the
end of the maintenance restores them exactly.
"""

from __future__ import annotations

import datetime
from collections import namedtuple

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.meta import json_annotation
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout.plan import (
    MAINTENANCE_STATES, RECORD_ANNOTATION, RECORD_STATES, dump_record)

# Auto-remediators that would reboot or replace a node we are working on: medik8s (Node Healthcheck / Self Node
# Remediation) and Cluster API's MachineHealthCheck.
REMEDIATION_EXCLUSIONS = {
    "remediation.medik8s.io/exclude-from-remediation": "true",
    "cluster.x-k8s.io/skip-remediation": "",
}

# What kind of record: its annotation, the field naming what it is for (a record for another target starts over),
# its states, those in maintenance and those that end it. The driver roll-out's (`to`: the target version) and each
# change kind's (`change`: the change's id; rollout/change.py) are written the same way.
RecordKind = namedtuple("RecordKind", "annotation target_field states maintenance_states end_states")
DRIVER_RECORD = RecordKind(RECORD_ANNOTATION, "to", RECORD_STATES, MAINTENANCE_STATES, ("done", "rolled-back"))


def node_annotations(node: dict) -> dict:
    return dict((node.get("metadata") or {}).get("annotations") or {})


def current_record(node: dict, kind: RecordKind = DRIVER_RECORD):
    """The record as stored, whatever its state (None when absent or not JSON)."""
    return json_annotation(node, kind.annotation)


def record_patch(node: dict, fields: dict, exclude_from_remediation: bool = True, now: str = None,
                 kind: RecordKind = DRIVER_RECORD):
    """(merge patch of metadata.annotations, the new record) moving the node's record to ``fields['state']``.

    Fields not given are kept from the current record when it is for the same target (``kind.target_field``), so each step only
    says what changed. ``now`` (RFC 3339) is recorded in ``steps`` as the time the node entered the state (the
    first time: a repeated step keeps its first time), which the run record's durations come from.

    Entering maintenance saves the remediation annotations present before it (``saved_annotations``, null for
    absent) and sets the exclusions; leaving it as done or rolled-back restores them. A failed node stays
    excluded: it is cordoned and waits for a person.
    """
    state = fields.get("state")
    annotations = node_annotations(node)
    previous = current_record(node, kind) or {}
    target = kind.target_field
    record = dict(previous) if previous.get(target) == fields.get(target, previous.get(target)) else {}
    if state == "draining" and previous.get("state") == "failed":
        # a failed node retried starts over: the old reason and rollback no longer hold
        record.pop("reason", None)
        record.pop("rollback_to", None)
    record.update(dict((key, value) for key, value in fields.items() if value is not None))
    if now:
        record["steps"] = dict(record.get("steps") or {})
        record["steps"].setdefault(state, now)
    patch = {}
    if exclude_from_remediation and state in kind.maintenance_states:
        if "saved_annotations" not in record:
            record["saved_annotations"] = dict((key, annotations.get(key)) for key in REMEDIATION_EXCLUSIONS)
        for key, value in REMEDIATION_EXCLUSIONS.items():
            if annotations.get(key) != value:
                patch[key] = value
    elif state in kind.end_states and "saved_annotations" in record:
        for key, value in record.pop("saved_annotations").items():
            if annotations.get(key) != value:
                patch[key] = value      # None removes the annotation in a merge patch
    rendered = dump_record(record, kind.states)
    if annotations.get(kind.annotation) != rendered:
        patch[kind.annotation] = rendered
    return patch, record


def clear_patch(node: dict, kind: RecordKind = DRIVER_RECORD) -> dict:
    """The merge patch removing the record (and restoring saved remediation annotations)."""
    annotations = node_annotations(node)
    record = current_record(node, kind) or {}
    patch = {}
    for key, value in (record.get("saved_annotations") or {}).items():
        if annotations.get(key) != value:
            patch[key] = value
    if kind.annotation in annotations:
        patch[kind.annotation] = None
    return patch


CONFLICT_RETRIES = 3


class RecordWriteError(Exception):
    """The record could not be written (the API's answer, or a conflict that did not clear); ``error`` is the
    client's exception, ``action`` what was being done."""

    def __init__(self, error, action):
        super().__init__(action)
        self.error = error
        self.action = action


def record_time(now=None) -> str:
    """The RFC 3339 time (UTC, seconds) a record step carries."""
    return (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_record(nodes, name, fields, exclude_from_remediation=True, check_mode=False, is_conflict=None,
                 kind: RecordKind = DRIVER_RECORD):
    """Move node ``name``'s record to ``fields['state']`` (or remove it for ``absent``) with one merge patch that is
    conditional on the node's resourceVersion, re-read and retried on a conflict (``is_conflict(error)``).

    ``nodes`` reads and patches nodes as JSON (``_k8s_client.NodeApi``). Returns ``{changed, record, previous_record, annotations_before, patch,
    node}`` (``node`` as JSON after the step); raises RecordWriteError.
    """
    patch, after, node, before, annotations_before = {}, None, None, None, {}
    for attempt in range(CONFLICT_RETRIES):
        try:
            node = nodes.read_node(name)
        except Exception as error:
            raise RecordWriteError(error, "read node %s" % name)
        before = current_record(node, kind)
        annotations_before = node_annotations(node)
        if fields["state"] == "absent":
            patch, after = clear_patch(node, kind), None
        else:
            patch, after = record_patch(node, fields, exclude_from_remediation, record_time(), kind)
        if not patch or check_mode:
            break
        body = {"metadata": {"annotations": patch, "resourceVersion": node["metadata"].get("resourceVersion")}}
        try:
            node = nodes.patch_node(name, body)
            break
        except Exception as error:
            if not (is_conflict and is_conflict(error)) or attempt == CONFLICT_RETRIES - 1:
                raise RecordWriteError(error, "annotate node %s" % name)
    return {"changed": bool(patch), "record": after, "previous_record": before,
            "annotations_before": annotations_before, "patch": patch, "node": node}
