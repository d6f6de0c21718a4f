# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The change kind mig_layout in the kinds table (rollout/change_kinds.py): a node the MIG Manager has given the
layout already is skipped; nothing else shows a layout in the Node."""

from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout.change_kinds import kind_of


def node(labels):
    return {"metadata": {"name": "gpu-node-01", "labels": labels}}


def test_a_node_the_mig_manager_gave_the_layout_is_at_target():
    at_target = kind_of("mig_layout").node_at_target
    applied = node({"nvidia.com/mig.config": "all-3g.40gb", "nvidia.com/mig.config.state": "success"})
    assert at_target(applied, {"mode": "auto", "config": "all-3g.40gb"})
    assert at_target(applied, {"mode": "mig_manager", "config": "all-3g.40gb"})
    assert not at_target(applied, {"mode": "auto", "config": "all-1g.10gb"})


def test_a_pending_or_failed_layout_or_the_nvidia_smi_mode_is_not():
    at_target = kind_of("mig_layout").node_at_target
    for state in ("pending", "failed"):
        labels = {"nvidia.com/mig.config": "all-3g.40gb", "nvidia.com/mig.config.state": state}
        assert not at_target(node(labels), {"mode": "auto", "config": "all-3g.40gb"})
    applied = node({"nvidia.com/mig.config": "all-3g.40gb", "nvidia.com/mig.config.state": "success"})
    assert not at_target(applied, {"mode": "nvidia_smi", "config": "all-3g.40gb", "layout": []})
    assert not at_target(node({}), {"mode": "auto", "layout": [{"profiles": ["3g.40gb"]}]})
    assert kind_of("mig_layout").disruption == "drain" and kind_of("mig_layout").rollback
