# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests for label changes on nodes (k8s/node_labels.py): the API server's label rules, the patch, the values to
put back."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.node_labels import (
    label_problems, labels_patch, previous_values)

NODE = {"metadata": {"name": "gpu-node-01", "labels": {"gpu.example.com/tier": "train", "legacy": "yes"}}}


@pytest.mark.parametrize("labels", [
    {"gpu.example.com/tier": "batch"},
    {"nvidia.com/device-plugin.config": "a100-40gb-ts4", "nvidia.com/mig.config": "all-1g.10gb"},
    {"tier": ""},
    {"legacy": None},
    {"a" * 63: "b" * 63},
])
def test_labels_the_api_server_takes_have_no_problem(labels):
    assert label_problems(labels) == []


@pytest.mark.parametrize("labels,problem", [
    ({}, "labels must be a non-empty mapping"),
    ({"bad key": "x"}, "'bad key' is not a label key"),
    ({"Example.com/tier": "x"}, "'Example.com/tier' is not a label key"),
    ({"a" * 64: "x"}, "is not a label key"),
    ({"tier": "with space"}, "tier: 'with space' is not a label value"),
    ({"tier": "-dash"}, "is not a label value"),
    ({"tier": "x" * 64}, "is not a label value"),
    ({"tier": 4}, "tier: 4 is not a label value"),
])
def test_labels_the_api_server_would_refuse_are_named(labels, problem):
    problems = label_problems(labels)
    assert len(problems) == 1 and problem in problems[0]


def test_the_patch_holds_only_what_differs_and_null_removes():
    assert labels_patch(NODE, {"gpu.example.com/tier": "batch", "legacy": None, "absent": None}) == {
        "gpu.example.com/tier": "batch", "legacy": None}
    assert labels_patch(NODE, {"gpu.example.com/tier": "train"}) == {}


def test_the_previous_values_put_the_labels_back():
    previous = previous_values(NODE, ["gpu.example.com/tier", "new"])
    assert previous == {"gpu.example.com/tier": "train", "new": None}
    changed = {"metadata": {"labels": {"gpu.example.com/tier": "batch", "new": "x", "legacy": "yes"}}}
    assert labels_patch(changed, previous) == {"gpu.example.com/tier": "train", "new": None}
