# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.meta import json_annotation

KEY = "gpuops.nvidia/driver-upgrade"


@pytest.mark.parametrize("obj", [
    {},                                                     # no metadata
    {"metadata": None},
    {"metadata": {"annotations": None}},
    {"metadata": {"annotations": {"other": "{}"}}},         # another key
    {"metadata": {"annotations": {KEY: ""}}},
    {"metadata": {"annotations": {KEY: "{broken"}}},       # not JSON
    {"metadata": {"annotations": {KEY: '["a", "list"]'}}},  # JSON, not an object
    {"metadata": {"annotations": {KEY: '"text"'}}},
])
def test_anything_but_a_json_object_reads_as_none(obj):
    assert json_annotation(obj, KEY) is None


def test_a_json_object_is_returned_decoded():
    obj = {"metadata": {"annotations": {KEY: '{"state":"draining","to":"615.71.09"}'}}}
    assert json_annotation(obj, KEY) == {"state": "draining", "to": "615.71.09"}
