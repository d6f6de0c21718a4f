# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests for the k8s_node_names filter."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.nvidia.plugins.filter.k8s_node_names import k8s_node_names


def test_node_name_variable_wins_and_order_is_kept():
    hostvars = {"b.example.com": {"gpuops_k8s_node_name": "gpu-node-02"}, "a": {}}
    names = k8s_node_names(["b.example.com", "a"], hostvars)
    assert list(names.items()) == [("b.example.com", "gpu-node-02"), ("a", "a")]


def test_a_string_is_refused():
    with pytest.raises(AnsibleFilterError):
        k8s_node_names("gpu_nodes", {})
