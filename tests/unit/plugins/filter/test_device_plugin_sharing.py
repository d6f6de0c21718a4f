# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests for the device_plugin_sharing filter (the config given as the ConfigMap holds it: YAML text)."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.nvidia.plugins.filter.device_plugin_sharing import device_plugin_sharing

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "device_plugin_config")


def test_the_configmap_text_gives_what_a_node_of_eight_gpus_must_show():
    with open(os.path.join(FIXTURES, "time-slicing-config-all.yaml")) as stream:
        text = yaml.safe_load(stream)["data"]["any"]
    sharing = device_plugin_sharing(text, gpu_count=8)
    assert sharing["expected"]["count"] == 32 and sharing["expected"]["resource"] == "nvidia.com/gpu"
    assert "expected" not in device_plugin_sharing(text)


@pytest.mark.parametrize("text", ["sharing: [", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                                  "    - name: nvidia.com/gpu\n      replicas: -1\n"])
def test_a_config_that_is_not_yaml_or_that_the_plugin_refuses_fails(text):
    with pytest.raises(AnsibleFilterError):
        device_plugin_sharing(text)
