# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: mig_layout
short_description: A node's MIG layout and the extended resources it should give the cluster
version_added: 0.1.0
description:
  - Reads the MIG layout of a node from its GPUs as C(nvidia_driver_facts) returns them - the GPUs in MIG mode and
    the profiles of their MIG devices - and the extended resources the device plugin advertises for it with the
    node's MIG strategy (C(nvidia.com/mig-<profile>) per profile with V(mixed), MIG devices counted as
    C(nvidia.com/gpu) with V(single)).
  - With O(from_version) and O(to_version), also says whether the upgrade changes the driver branch (a major
    upgrade, V(550) to V(570)), after which the MIG instances must be re-created on a rebooted node.
author: gpuops.nvidia contributors (@gpuops)
options:
  _input:
    description: The node's GPUs as C(nvidia_driver_facts) returns them (C(gpus)).
    type: list
    elements: dict
    required: true
  strategy:
    description: The node's MIG strategy (its C(nvidia.com/mig.strategy) label), V(mixed) or V(single); anything
      else expects no resources.
    type: str
    default: ""
  from_version:
    description: The driver version before the upgrade.
    type: str
  to_version:
    description: The driver version of the upgrade.
    type: str
  recorded:
    description:
      - The layout kept in the node's upgrade record (C(mig_layout), as RV(_value.record) gave it before the
        upgrade). Used only when the GPUs have no MIG device now - a run resumed after the reboot, which dropped
        them - for the GPUs still in MIG mode (matched by UUID); without it the layout is the one read now.
    type: list
    elements: dict
"""

EXAMPLES = r"""
- name: The node's MIG layout before the upgrade
  ansible.builtin.set_fact:
    gpuops_mig_before: "{{ ansible_facts.nvidia_driver.gpus | gpuops.nvidia.mig_layout('mixed', '550.127.08', '570.86.15') }}"

- name: The layout to re-create on a resumed run, the record's when the reboot dropped the MIG devices
  ansible.builtin.set_fact:
    gpuops_mig_before: >-
      {{ ansible_facts.nvidia_driver.gpus | gpuops.nvidia.mig_layout('mixed', '550.127.08', '570.86.15',
         recorded=record.mig_layout | default([])) }}
  vars:
    record: "{{ node.metadata.annotations['gpuops.nvidia/driver-upgrade'] | from_json }}"
"""

RETURN = r"""
_value:
  description: The layout.
  type: dict
  contains:
    gpus:
      description: The GPUs in MIG mode (C(index), C(uuid), C(profiles)), empty when none is.
      type: list
      elements: dict
    instances:
      description: MIG devices of the layout.
      type: int
    resources:
      description: Extended resource name to the count the node should have allocatable (empty when nothing to
        check).
      type: dict
    create_argv:
      description: One C(nvidia-smi mig -i N -cgi PROFILES -C) argument list per GPU with MIG devices.
      type: list
      elements: list
    major_change:
      description: The driver branch changes (true when a version is not known); null without both versions.
      type: bool
    record:
      description: The layout as the node's upgrade record keeps it (C(mig_layout)) - the GPUs with MIG devices,
        each C(index), C(uuid), C(profiles).
      type: list
      elements: dict
    from_record:
      description: The layout is the record's (O(recorded)), the GPUs having no MIG device now.
      type: bool
"""

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.mig import (
    create_instances_argv,
    expected_resources,
    layout_to_recreate,
    major_change,
    mig_layout as layout_of,
    recorded_layout,
)


def mig_layout(gpus, strategy="", from_version=None, to_version=None, recorded=None):
    gpus = list(gpus or [])
    layout, from_record = layout_to_recreate(layout_of(gpus), recorded)
    return {
        "gpus": layout,
        "instances": sum(len(gpu["profiles"]) for gpu in layout),
        "resources": expected_resources(layout, strategy, len(gpus)),
        "create_argv": [argv for argv in (create_instances_argv(gpu) for gpu in layout) if argv],
        "major_change": major_change(from_version, to_version) if from_version is not None and to_version is not None else None,
        "record": recorded_layout(layout),
        "from_record": from_record,
    }


class FilterModule:
    def filters(self):
        return {"mig_layout": mig_layout}
