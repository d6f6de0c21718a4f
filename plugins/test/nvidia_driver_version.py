# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: nvidia_driver_version
short_description: Whether a value is an NVIDIA driver version
version_added: 0.1.0
description:
  - True for a string that is a full NVIDIA driver version, C(branch.minor[.patch]) with a branch from 100 to 9999
    and no leading zero (V(615.71.09), V(470.74)), and nothing else - no whitespace, ASCII digits only.
  - The collection's one rule for a driver version, the same the modules apply; the roles and runbooks refuse a
    malformed version with it before anything changes.
  - A number is not a version, since C(470.74) read as a float loses its form; pass a value that may be one
    through the C(string) filter first.
author: gpuops.nvidia contributors (@gpuops)
options:
  _input:
    description: The value to test.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Refuse a malformed driver version before anything changes
  ansible.builtin.assert:
    that: gpuops_driver_version | string is gpuops.nvidia.nvidia_driver_version
    fail_msg: "gpuops_driver_version must be a driver version such as 615.71.09"
"""

RETURN = r"""
_value:
  description: Whether the input is a driver version.
  type: bool
"""

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.gpu_support import is_driver_version


def nvidia_driver_version(value):
    return is_driver_version(value)


class TestModule:
    def tests(self):
        return {"nvidia_driver_version": nvidia_driver_version}
