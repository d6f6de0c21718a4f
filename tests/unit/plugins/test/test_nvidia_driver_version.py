# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The one driver-version rule, as the nvidia_driver_version test plugin and gpu_support.is_driver_version."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.gpu_support import is_driver_version
from ansible_collections.gpuops.nvidia.plugins.test.nvidia_driver_version import nvidia_driver_version


@pytest.mark.parametrize("value", ["615.71.09", "595.91.07", "470.74", "1000.1.1", "100.0", "580.95.5"])
def test_full_driver_versions_pass(value):
    assert is_driver_version(value)
    assert nvidia_driver_version(value)


@pytest.mark.parametrize("value", [
    "615", "615.", ".71.09", "015.71.09", "61.71.09", "10000.1.1", "615.1234.09", "615.71.09.1", "v615.71.09",
    "615.71.09-1", " 615.71.09", "615.71.09 ", "615.71.09\n", "615.71.09; reboot", "６15.71.09", "615.７1.09",
    "{{ version }}", "", None, 615, 470.74, ["615.71.09"], {"version": "615.71.09"}, True,
])
def test_anything_else_is_not_a_driver_version(value):
    assert not is_driver_version(value)
    assert not nvidia_driver_version(value)
