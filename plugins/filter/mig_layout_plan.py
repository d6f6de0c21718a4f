# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: mig_layout_plan
short_description: The nvidia-smi commands that give a node's GPUs a MIG layout, and what the cluster sees then
version_added: 0.1.0
description:
  - Takes a node's GPUs as C(nvidia_driver_facts) returns them and a MIG layout (mig-parted's entries with the
    profiles spelled out) and returns the C(nvidia-smi) commands that apply it - MIG mode per GPU (C(-mig 1|0)
    then a GPU reset C(-r)), then for a GPU whose MIG devices differ C(mig -dci), C(mig -dgi) and
    C(mig -cgi PROFILES -C) - and the extended resources the device plugin advertises afterwards with the node's
    MIG strategy.
  - A GPU already as the layout wants gets no command; GPUs no entry names are left as they are.
  - Used by the change kind C(mig_layout) of the C(gpuops.nvidia.change) runbook on hosts without the GPU
    Operator's MIG Manager.
author: gpuops.nvidia contributors (@gpuops)
options:
  _input:
    description: The node's GPUs as C(nvidia_driver_facts) returns them (C(gpus)).
    type: list
    elements: dict
    required: true
  layout:
    description:
      - The layout, a list of entries; a later entry naming a GPU replaces what an earlier one said.
      - Each entry has C(devices) (V(all), the default, or a list of GPU indexes), C(mig_enabled) (default
        V(true); V(false) turns MIG mode off) and C(profiles) (the MIG devices of each GPU it names, for example
        V([3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]); empty, MIG mode on and no instance).
    type: list
    elements: dict
    required: true
  strategy:
    description: The device plugin's MIG strategy on the node (its C(nvidia.com/mig.strategy) label), V(mixed) or
      V(single); anything else expects no resources.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Plan two 3g.40gb instances on every GPU
  ansible.builtin.set_fact:
    gpuops_mig_plan: >-
      {{ ansible_facts.nvidia_driver.gpus
         | gpuops.nvidia.mig_layout_plan([{'devices': 'all', 'profiles': ['3g.40gb', '3g.40gb']}], 'mixed') }}
"""

RETURN = r"""
_value:
  description: The plan.
  type: dict
  contains:
    steps:
      description: The commands in order, each C(gpu) (its index) and C(argv); empty when the GPUs show the layout
        already or the layout does not suit the node (RV(_value.errors)).
      type: list
      elements: dict
    after:
      description: Every GPU as the layout leaves it, each C(index), C(uuid), C(mig_enabled), C(profiles) (sorted).
      type: list
      elements: dict
    resources:
      description: Extended resource name to the count the node should have allocatable afterwards (empty for an
        unknown strategy).
      type: dict
    errors:
      description: Why the layout does not suit the node (a GPU it has not, a GPU without MIG, a layout the single
        strategy refuses); nothing may be run then.
      type: list
      elements: str
    mismatches:
      description: Each GPU the layout names whose MIG devices are not as wanted now.
      type: list
      elements: str
    previous:
      description: The node's layout now, as a layout (one entry per MIG-capable GPU) - what a rollback applies.
      type: list
      elements: dict
    at_target:
      description: The GPUs show the layout (no error, no mismatch).
      type: bool
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.mig_layout_change import plan_layout


def mig_layout_plan(gpus, layout, strategy=""):
    if not isinstance(gpus, list) or not isinstance(layout, list):
        raise AnsibleFilterError("mig_layout_plan takes the node's GPUs (a list) and a layout (a list of entries)")
    return plan_layout(gpus, layout, strategy or "")


class FilterModule:
    def filters(self):
        return {"mig_layout_plan": mig_layout_plan}
