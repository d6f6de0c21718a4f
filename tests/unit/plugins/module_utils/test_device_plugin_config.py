# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""What a named config of the NVIDIA device plugin shares and what a node then shows, read from the ConfigMaps of
tests/unit/fixtures/device_plugin_config (provenance in its PROVENANCE.md)."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import device_plugin_config as dpc

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "device_plugin_config")


def config(fixture, key):
    with open(os.path.join(FIXTURES, fixture)) as stream:
        return yaml.safe_load(yaml.safe_load(stream)["data"][key])


def test_the_operator_docs_cluster_wide_config_time_slices_each_gpu_four_times_under_its_own_name():
    sharing = dpc.config_sharing(config("time-slicing-config-all.yaml", "any"))
    assert sharing == {"strategy": "time-slicing", "replicas": 4, "resource": "nvidia.com/gpu", "renamed": False}
    assert dpc.expected_node(sharing, 8) == {
        "resource": "nvidia.com/gpu", "count": 32,
        "labels": {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}}


def test_rename_by_default_false_keeps_the_resource_name():
    sharing = dpc.config_sharing(config("helm-values-replicas-8.yaml", "default"))
    assert (sharing["resource"], sharing["replicas"], sharing["renamed"]) == ("nvidia.com/gpu", 8, False)


@pytest.mark.parametrize("key, strategy, replicas, resource", [
    ("shared-2", "time-slicing", 2, "nvidia.com/gpu.shared"),
    ("renamed-3", "time-slicing", 3, "nvidia.com/gpu.ts"),
    ("mps-10", "mps", 10, "nvidia.com/gpu"),
    ("one", "none", 1, "nvidia.com/gpu"),
])
def test_renames_mps_and_a_single_replica(key, strategy, replicas, resource):
    sharing = dpc.config_sharing(config("renamed-shared-CONSTRUCTED.yaml", key))
    assert (sharing["strategy"], sharing["replicas"], sharing["resource"]) == (strategy, replicas, resource)


def test_a_config_without_sharing_advertises_each_gpu_once():
    assert dpc.config_sharing({"version": "v1", "flags": {"migStrategy": "none"}})["replicas"] == 1
    assert dpc.config_sharing(None)["strategy"] == "none"


@pytest.mark.parametrize("bad", [
    {"version": "v2"},
    {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 0}]}}},
    {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": "4"}]}}},
    {"sharing": {"timeSlicing": ["nvidia.com/gpu"]}},
    ["not", "a", "mapping"],
])
def test_a_config_the_plugin_refuses_is_an_error(bad):
    with pytest.raises(dpc.ConfigError):
        dpc.config_sharing(bad)


def test_the_shared_suffix_of_the_product_label_follows_the_resource_name():
    shared = dpc.config_sharing(config("time-slicing-config-all.yaml", "any"))
    renamed = dpc.config_sharing(config("renamed-shared-CONSTRUCTED.yaml", "shared-2"))
    assert dpc.product_problem(shared, "NVIDIA-H100-80GB-HBM3-SHARED") is None
    assert "with the -SHARED suffix" in dpc.product_problem(shared, "NVIDIA-H100-80GB-HBM3")
    assert dpc.product_problem(renamed, "NVIDIA-H100-80GB-HBM3") is None
    assert dpc.product_problem(renamed, None) == "no nvidia.com/gpu.product label"


def test_a_node_whose_label_names_the_config_is_at_target():
    node = {"metadata": {"name": "gpu-node-01", "labels": {"nvidia.com/device-plugin.config": "ts-4"}}}
    assert dpc.node_at_target(node, "ts-4")
    assert not dpc.node_at_target(node, "ts-8")
    assert not dpc.node_at_target({"metadata": {"name": "gpu-node-02"}}, "ts-4")
    assert dpc.node_config({"metadata": {}}) == ""


def test_the_planner_skips_a_node_whose_label_names_the_config_and_starts_the_others():
    from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout import change, change_kinds

    kind = change_kinds.kind_of("device_plugin_config")
    assert (kind.disruption, kind.rollback) == ("none", True)
    labelled = {"metadata": {"name": "gpu-node-01", "labels": {dpc.CONFIG_LABEL: "ts-4"}}}
    unlabelled = {"metadata": {"name": "gpu-node-02", "labels": {}}}
    assert kind.node_at_target(labelled, {"config": "ts-4"})
    assert not kind.node_at_target(labelled, {"config": "ts-8"})
    assert not kind.node_at_target(unlabelled, {"config": "ts-4"})
    assert kind.node_at_target(labelled, {"config": "ts-4"}) == dpc.node_at_target(labelled, "ts-4")
    assert change.resume_action(None, "device-plugin-config-x", kind.node_at_target(labelled, {"config": "ts-4"})) \
        == "skip"
