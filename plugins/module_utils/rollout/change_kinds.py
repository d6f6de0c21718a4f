# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The change kinds of the change engine (playbooks/change.yml), from the risk table of docs/operations.md: what each
one takes out of service while it runs, its default canary schedule, whether it can be rolled back, whether two
people must agree by default, and, where the Node object shows it, whether a node already has the change.

A kind's inputs, steps and checks live beside the runbook (playbooks/specs/change_kinds/, playbooks/tasks/
change_kinds/); this table is what the planner and the runner need to know of it.
"""

from __future__ import annotations

from collections import namedtuple

# none: the node stays in service; cordon: no new pods while it changes; drain: its pods are evicted first
DISRUPTIONS = ("none", "cordon", "drain")

ChangeKind = namedtuple("ChangeKind", "name impact disruption batches rollback two_person node_at_target")

DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"


def node_labels(node: dict) -> dict:
    return dict((node.get("metadata") or {}).get("labels") or {})


def labels_at_target(node: dict, inputs: dict) -> bool:
    """Every label of ``inputs['labels']`` has its value on the node (a null value: the label is absent)."""
    labels = node_labels(node)
    wanted = (inputs or {}).get("labels") or {}
    return all((key not in labels) if value is None else labels.get(key) == value for key, value in wanted.items())


def device_plugin_config_at_target(node: dict, inputs: dict) -> bool:
    """The node's device-plugin config label already names the config."""
    return node_labels(node).get(DEVICE_PLUGIN_CONFIG_LABEL) == (inputs or {}).get("config")


KINDS = dict((kind.name, kind) for kind in (
    ChangeKind("node_labels", "scheduling of one node", "none", (1, "100%"), True, True, labels_at_target),
    ChangeKind("device_plugin_config", "new allocations on the node", "none", (1, "25%"), True, False,
               device_plugin_config_at_target),
    ChangeKind("containerd_config", "all containers of the node", "cordon", (1, "25%"), True, False, None),
    ChangeKind("kubelet_config", "pod status sync", "drain", (1, "25%"), True, False, None),
    ChangeKind("mig_layout", "all work on that GPU", "drain", (1, "25%"), True, False, None),
    ChangeKind("gpu_operator_uninstall", "the cluster's GPU capability", "drain", (1, "100%"), False, True, None),
))


def kind_of(name: str) -> ChangeKind:
    """The change kind named ``name``; ValueError naming the kinds there are."""
    if name not in KINDS:
        raise ValueError("unknown change kind %r: one of %s" % (name, ", ".join(sorted(KINDS))))
    return KINDS[name]


def kind_summary(kind: ChangeKind) -> dict:
    """What the runbook and the plan show of a kind (JSON)."""
    return {"name": kind.name, "impact": kind.impact, "disruption": kind.disruption, "batches": list(kind.batches),
            "rollback": kind.rollback, "two_person": kind.two_person}
